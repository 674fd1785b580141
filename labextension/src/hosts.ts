/**
 * Ranks under their host: a cluster across hosts (`%mgpu_init --hosts`, `--launcher`, `--connect`) shows
 * one group per host, with a summary line that stays readable when the group is folded (its ranks
 * counted by state, its memory); ranks come in host order, so a group is a run of one host's ranks.
 */
import { formatUsedTotal } from './format';
import { RankInfo } from './payloads';
import { stateCounts } from './rank_label';

/** The ranks of one host (`host` null: a cluster on one host, one group of every rank). */
export interface IRankGroup {
  host: string | null;
  ranks: RankInfo[];
}

/** The ranks grouped by host, in the order the hosts first appear; each rank in exactly one group. */
export function groupByHost(ranks: RankInfo[]): IRankGroup[] {
  const groups = new Map<string | null, IRankGroup>();
  for (const r of ranks) {
    const group = groups.get(r.host) ?? { host: r.host, ranks: [] };
    group.ranks.push(r);
    groups.set(r.host, group);
  }
  return Array.from(groups.values());
}

/** `8 ranks · 7 idle · 1 busy · 2.3 GiB / 32.0 GiB`: a group (or a whole cluster) at a glance. */
export function groupSummary(ranks: RankInfo[]): string {
  const n = ranks.length === 1 ? '1 rank' : `${ranks.length} ranks`;
  const used = ranks.reduce((s, r) => s + r.used_bytes, 0);
  const total = ranks.reduce((s, r) => s + r.total_bytes, 0);
  const memory = total > 0 ? ` · ${formatUsedTotal(used, total)}` : '';
  return `${n} · ${stateCounts(ranks)}${memory}`;
}
