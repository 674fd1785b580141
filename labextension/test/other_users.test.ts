import { barShares, otherUsersText } from '../src/other_users';
import { DeviceEntry } from '../src/payloads';

const GiB = 2 ** 30;
const gpu = (used: number, other: number | null): DeviceEntry => ({
  id: 'cuda:0',
  kind: 'cuda',
  index: 0,
  name: 'H100',
  used_bytes: used,
  total_bytes: 80 * GiB,
  utilization: 10,
  cluster_id: null,
  rank: null,
  own_bytes: other === null ? null : used - other,
  other_users_bytes: other
});

describe('other users on a shared GPU', () => {
  it('names the amount, never anyone', () => {
    expect(otherUsersText(gpu(30 * GiB, 20 * GiB))).toBe(
      'other users 20.0 GiB'
    );
  });

  it('says nothing when nobody else holds memory or NVML cannot tell', () => {
    expect(otherUsersText(gpu(30 * GiB, 0))).toBe('');
    expect(otherUsersText(gpu(30 * GiB, null))).toBe('');
  });

  it('splits the bar: the rest of the used part, then other users', () => {
    const [rest, other] = barShares(gpu(40 * GiB, 20 * GiB));
    expect(rest).toBeCloseTo(0.25);
    expect(other).toBeCloseTo(0.25);
    expect(barShares(gpu(40 * GiB, null))).toEqual([0.5, 0]);
    // other users' part never exceeds what the device reports used
    expect(
      barShares({ ...gpu(10 * GiB, 0), other_users_bytes: 30 * GiB })
    ).toEqual([0, 0.125]);
  });
});
