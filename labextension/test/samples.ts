/** Sample payloads the labextension's tests share: a rank, a cluster, a big cluster across hosts, a profile. */
import { ClusterInfo, ProfilePayload, RankInfo } from '../src/payloads';

export const rank = (r: number, over: Partial<RankInfo> = {}): RankInfo => ({
  rank: r,
  pid: 100 + r,
  alive: true,
  host: null,
  device: `cpu:${r}`,
  kind: 'cpu',
  state: 'idle',
  op: null,
  activity: null,
  used_bytes: 1000 + r,
  peak_bytes: 2000,
  total_bytes: 4000,
  figures: `${1000 + r} B / 3.9 KiB`,
  sample_age_s: 0.05,
  ...over
});

export const cluster = (
  id: string,
  world: number,
  over: Partial<ClusterInfo> = {}
): ClusterInfo => ({
  cluster_id: id,
  status: 'running',
  notebook: 'notebooks/01_quickstart.ipynb',
  kernel_pid: 123,
  kernel_id: null,
  controller_pid: 124,
  supervisor_pid: 125,
  world_size: world,
  backend: 'gloo',
  kind: 'cpu',
  started_at: 1700000000.5,
  devices: [],
  ranks: Array.from({ length: world }, (_, r) => rank(r)),
  used_bytes: 2001,
  total_bytes: 8000,
  profile_time: null,
  profile: null,
  ...over
});

/** A cluster of `world` ranks on `hosts` hosts (null: one host), rank r busy when `busy(r)`, rank 5 dead. */
export const bigCluster = (
  id: string,
  world: number,
  hosts: number | null,
  busy: (r: number) => boolean = r => r % 16 === 3
): ClusterInfo => {
  const perHost = hosts === null ? world : Math.ceil(world / hosts);
  const ranks = Array.from({ length: world }, (_, r) =>
    rank(r, {
      host: hosts === null ? null : `node${Math.floor(r / perHost) + 1}`,
      device: `cpu:${hosts === null ? r : r % perHost}`,
      pid: 20000 + r,
      state: r === 5 ? 'dead' : busy(r) ? 'busy' : 'idle',
      op: busy(r) ? '%%mgpu cell' : null,
      activity: busy(r) ? `running line 3 of the cell for ${r} s` : null,
      used_bytes: (r + 1) * 2 ** 20,
      total_bytes: 4 * 2 ** 30,
      figures: `${r + 1}.0 MiB / 4.0 GiB`
    })
  );
  return cluster(id, world, {
    ranks,
    used_bytes: ranks.reduce((s, r) => s + r.used_bytes, 0),
    total_bytes: world * 4 * 2 ** 30
  });
};

export const profile: ProfilePayload = {
  profiled_at: 1700000000,
  window_ms: 1000,
  ranks: [
    { rank: 0, calls: [[0, 1000]], collective: [[900, 10]], wait: [[0, 900]] },
    { rank: 1, calls: [[0, 1000]], collective: [[900, 10]], wait: [] }
  ],
  summary: [
    {
      rank: 0,
      compute_s: 0.09,
      collective_s: 0.91,
      wait_s: 0.9,
      last_to_arrive: 0,
      calls_s: 1
    },
    {
      rank: 1,
      compute_s: 0.99,
      collective_s: 0.01,
      wait_s: 0,
      last_to_arrive: 3,
      calls_s: 1
    }
  ]
};
