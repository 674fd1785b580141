/**
 * The few DOM helpers the sidebar's parts share: an element with a class and a text, a memory bar.
 */
import { fraction } from './format';

export const SVG_NS = 'http://www.w3.org/2000/svg';

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** A bar (`outer`) and its fill. */
export function bar(): [HTMLDivElement, HTMLDivElement] {
  const outer = el('div', 'jp-mgpu-bar');
  const fill = el('div', 'jp-mgpu-bar-fill');
  outer.appendChild(fill);
  return [outer, fill];
}

/** Fill a bar to `used / total`, red past 90 %. */
export function setBar(
  fill: HTMLDivElement,
  used: number,
  total: number
): void {
  const f = fraction(used, total);
  fill.style.width = `${(f * 100).toFixed(1)}%`;
  fill.classList.toggle('jp-mgpu-bar-high', f > 0.9);
}
