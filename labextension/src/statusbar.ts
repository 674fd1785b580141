/**
 * The status-bar item "mgpu 4× cpu · 1.5 GiB / 20.8 GiB"; clicking it opens the sidebar.
 */
import { Widget } from '@lumino/widgets';

import { statusText } from './format';
import { SnapshotMessage } from './payloads';

export class MgpuStatus extends Widget {
  constructor(onClick: () => void) {
    super();
    this.addClass('jp-mgpu-status');
    this.node.title =
      'jupyter_mgpu: devices and memory (click to open the Multi-GPU panel)';
    this.node.textContent = statusText(null);
    this.node.onclick = onClick;
  }

  /** Paused locally: shown at once, whatever the last snapshot said. */
  paused = false;

  render(snap: SnapshotMessage | null): void {
    this.node.textContent = statusText(
      snap ? { ...snap, paused: this.paused } : null
    );
  }
}
