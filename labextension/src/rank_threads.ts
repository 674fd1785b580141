/**
 * The ranks as threads of the kernel's debug session (jupyter_mgpu/magics/debug_panel.py): rank r is
 * thread RANK_THREADS + r. Pure: what the "Continue all ranks" button (continue_all.ts) asks and when.
 */

/** Thread id of rank 0; rank r is RANK_THREADS + r (debugpy's own threads have small ids). */
export const RANK_THREADS = 1_000_000;

/** The ranks among a debug session's stopped threads, lowest first. */
export function stoppedRanks(threads: Iterable<number>): number[] {
  return Array.from(threads)
    .filter(t => t >= RANK_THREADS)
    .map(t => t - RANK_THREADS)
    .sort((a, b) => a - b);
}

/**
 * The arguments of the DAP `continue` request that lets every stopped rank go on. DAP's own meaning
 * (`singleThread: false`: all threads) plus `allRanks`, since JupyterLab's Continue button also sends no
 * `singleThread` and the kernel takes that one for the shown rank alone.
 */
export function continueAllArguments(threadId: number): {
  threadId: number;
  singleThread: false;
  allRanks: true;
} {
  return { threadId, singleThread: false, allRanks: true };
}

/**
 * A file's path as the kernel and the ranks see it: the server's root (JupyterLab's `serverRoot`) joined
 * with the file's path in JupyterLab. A root given as `~/...` is left so: the kernel expands it.
 */
export function pathOnDisk(serverRoot: string, path: string): string {
  if (!serverRoot) {
    return path;
  }
  return `${serverRoot.replace(/\/+$/, '')}/${path.replace(/^\/+/, '')}`;
}
