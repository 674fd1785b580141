import { parseClusters, parseProfile, PayloadError } from '../src/payloads';
import { profileCaption, profileRects } from '../src/profile_view';
import { profile as payload } from './samples';

describe('the last profile in the sidebar', () => {
  it('parses the payload and refuses a malformed segment, naming it', () => {
    expect(parseProfile(payload)).toEqual(payload);
    const bad = { ...payload, ranks: [{ ...payload.ranks[0], wait: [[1]] }] };
    expect(() => parseProfile(bad)).toThrow(PayloadError);
    expect(() => parseProfile(bad)).toThrow(
      /profile rank 0.wait\[0\] is not \[start, length\]/
    );
  });
  it('comes with the snapshot of its cluster, checked like the rest', () => {
    const base = parseClusters({ time: 1, clusters: [] });
    expect(base.clusters).toEqual([]);
    const cluster = {
      cluster_id: '1-abcd0001',
      status: 'running',
      notebook: null,
      kernel_pid: null,
      controller_pid: null,
      supervisor_pid: null,
      world_size: 1,
      backend: 'gloo',
      kind: 'cpu',
      started_at: null,
      devices: [],
      ranks: [],
      used_bytes: 0,
      total_bytes: 0,
      profile_time: 5,
      profile: payload
    };
    expect(
      parseClusters({ time: 1, clusters: [cluster] }).clusters[0].profile
    ).toEqual(payload);
    expect(
      parseClusters({ time: 1, clusters: [{ ...cluster, profile: undefined }] })
        .clusters[0].profile
    ).toBeNull();
    const bad = { ...cluster, profile: { ...payload, window_ms: 'long' } };
    expect(() => parseClusters({ time: 1, clusters: [bad] })).toThrow(
      /profile payload.window_ms is not a number/
    );
  });
  it('draws a row per rank on one time axis', () => {
    const rects = profileRects(payload, 200, 8);
    const waits = rects.filter(r => r.kind === 'wait');
    expect(waits).toEqual([
      { kind: 'wait', x: 0, y: 1, width: 180, height: 5 }
    ]);
    const calls = rects.filter(r => r.kind === 'calls');
    expect(calls.map(r => [r.y, r.width])).toEqual([
      [0, 200],
      [8, 200]
    ]);
    const collectives = rects.filter(r => r.kind === 'collective');
    expect(collectives.map(r => r.x)).toEqual([180, 180]);
  });
  it('names the rank the others waited for', () => {
    expect(profileCaption(payload)).toBe(
      'rank 1 came last to 3 collectives · the others waited 0.90 s'
    );
    const even = {
      ...payload,
      summary: payload.summary.map(r => ({ ...r, last_to_arrive: 0 }))
    };
    expect(profileCaption(even)).toBe(
      '1000 ms profiled · no rank was waited for'
    );
  });
});
