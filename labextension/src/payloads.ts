/**
 * One interface per JSON payload of the server extension (jupyter_mgpu/server/manager.py),
 * mirroring the Python keys exactly, and checked parsers that turn unknown JSON into them.
 */

/** One rank of a cluster (`_rank_entry` in manager.py). */
export interface RankInfo {
  rank: number;
  pid: number | null;
  alive: boolean;
  /** The rank's host in a cluster across hosts (`--launcher`, `--hosts`, `--connect`), else null. */
  host: string | null;
  device: string | null;
  kind: string | null;
  state: string;
  op: string | null;
  /** What the rank does now: `waiting in barrier #7 for 44 s`, `running line 3 of the cell for 45 s`; null when idle. */
  activity: string | null;
  used_bytes: number;
  peak_bytes: number;
  total_bytes: number;
  /** `389.4 MiB / 5.2 GiB`, formatted by the server (`used_of_limit`); empty before the first sample. */
  figures: string;
  sample_age_s: number | null;
}

/** A device a cluster was started on (`DeviceInfo.to_dict()` in devices.py). */
export interface ClusterDevice {
  kind: string;
  index: number;
  name: string;
  total_memory: number;
}

/** One running cluster (`ClusterManager.describe`). */
export interface ClusterInfo {
  cluster_id: string;
  status: string;
  notebook: string | null;
  kernel_pid: number | null;
  /** The server's id of the kernel that started the cluster (`server/kernels.py`); null when it is no
   * kernel of this server (or an older server): the current notebook's cluster is told by it. */
  kernel_id: string | null;
  controller_pid: number | null;
  supervisor_pid: number | null;
  world_size: number;
  backend: string | null;
  kind: string;
  started_at: number | null;
  devices: ClusterDevice[];
  ranks: RankInfo[];
  used_bytes: number;
  total_bytes: number;
  /** When the cluster's last `mg.profile()` ended (s since the epoch), null before the first. */
  profile_time: number | null;
  /** That profile, in the first snapshot of a stream connection after it ended (else null). */
  profile: ProfilePayload | null;
}

/** One rank of a profile as the sidebar draws it: `[start ms, length ms]` from the profile's first call. */
export interface ProfileRank {
  rank: number;
  calls: [number, number][];
  collective: [number, number][];
  wait: [number, number][];
}

/** One rank's row of a profile's summary (`summary_rows` in profiling/profile_data.py). */
export interface ProfileSummaryRow {
  rank: number;
  compute_s: number;
  collective_s: number;
  wait_s: number;
  last_to_arrive: number;
  calls_s: number;
}

/** A cluster's last profile: `ClusterInfo.profile`, `GET /mgpu/api/clusters/<id>/profile` (`sidebar_data` in profiling/profile_data.py). */
export interface ProfilePayload {
  profiled_at: number;
  window_ms: number;
  ranks: ProfileRank[];
  summary: ProfileSummaryRow[];
}

/** `GET /mgpu/api/clusters`. */
export interface ClustersPayload {
  time: number;
  clusters: ClusterInfo[];
}

/** One device of the host (`ClusterManager.devices`). */
export interface DeviceEntry {
  id: string;
  kind: string;
  index: number;
  name: string;
  used_bytes: number;
  total_bytes: number;
  utilization: number | null;
  cluster_id: string | null;
  rank: number | null;
  /** NVML GPUs: bytes held by this user's processes / by other users' (never who); null when unknown. */
  own_bytes: number | null;
  other_users_bytes: number | null;
}

/** `GET /mgpu/api/devices`; in a stream frame, NVML's GPUs only (the clusters' CPU devices are their ranks). */
export interface DevicesPayload {
  time: number;
  host: string;
  source: 'nvml' | 'clusters';
  devices: DeviceEntry[];
}

/** A `snapshot` frame of the `/mgpu/api/stream` websocket. */
export interface SnapshotMessage {
  type: 'snapshot';
  time: number;
  clusters: ClusterInfo[];
  devices: DevicesPayload;
  interval: number;
  paused: boolean;
}

/** An `error` frame of the stream (a malformed client message). */
export interface StreamErrorMessage {
  type: 'error';
  message: string;
}

/** `DELETE /mgpu/api/clusters/<id>`. */
export interface StopPayload {
  cluster_id: string;
  signalled: number[];
  killed: number[];
  remaining: number[];
}

/** A client → server stream message. */
export type StreamRequest =
  | { type: 'configure'; interval?: number; paused?: boolean }
  | { type: 'pause' }
  | { type: 'resume' }
  | { type: 'refresh' };

/** Raised when a payload does not have the shape the server promises. */
export class PayloadError extends Error {}

type Obj = Record<string, unknown>;

function obj(value: unknown, what: string): Obj {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new PayloadError(`${what} is not an object`);
  }
  return value as Obj;
}

function num(o: Obj, key: string, what: string): number {
  const v = o[key];
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw new PayloadError(`${what}.${key} is not a number`);
  }
  return v;
}

function numOrNull(o: Obj, key: string, what: string): number | null {
  return o[key] === null || o[key] === undefined ? null : num(o, key, what);
}

function str(o: Obj, key: string, what: string): string {
  const v = o[key];
  if (typeof v !== 'string') {
    throw new PayloadError(`${what}.${key} is not a string`);
  }
  return v;
}

function strOrNull(o: Obj, key: string, what: string): string | null {
  return o[key] === null || o[key] === undefined ? null : str(o, key, what);
}

function arr(o: Obj, key: string, what: string): unknown[] {
  const v = o[key];
  if (!Array.isArray(v)) {
    throw new PayloadError(`${what}.${key} is not a list`);
  }
  return v;
}

export function parseRank(value: unknown): RankInfo {
  const o = obj(value, 'rank');
  const what = `rank ${String(o.rank)}`;
  return {
    rank: num(o, 'rank', 'rank'),
    pid: numOrNull(o, 'pid', what),
    alive: o.alive === true,
    host: o.host === undefined ? null : strOrNull(o, 'host', what),
    device: strOrNull(o, 'device', what),
    kind: strOrNull(o, 'kind', what),
    state: str(o, 'state', what),
    op: strOrNull(o, 'op', what),
    activity: o.activity === undefined ? null : strOrNull(o, 'activity', what),
    used_bytes: num(o, 'used_bytes', what),
    peak_bytes: num(o, 'peak_bytes', what),
    total_bytes: num(o, 'total_bytes', what),
    figures: strOrNull(o, 'figures', what) ?? '',
    sample_age_s: numOrNull(o, 'sample_age_s', what)
  };
}

export function parseCluster(value: unknown): ClusterInfo {
  const o = obj(value, 'cluster');
  const what = `cluster ${String(o.cluster_id)}`;
  return {
    cluster_id: str(o, 'cluster_id', 'cluster'),
    status: str(o, 'status', what),
    notebook: strOrNull(o, 'notebook', what),
    kernel_pid: numOrNull(o, 'kernel_pid', what),
    kernel_id:
      o.kernel_id === undefined ? null : strOrNull(o, 'kernel_id', what),
    controller_pid: numOrNull(o, 'controller_pid', what),
    supervisor_pid: numOrNull(o, 'supervisor_pid', what),
    world_size: num(o, 'world_size', what),
    backend: strOrNull(o, 'backend', what),
    kind: str(o, 'kind', what),
    started_at: numOrNull(o, 'started_at', what),
    devices: arr(o, 'devices', what).map((d, i) => {
      const dd = obj(d, `${what} device ${i}`);
      return {
        kind: str(dd, 'kind', `${what} device`),
        index: num(dd, 'index', `${what} device`),
        name: str(dd, 'name', `${what} device`),
        total_memory: num(dd, 'total_memory', `${what} device`)
      };
    }),
    ranks: arr(o, 'ranks', what).map(parseRank),
    used_bytes: num(o, 'used_bytes', what),
    total_bytes: num(o, 'total_bytes', what),
    profile_time:
      o.profile_time === undefined ? null : numOrNull(o, 'profile_time', what),
    profile:
      o.profile === undefined || o.profile === null
        ? null
        : parseProfile(o.profile)
  };
}

function segments(o: Obj, key: string, what: string): [number, number][] {
  return arr(o, key, what).map((s, i) => {
    if (
      !Array.isArray(s) ||
      s.length !== 2 ||
      typeof s[0] !== 'number' ||
      typeof s[1] !== 'number'
    ) {
      throw new PayloadError(`${what}.${key}[${i}] is not [start, length]`);
    }
    return [s[0], s[1]];
  });
}

export function parseProfile(value: unknown): ProfilePayload {
  const o = obj(value, 'profile payload');
  const what = 'profile payload';
  return {
    profiled_at: num(o, 'profiled_at', what),
    window_ms: num(o, 'window_ms', what),
    ranks: arr(o, 'ranks', what).map((r, i) => {
      const rr = obj(r, `profile rank ${i}`);
      const w = `profile rank ${String(rr.rank)}`;
      return {
        rank: num(rr, 'rank', w),
        calls: segments(rr, 'calls', w),
        collective: segments(rr, 'collective', w),
        wait: segments(rr, 'wait', w)
      };
    }),
    summary: arr(o, 'summary', what).map((r, i) => {
      const rr = obj(r, `profile summary ${i}`);
      const w = `profile summary of rank ${String(rr.rank)}`;
      return {
        rank: num(rr, 'rank', w),
        compute_s: num(rr, 'compute_s', w),
        collective_s: num(rr, 'collective_s', w),
        wait_s: num(rr, 'wait_s', w),
        last_to_arrive: num(rr, 'last_to_arrive', w),
        calls_s: num(rr, 'calls_s', w)
      };
    })
  };
}

export function parseClusters(value: unknown): ClustersPayload {
  const o = obj(value, 'clusters payload');
  return {
    time: num(o, 'time', 'clusters payload'),
    clusters: arr(o, 'clusters', 'clusters payload').map(parseCluster)
  };
}

export function parseDevice(value: unknown): DeviceEntry {
  const o = obj(value, 'device');
  const what = `device ${String(o.id)}`;
  return {
    id: str(o, 'id', 'device'),
    kind: str(o, 'kind', what),
    index: num(o, 'index', what),
    name: str(o, 'name', what),
    used_bytes: num(o, 'used_bytes', what),
    total_bytes: num(o, 'total_bytes', what),
    utilization: numOrNull(o, 'utilization', what),
    cluster_id: strOrNull(o, 'cluster_id', what),
    rank: numOrNull(o, 'rank', what),
    own_bytes: numOrNull(o, 'own_bytes', what),
    other_users_bytes: numOrNull(o, 'other_users_bytes', what)
  };
}

export function parseDevices(value: unknown): DevicesPayload {
  const o = obj(value, 'devices payload');
  const source = str(o, 'source', 'devices payload');
  if (source !== 'nvml' && source !== 'clusters') {
    throw new PayloadError(
      `devices payload.source is ${source}, expected nvml or clusters`
    );
  }
  return {
    time: num(o, 'time', 'devices payload'),
    host: str(o, 'host', 'devices payload'),
    source,
    devices: arr(o, 'devices', 'devices payload').map(parseDevice)
  };
}

export function parseStop(value: unknown): StopPayload {
  const o = obj(value, 'stop payload');
  const ints = (k: string) => arr(o, k, 'stop payload').map(v => Number(v));
  return {
    cluster_id: str(o, 'cluster_id', 'stop payload'),
    signalled: ints('signalled'),
    killed: ints('killed'),
    remaining: ints('remaining')
  };
}

/** Parse one text frame of the stream; throws PayloadError on anything else. */
export function parseStreamMessage(
  text: string
): SnapshotMessage | StreamErrorMessage {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new PayloadError('stream frame is not JSON');
  }
  const o = obj(value, 'stream frame');
  if (o.type === 'error') {
    return { type: 'error', message: str(o, 'message', 'error frame') };
  }
  if (o.type !== 'snapshot') {
    throw new PayloadError(`stream frame has unknown type ${String(o.type)}`);
  }
  return {
    type: 'snapshot',
    time: num(o, 'time', 'snapshot'),
    clusters: arr(o, 'clusters', 'snapshot').map(parseCluster),
    devices: parseDevices(o.devices),
    interval: num(o, 'interval', 'snapshot'),
    paused: o.paused === true
  };
}
