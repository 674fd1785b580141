/**
 * Whose cluster is it: the current notebook's, or another notebook's. The status bar reflects the
 * current notebook's kernel (the JupyterLab convention: a status item speaks of the current document);
 * the sidebar lists every cluster of this user and labels each by its owner.
 *
 * The server names the kernel that started a cluster (`ClusterInfo.kernel_id`, from the kernel's pid);
 * where it cannot (a kernel it does not run, an older server), the notebook's path decides.
 */
import { ClusterInfo } from './payloads';

/** The notebook JupyterLab has current: its kernel's id and its path (null while it has none). */
export interface ICurrentNotebook {
  kernelId: string | null;
  path: string | null;
}

/** Whether `c` belongs to the current notebook's kernel. */
export function isCurrent(
  c: ClusterInfo,
  current: ICurrentNotebook | null
): boolean {
  if (current === null) {
    return false;
  }
  if (c.kernel_id !== null) {
    return c.kernel_id === current.kernelId;
  }
  return (
    c.notebook !== null && current.path !== null && c.notebook === current.path
  );
}

/** The card's owner tag: `this notebook`, `another notebook` (or `another kernel`: no notebook named). */
export function ownerLabel(
  c: ClusterInfo,
  current: ICurrentNotebook | null
): string {
  if (isCurrent(c, current)) {
    return 'this notebook';
  }
  return c.notebook ? 'another notebook' : 'another kernel';
}

/** The current notebook's clusters and the others', in payload order. */
export function splitByOwner(
  clusters: ClusterInfo[],
  current: ICurrentNotebook | null
): { mine: ClusterInfo[]; others: ClusterInfo[] } {
  const mine = clusters.filter(c => isCurrent(c, current));
  return { mine, others: clusters.filter(c => !mine.includes(c)) };
}
