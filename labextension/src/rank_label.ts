/**
 * How the sidebar names a rank: its device, pid and state.
 */
import { RankInfo } from './payloads';

/** `rank 0 · cpu:0 · pid 123 · busy · %%mgpu cell`; a rank not up yet (or no more) says only what is
 * happening. What a busy rank does now (`waiting in barrier #7 for 44 s`) is the line under it. */
export function rankLabel(r: RankInfo): string {
  if (r.pid === null || r.device === null) {
    return `rank ${r.rank} · ${r.state}`;
  }
  const op = r.op ? ` · ${r.op}` : '';
  return `rank ${r.rank} · ${r.device} · pid ${r.pid} · ${r.state}${op}`;
}
