import { RankInfo } from '../src/payloads';
import { rankLabel } from '../src/rank_label';

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
  it('says device, pid, state and op, and the state alone before a rank is up', () => {
    expect(rankLabel(rank('waiting in barrier #7 for 44 s'))).toBe(
      'rank 1 · cpu:1 · pid 123 · busy · %%mgpu cell'
    );
    expect(rankLabel(rank(null, null))).toBe('rank 1 · busy');
  });
});
