/**
 * Ranks of a cluster across hosts (`%mgpu_init --hosts`, `--launcher`, `--connect`) are shown under
 * one heading per host; ranks come in host order, so a heading starts where the host changes.
 */
import { RankInfo } from './payloads';

/** The host heading to put before rank `r` when the rank shown before it ran on `previous`; null for none. */
export function hostHeading(
  previous: string | null | undefined,
  r: RankInfo
): string | null {
  return r.host && r.host !== previous ? r.host : null;
}
