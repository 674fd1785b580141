import { formatBytes, formatUsedTotal, fraction, initCommand, statusText } from '../src/format';
import { parseStreamMessage, SnapshotMessage } from '../src/payloads';

const GiB = 2 ** 30;

function snapshot(devices: Array<[string, number, number]>, paused = false, source = 'clusters'): SnapshotMessage {
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
  it('uses binary units by default', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(formatBytes(1024)).toBe('1.0 KiB');
    expect(formatBytes(3.1 * GiB)).toBe('3.1 GiB');
    expect(formatBytes(256 * 2 ** 20)).toBe('256.0 MiB');
  });
  it('uses decimal units on request', () => {
    expect(formatBytes(1500, 'decimal')).toBe('1.5 kB');
    expect(formatBytes(8e9, 'decimal')).toBe('8.0 GB');
  });
});

describe('formatUsedTotal', () => {
  it('shows both in the unit of the total', () => {
    expect(formatUsedTotal(3.1 * GiB, 8 * GiB)).toBe('3.1 / 8.0 GiB');
    expect(formatUsedTotal(200 * 2 ** 20, 8 * GiB)).toBe('0.2 / 8.0 GiB');
    expect(formatUsedTotal(5, 10)).toBe('5 / 10 B');
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

describe('statusText', () => {
  it('summarises four CPU virtual devices', () => {
    const snap = snapshot([
      ['cpu', 0.8 * GiB, 2 * GiB],
      ['cpu', 0.8 * GiB, 2 * GiB],
      ['cpu', 0.75 * GiB, 2 * GiB],
      ['cpu', 0.75 * GiB, 2 * GiB]
    ]);
    expect(statusText(snap)).toBe('mgpu 4× cpu · 3.1 / 8.0 GiB');
  });
  it('summarises GPUs, decimal units, paused and empty states', () => {
    const snap = snapshot([['cuda', 40e9, 80e9], ['cuda', 0, 80e9]], false, 'nvml');
    expect(statusText(snap, 'decimal')).toBe('mgpu 2× cuda · 40.0 / 160.0 GB');
    expect(statusText(snapshot([], true))).toBe('mgpu – (paused)');
    expect(statusText(snapshot([]))).toBe('mgpu –');
    expect(statusText(null)).toBe('mgpu …');
  });
});

describe('initCommand', () => {
  it('pre-fills the GPU count, else the CPU default', () => {
    expect(initCommand(snapshot([['cuda', 0, 1], ['cuda', 0, 1], ['cuda', 0, 1]], false, 'nvml'))).toBe(
      '%mgpu_init 3'
    );
    expect(initCommand(snapshot([['cpu', 0, 1]]))).toBe('%mgpu_init 2');
    expect(initCommand(null, 4)).toBe('%mgpu_init 4');
  });
});
