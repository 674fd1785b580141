/**
 * Pure formatting of memory figures and the status-bar text ("mgpu 4× cpu · 3.1 / 8.0 GiB").
 */
import { DeviceEntry, SnapshotMessage } from './payloads';

/** `binary` shows KiB/MiB/GiB (powers of 1024), `decimal` shows kB/MB/GB (powers of 1000). */
export type Units = 'binary' | 'decimal';

const BINARY = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
const DECIMAL = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];

/** The unit index and divisor that show `bytes` as a number below 1000 (1024). */
export function pickUnit(bytes: number, units: Units = 'binary'): [string, number] {
  const base = units === 'binary' ? 1024 : 1000;
  const names = units === 'binary' ? BINARY : DECIMAL;
  let i = 0;
  let div = 1;
  while (i < names.length - 1 && Math.abs(bytes) >= div * base) {
    div *= base;
    i++;
  }
  return [names[i], div];
}

/** `formatBytes(3.1 * 2**30)` → `3.1 GiB`; bytes are shown without decimals. */
export function formatBytes(bytes: number, units: Units = 'binary'): string {
  const [name, div] = pickUnit(bytes, units);
  return div === 1 ? `${Math.round(bytes)} ${name}` : `${(bytes / div).toFixed(1)} ${name}`;
}

/** `used / total` in the unit of the total: `3.1 / 8.0 GiB`. */
export function formatUsedTotal(used: number, total: number, units: Units = 'binary'): string {
  const [name, div] = pickUnit(Math.max(total, used), units);
  if (div === 1) {
    return `${Math.round(used)} / ${Math.round(total)} ${name}`;
  }
  return `${(used / div).toFixed(1)} / ${(total / div).toFixed(1)} ${name}`;
}

/** Fraction used in [0, 1] (0 when the total is unknown). */
export function fraction(used: number, total: number): number {
  if (!(total > 0)) {
    return 0;
  }
  return Math.min(1, Math.max(0, used / total));
}

/** The devices the status bar summarises: NVML GPUs, else running clusters' devices. */
export function statusDevices(snapshot: SnapshotMessage): DeviceEntry[] {
  return snapshot.devices.devices;
}

/** `mgpu 4× cpu · 3.1 / 8.0 GiB`; `mgpu –` with no device; `(paused)` appended when paused. */
export function statusText(snapshot: SnapshotMessage | null, units: Units = 'binary'): string {
  if (snapshot === null) {
    return 'mgpu …';
  }
  const devices = statusDevices(snapshot);
  const suffix = snapshot.paused ? ' (paused)' : '';
  if (devices.length === 0) {
    return `mgpu –${suffix}`;
  }
  const kinds = Array.from(new Set(devices.map(d => d.kind)));
  const used = devices.reduce((s, d) => s + d.used_bytes, 0);
  const total = devices.reduce((s, d) => s + d.total_bytes, 0);
  return `mgpu ${devices.length}× ${kinds.join('+')} · ${formatUsedTotal(used, total, units)}${suffix}`;
}

/** The `%mgpu_init` line the sidebar inserts: one engine per visible GPU, else `fallback` CPU devices. */
export function initCommand(snapshot: SnapshotMessage | null, fallback = 2): string {
  if (snapshot && snapshot.devices.source === 'nvml' && snapshot.devices.devices.length > 0) {
    return `%mgpu_init ${snapshot.devices.devices.length}`;
  }
  return `%mgpu_init ${fallback}`;
}
