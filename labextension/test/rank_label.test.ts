import { RankInfo } from '../src/payloads';
import { rankLabel, rankTitle, stateCounts } from '../src/rank_label';
import { rank as sample } from './samples';

const rank = (activity: string | null, pid: number | null = 123): RankInfo => ({
  rank: 1,
  pid,
  alive: true,
  host: null,
  device: pid === null ? null : 'cpu:1',
  kind: 'cpu',
  state: 'busy',
  op: '%%mgpu cell',
  activity,
  used_bytes: 0,
  peak_bytes: 0,
  total_bytes: 1,
  figures: '',
  sample_age_s: 0.1
});

describe('rankLabel', () => {
  it('names the rank by device and pid, the state apart (a narrow row cuts the name, not the state)', () => {
    const busy = rank('waiting in barrier #7 for 44 s');
    expect(rankLabel(busy)).toBe('rank 1 · cpu:1 · pid 123');
    expect(rankLabel(busy)).not.toContain('busy');
    expect(rankLabel(busy, true)).toBe('rank 1 · cpu:1');
    expect(rankLabel(rank(null, null))).toBe('rank 1');
  });
  it('puts everything in the tooltip', () => {
    expect(rankTitle(rank(null))).toBe(
      'rank 1 · cpu:1 · pid 123 · busy · %%mgpu cell'
    );
    expect(rankTitle(sample(10))).toBe(
      'rank 10 · cpu:10 · pid 110 · idle · 1010 B / 3.9 KiB'
    );
  });
});

describe('stateCounts', () => {
  it('counts ranks by state, those that ask for attention first and idle last', () => {
    const ranks = [
      ...Array.from({ length: 29 }, (_, r) => sample(r)),
      sample(29, { state: 'busy' }),
      sample(30, { state: 'dead' }),
      sample(31, { state: 'busy' }),
      sample(32, { state: 'weird' })
    ];
    expect(stateCounts(ranks)).toBe('1 dead · 2 busy · 1 weird · 29 idle');
    expect(stateCounts([sample(0, { state: 'starting' })])).toBe('1 starting');
    expect(stateCounts([])).toBe('');
  });
});
