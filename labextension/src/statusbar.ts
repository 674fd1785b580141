/**
 * The status-bar item: the current notebook's cluster, "mgpu 4× cpu · 1.5 GiB / 20.8 GiB" (what it
 * counts: status_text.ts); clicking it opens the sidebar. It redraws on every snapshot and whenever
 * JupyterLab's current notebook or its kernel changes.
 */
import { Widget } from '@lumino/widgets';

import { ICurrentNotebook, splitByOwner } from './cluster_owner';
import { SnapshotMessage } from './payloads';
import { statusText, statusTitle } from './status_text';

export class MgpuStatus extends Widget {
  constructor(onClick: () => void) {
    super();
    this.addClass('jp-mgpu-status');
    this.node.onclick = onClick;
    this._draw();
  }

  /** Paused locally: shown at once, whatever the last snapshot said. */
  paused = false;

  render(snap: SnapshotMessage | null): void {
    this._snap = snap;
    this._draw();
  }

  /** The notebook the item speaks of (null: none is open). */
  setCurrent(current: ICurrentNotebook | null): void {
    this._current = current;
    this._draw();
  }

  private _draw(): void {
    const snap = this._snap ? { ...this._snap, paused: this.paused } : null;
    this.node.textContent = statusText(snap, this._current);
    this.node.title = statusTitle(snap, this._current);
    // how many clusters the text counts as this notebook's (browser tests read it)
    this.node.dataset.ownClusters = String(
      snap ? splitByOwner(snap.clusters, this._current).mine.length : 0
    );
  }

  private _snap: SnapshotMessage | null = null;
  private _current: ICurrentNotebook | null = null;
}
