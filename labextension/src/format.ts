/**
 * Pure formatting of memory figures, and the `%mgpu_init` line the sidebar inserts (the status-bar
 * text is status_text.ts's).
 *
 * One convention with every other view (jupyter_mgpu/engine/records/memory_figures.py `format_bytes`, used by
 * the dashboard, `%mgpu_status` and the server): binary units, one decimal, bytes without decimals,
 * "used / limit" with each size in its own unit. tests/frontend checks both against one fixture.
 */
import { SnapshotMessage } from './payloads';

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** `formatBytes(3.1 * 2**30)` → `3.1 GiB`; bytes are shown without decimals. */
export function formatBytes(bytes: number): string {
  let v = bytes;
  let i = 0;
  while (i < UNITS.length - 1 && Math.abs(v) >= 1024) {
    v /= 1024;
    i++;
  }
  return i === 0
    ? `${v.toFixed(0)} ${UNITS[0]}`
    : `${v.toFixed(1)} ${UNITS[i]}`;
}

/** `used / total`, each in its own unit: `389.4 MiB / 5.2 GiB`. */
export function formatUsedTotal(used: number, total: number): string {
  return `${formatBytes(used)} / ${formatBytes(total)}`;
}

/** Fraction used in [0, 1] (0 when the total is unknown). */
export function fraction(used: number, total: number): number {
  if (!(total > 0)) {
    return 0;
  }
  return Math.min(1, Math.max(0, used / total));
}

/** The `%mgpu_init` line the sidebar inserts: one engine per visible GPU, else `fallback` CPU devices. */
export function initCommand(
  snapshot: SnapshotMessage | null,
  fallback = 2
): string {
  if (
    snapshot &&
    snapshot.devices.source === 'nvml' &&
    snapshot.devices.devices.length > 0
  ) {
    return `%mgpu_init ${snapshot.devices.devices.length}`;
  }
  return `%mgpu_init ${fallback}`;
}
