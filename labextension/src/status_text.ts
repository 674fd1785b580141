/**
 * What the status-bar item says, and its tooltip. It reflects the current notebook (JupyterLab's
 * convention for status items): its kernel's cluster, `mgpu 4× cpu · 1.5 GiB / 20.8 GiB`. A notebook
 * without one says so, and counts the clusters of other notebooks as such (`mgpu – · 2 clusters in other
 * notebooks`), never as its own devices; on a GPU host it shows the host's GPUs (NVML) instead, which is
 * what `%mgpu_init` would start on. The tooltip spells out what each figure counts.
 */
import { ICurrentNotebook, splitByOwner } from './cluster_owner';
import { formatUsedTotal } from './format';
import { ClusterInfo, SnapshotMessage } from './payloads';

const OTHERS_LISTED = 4;

function others(n: number): string {
  return n === 1
    ? '1 cluster in another notebook'
    : `${n} clusters in other notebooks`;
}

function clusterSummary(cs: ClusterInfo[]): string {
  const world = cs.reduce((s, c) => s + c.world_size, 0);
  const kinds = Array.from(new Set(cs.map(c => c.kind))).join('+');
  const used = cs.reduce((s, c) => s + c.used_bytes, 0);
  const total = cs.reduce((s, c) => s + c.total_bytes, 0);
  const figures = total > 0 ? ` · ${formatUsedTotal(used, total)}` : '';
  const states = cs.map(c => c.status).filter(s => s !== 'running');
  const status = states.length
    ? ` · ${Array.from(new Set(states)).join(', ')}`
    : '';
  return `${world}× ${kinds}${figures}${status}`;
}

function hostGpus(snapshot: SnapshotMessage): string | null {
  const gpus =
    snapshot.devices.source === 'nvml' ? snapshot.devices.devices : [];
  if (gpus.length === 0) {
    return null;
  }
  const kinds = Array.from(new Set(gpus.map(d => d.kind))).join('+');
  const used = gpus.reduce((s, d) => s + d.used_bytes, 0);
  const total = gpus.reduce((s, d) => s + d.total_bytes, 0);
  return `${gpus.length}× ${kinds} · ${formatUsedTotal(used, total)}`;
}

/** The item's text: this notebook's cluster, else the host's GPUs, else `–` and the others' count. */
export function statusText(
  snapshot: SnapshotMessage | null,
  current: ICurrentNotebook | null
): string {
  if (snapshot === null) {
    return 'mgpu …';
  }
  const suffix = snapshot.paused ? ' (paused)' : '';
  const { mine, others: rest } = splitByOwner(snapshot.clusters, current);
  if (mine.length) {
    return `mgpu ${clusterSummary(mine)}${suffix}`;
  }
  const gpus = hostGpus(snapshot);
  if (gpus !== null) {
    return `mgpu ${gpus}${suffix}`;
  }
  return rest.length
    ? `mgpu – · ${others(rest.length)}${suffix}`
    : `mgpu –${suffix}`;
}

/** The tooltip: what the text counts, line by line, and what a click does. */
export function statusTitle(
  snapshot: SnapshotMessage | null,
  current: ICurrentNotebook | null
): string {
  const lines: string[] = [];
  if (snapshot !== null) {
    const { mine, others: rest } = splitByOwner(snapshot.clusters, current);
    const name = current?.path ? current.path.split('/').pop() : null;
    if (current === null) {
      lines.push('No notebook is open: no cluster of its own to show.');
    } else if (mine.length) {
      for (const c of mine) {
        lines.push(
          `This notebook (${name}): cluster ${c.cluster_id}, ${clusterSummary([c])}.`
        );
      }
    } else {
      lines.push(
        `This notebook (${name}) has no cluster: %mgpu_init starts one.`
      );
    }
    const gpus = hostGpus(snapshot);
    if (gpus !== null) {
      lines.push(`The host's GPUs (NVML, every process): ${gpus}.`);
    }
    if (rest.length) {
      const listed = rest
        .slice(0, OTHERS_LISTED)
        .map(
          c =>
            `${c.notebook?.split('/').pop() ?? c.cluster_id} (${c.world_size}× ${c.kind})`
        );
      const more = rest.length > OTHERS_LISTED ? ', …' : '';
      lines.push(
        `Not counted here: ${others(rest.length)}: ${listed.join(', ')}${more}.`
      );
    }
  }
  lines.push('Click to open the Multi-GPU panel.');
  return lines.join('\n');
}
