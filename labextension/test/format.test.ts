import {
  formatBytes,
  formatUsedTotal,
  fraction,
  initCommand
} from '../src/format';
import sizeCases from './size_format.json';
import { parseStreamMessage, SnapshotMessage } from '../src/payloads';

const GiB = 2 ** 30;

function snapshot(
  devices: Array<[string, number, number]>,
  paused = false,
  source = 'clusters'
): SnapshotMessage {
  return parseStreamMessage(
    JSON.stringify({
      type: 'snapshot',
      time: 1000,
      interval: 1,
      paused,
      clusters: [],
      devices: {
        time: 1000,
        host: 'node1',
        source,
        devices: devices.map(([kind, used, total], i) => ({
          id: `c/${kind}:${i}`,
          kind,
          index: i,
          name: `${kind} ${i}`,
          used_bytes: used,
          total_bytes: total,
          utilization: null,
          cluster_id: source === 'clusters' ? 'c' : null,
          rank: source === 'clusters' ? i : null
        }))
      }
    })
  ) as SnapshotMessage;
}

describe('formatBytes', () => {
  it('prints every size as the Python views do (one shared table of cases)', () => {
    for (const [bytes, text] of sizeCases.cases as Array<[number, string]>) {
      expect(formatBytes(bytes)).toBe(text);
    }
  });
});

describe('formatUsedTotal', () => {
  it('shows each size in its own unit', () => {
    expect(formatUsedTotal(3.1 * GiB, 8 * GiB)).toBe('3.1 GiB / 8.0 GiB');
    expect(formatUsedTotal(200 * 2 ** 20, 8 * GiB)).toBe('200.0 MiB / 8.0 GiB');
    expect(formatUsedTotal(5, 10)).toBe('5 B / 10 B');
  });
});

describe('fraction', () => {
  it('clamps to [0, 1] and treats an unknown total as 0', () => {
    expect(fraction(1, 4)).toBe(0.25);
    expect(fraction(5, 4)).toBe(1);
    expect(fraction(5, 0)).toBe(0);
    expect(fraction(-1, 4)).toBe(0);
  });
});

describe('initCommand', () => {
  it('pre-fills the GPU count, else the CPU default', () => {
    expect(
      initCommand(
        snapshot(
          [
            ['cuda', 0, 1],
            ['cuda', 0, 1],
            ['cuda', 0, 1]
          ],
          false,
          'nvml'
        )
      )
    ).toBe('%mgpu_init 3');
    expect(initCommand(snapshot([['cpu', 0, 1]]))).toBe('%mgpu_init 2');
    expect(initCommand(null, 4)).toBe('%mgpu_init 4');
  });
});
