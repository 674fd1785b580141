/**
 * Shared GPUs: the part of a device's memory that other users' processes hold. NVML sees every process
 * on a GPU; the server sends only byte counts (`other_users_bytes`), never whose. The sidebar shows it
 * as a grey end of the device's bar and a figure, `other users 20.0 GiB`.
 */
import { formatBytes, fraction } from './format';
import { DeviceEntry } from './payloads';

/** `other users 20.0 GiB`, or '' when nobody else holds memory on the device (or NVML cannot say). */
export function otherUsersText(d: DeviceEntry): string {
  return d.other_users_bytes
    ? `other users ${formatBytes(d.other_users_bytes)}`
    : '';
}

/** The bar's two parts as fractions of the device: [everything but other users', other users']. */
export function barShares(d: DeviceEntry): [number, number] {
  const used = fraction(d.used_bytes, d.total_bytes);
  const other = Math.min(
    used,
    fraction(d.other_users_bytes ?? 0, d.total_bytes)
  );
  return [used - other, other];
}

/** Add other users' part to a device row of the panel (its bar `outer` and the bar's `fill`). */
export function showOtherUsers(
  row: HTMLElement,
  outer: HTMLElement,
  fill: HTMLElement,
  d: DeviceEntry
): void {
  const text = otherUsersText(d);
  if (!text) {
    return;
  }
  const [rest, other] = barShares(d);
  fill.style.width = `${(rest * 100).toFixed(1)}%`;
  const part = document.createElement('div');
  part.className = 'jp-mgpu-bar-other';
  part.style.width = `${(other * 100).toFixed(1)}%`;
  part.title = text;
  outer.appendChild(part);
  const figure = document.createElement('span');
  figure.className = 'jp-mgpu-figures jp-mgpu-other-users';
  figure.textContent = text;
  row.appendChild(figure);
  row.dataset.otherUsersBytes = String(d.other_users_bytes);
}
