import { groupByHost, groupSummary } from '../src/hosts';
import { RankInfo } from '../src/payloads';
import { rank as sample } from './samples';

const rank = (r: number, host: string | null): RankInfo =>
  sample(r, { host, device: host ? `${host}:cpu:${r}` : `cpu:${r}` });

describe('ranks grouped by host', () => {
  it('makes one group per host, in order, each rank in exactly one', () => {
    const ranks = [
      rank(0, 'node1'),
      rank(1, 'node1'),
      rank(2, 'node2'),
      rank(3, 'node2')
    ];
    const groups = groupByHost(ranks);
    expect(groups.map(g => g.host)).toEqual(['node1', 'node2']);
    expect(groups.map(g => g.ranks.map(r => r.rank))).toEqual([
      [0, 1],
      [2, 3]
    ]);
  });

  it('has one group of every rank on one host', () => {
    const groups = groupByHost([rank(0, null), rank(1, null)]);
    expect(groups).toHaveLength(1);
    expect(groups[0].host).toBeNull();
    expect(groups[0].ranks).toHaveLength(2);
    expect(groupByHost([])).toEqual([]);
  });

  it('sums a group up: ranks, states, memory', () => {
    const ranks = [
      rank(0, 'node1'),
      { ...rank(1, 'node1'), state: 'busy' },
      rank(2, 'node1')
    ];
    expect(groupSummary(ranks)).toBe(
      '3 ranks · 1 busy · 2 idle · 2.9 KiB / 11.7 KiB'
    );
    expect(groupSummary([{ ...rank(0, null), total_bytes: 0 }])).toBe(
      '1 rank · 1 idle'
    );
  });
});
