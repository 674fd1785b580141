import {
  parseClusters,
  parseDevices,
  parseStop,
  parseStreamMessage,
  PayloadError
} from '../src/payloads';
import { rank } from './samples';

const cluster = {
  cluster_id: '123-abcd0001',
  status: 'running',
  notebook: 'notebooks/01_quickstart.ipynb',
  kernel_pid: 123,
  kernel_id: '0f1e2d3c-kernel',
  controller_pid: 124,
  supervisor_pid: 125,
  world_size: 2,
  backend: 'gloo',
  kind: 'cpu',
  started_at: 1700000000.5,
  devices: [
    { kind: 'cpu', index: 0, name: 'CPU virtual device 0', total_memory: 4000 },
    { kind: 'cpu', index: 1, name: 'CPU virtual device 1', total_memory: 4000 }
  ],
  ranks: [rank(0), rank(1)],
  used_bytes: 2001,
  total_bytes: 8000,
  profile_time: null,
  profile: null
};

describe('parseClusters', () => {
  it('keeps every key of the Python payload', () => {
    const parsed = parseClusters({ time: 1, clusters: [cluster] });
    expect(parsed.clusters[0]).toEqual(cluster);
  });
  it('rejects a payload with a missing or mistyped key, naming it', () => {
    expect(() => parseClusters({ time: 1 })).toThrow(
      /clusters payload.clusters is not a list/
    );
    const bad = { ...cluster, ranks: [{ ...rank(0), used_bytes: '12' }] };
    expect(() => parseClusters({ time: 1, clusters: [bad] })).toThrow(
      /rank 0.used_bytes is not a number/
    );
    expect(() => parseClusters(null)).toThrow(PayloadError);
  });
  it('accepts null for optional fields', () => {
    const c = {
      ...cluster,
      notebook: null,
      ranks: [{ ...rank(0), pid: null, device: null, sample_age_s: null }]
    };
    const parsed = parseClusters({ time: 1, clusters: [c] });
    expect(parsed.clusters[0].notebook).toBeNull();
    expect(parsed.clusters[0].ranks[0].pid).toBeNull();
    // a cluster of no kernel of this server, and an older server that does not name kernels at all
    expect(
      parseClusters({ time: 1, clusters: [{ ...c, kernel_id: null }] })
        .clusters[0].kernel_id
    ).toBeNull();
    const older: Record<string, unknown> = { ...c };
    delete older.kernel_id;
    expect(
      parseClusters({ time: 1, clusters: [older] }).clusters[0].kernel_id
    ).toBeNull();
    expect(() =>
      parseClusters({ time: 1, clusters: [{ ...c, kernel_id: 7 }] })
    ).toThrow(/kernel_id is not a string/);
  });
});

describe('parseDevices', () => {
  it('parses NVML devices and rejects an unknown source', () => {
    const dev = {
      id: 'cuda:0',
      kind: 'cuda',
      index: 0,
      name: 'H100',
      used_bytes: 1,
      total_bytes: 2,
      utilization: 50,
      cluster_id: null,
      rank: null,
      own_bytes: 1,
      other_users_bytes: 0
    };
    expect(
      parseDevices({ time: 1, host: 'h', source: 'nvml', devices: [dev] })
        .devices[0]
    ).toEqual(dev);
    // a server from before the split sends neither share: unknown, not an error
    const older: Record<string, unknown> = { ...dev };
    delete older.own_bytes;
    delete older.other_users_bytes;
    expect(
      parseDevices({ time: 1, host: 'h', source: 'nvml', devices: [older] })
        .devices[0]
    ).toEqual({
      ...dev,
      own_bytes: null,
      other_users_bytes: null
    });
    expect(() =>
      parseDevices({ time: 1, host: 'h', source: 'magic', devices: [] })
    ).toThrow(/source/);
  });
});

describe('parseStreamMessage', () => {
  it('parses snapshots and errors, rejects anything else', () => {
    const snap = parseStreamMessage(
      JSON.stringify({
        type: 'snapshot',
        time: 5,
        interval: 0.5,
        paused: false,
        clusters: [cluster],
        devices: { time: 5, host: 'h', source: 'clusters', devices: [] }
      })
    );
    expect(snap.type).toBe('snapshot');
    expect(parseStreamMessage('{"type": "error", "message": "bad"}')).toEqual({
      type: 'error',
      message: 'bad'
    });
    expect(() => parseStreamMessage('nope')).toThrow(/not JSON/);
    expect(() => parseStreamMessage('{"type": "other"}')).toThrow(
      /unknown type/
    );
  });
});

describe('parseStop', () => {
  it('parses the stop result', () => {
    expect(
      parseStop({
        cluster_id: 'x',
        signalled: [1, 2],
        killed: [],
        remaining: []
      })
    ).toEqual({
      cluster_id: 'x',
      signalled: [1, 2],
      killed: [],
      remaining: []
    });
  });
});
