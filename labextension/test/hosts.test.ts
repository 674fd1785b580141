import { hostHeading } from '../src/hosts';
import { RankInfo } from '../src/payloads';

const rank = (r: number, host: string | null): RankInfo => ({
  rank: r,
  pid: 10 + r,
  alive: true,
  host,
  device: host ? `${host}:cpu:${r}` : `cpu:${r}`,
  kind: 'cpu',
  state: 'idle',
  op: null,
  activity: null,
  used_bytes: 0,
  peak_bytes: 0,
  total_bytes: 1,
  figures: '',
  sample_age_s: 0.1
});

describe('ranks grouped by host', () => {
  it('starts a heading where the host changes, and only there', () => {
    const ranks = [
      rank(0, 'node1'),
      rank(1, 'node1'),
      rank(2, 'node2'),
      rank(3, 'node2')
    ];
    let previous: string | null = null;
    const headings = ranks.map(r => {
      const h = hostHeading(previous, r);
      previous = r.host;
      return h;
    });
    expect(headings).toEqual(['node1', null, 'node2', null]);
  });

  it('has no headings on one host', () => {
    expect(hostHeading(undefined, rank(0, null))).toBeNull();
    expect(hostHeading(null, rank(1, null))).toBeNull();
  });
});
