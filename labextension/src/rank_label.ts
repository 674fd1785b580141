/**
 * How the sidebar names a rank: who it is (`rank 10 · cpu:10 · pid 123`) and, apart, its state. A
 * narrow row wraps the name between its pieces and never cuts it; the state has its own element.
 */
import { RankInfo } from './payloads';

/** States that ask for attention first when ranks are counted; any other state comes before `idle`. */
const STATE_ORDER = [
  'dead',
  'busy',
  'starting',
  'restarting',
  'stopping',
  'stopped',
  'unknown'
];

/** `rank 0 · cpu:0 · pid 123`; `compact` (many ranks, one line each) leaves the pid to the tooltip; a
 * rank not up yet (or no more) is `rank 0`. */
export function rankLabel(r: RankInfo, compact = false): string {
  if (r.pid === null || r.device === null) {
    return `rank ${r.rank}`;
  }
  return compact
    ? `rank ${r.rank} · ${r.device}`
    : `rank ${r.rank} · ${r.device} · pid ${r.pid}`;
}

/** Everything about the rank on one line, for its tooltip: `rank 1 · cpu:1 · pid 101 · busy · %%mgpu cell`. */
export function rankTitle(r: RankInfo): string {
  const op = r.op ? ` · ${r.op}` : '';
  const figures = r.figures ? ` · ${r.figures}` : '';
  return `${rankLabel(r)} · ${r.state}${op}${figures}`;
}

/** `2 dead · 1 busy · 29 idle`: ranks counted by state, the states that ask for attention first. */
export function stateCounts(ranks: RankInfo[]): string {
  const counts = new Map<string, number>();
  for (const r of ranks) {
    counts.set(r.state, (counts.get(r.state) ?? 0) + 1);
  }
  const rank = (s: string) => {
    const i = STATE_ORDER.indexOf(s);
    return s === 'idle'
      ? STATE_ORDER.length + 1
      : i < 0
        ? STATE_ORDER.length
        : i;
  };
  return Array.from(counts.entries())
    .sort(([a], [b]) => rank(a) - rank(b) || a.localeCompare(b))
    .map(([s, n]) => `${n} ${s}`)
    .join(' · ');
}
