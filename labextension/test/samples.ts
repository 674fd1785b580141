/** Sample payloads the labextension's tests share: a rank, a cluster, a profile. */
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
