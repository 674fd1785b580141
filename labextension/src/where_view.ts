/**
 * A card's stack view: where every rank of the cluster is now, as one tree of the user's frames with the
 * ranks counted per node (`GET /mgpu/api/clusters/<id>/where`, merged on the server as
 * `mg.where(merge=True)` merges it in the notebook). Asked for with the card's "Where" button, since
 * asking every rank costs them a moment; the button asks again.
 */
import { el } from './dom';

/** One line of the tree: its depth, the frame (or what the ranks do there) and its ranks. */
export type WhereLine = [number, string, string];

export interface IWherePayload {
  time: number;
  /** `ranks 0–3 (4)`: every rank the tree covers. */
  ranks: string;
  lines: WhereLine[];
}

/** The server's payload, checked; throws an Error naming what is wrong. */
export function parseWhere(body: unknown): IWherePayload {
  const b = body as Partial<IWherePayload> | null;
  if (!b || typeof b.time !== 'number' || typeof b.ranks !== 'string') {
    throw new Error('the where payload has no time or ranks');
  }
  if (!Array.isArray(b.lines)) {
    throw new Error('the where payload has no lines');
  }
  b.lines.forEach((line, i) => {
    const [depth, label, span] = (Array.isArray(line) ? line : []) as unknown[];
    if (
      typeof depth !== 'number' ||
      typeof label !== 'string' ||
      typeof span !== 'string'
    ) {
      throw new Error(`where line ${i} is not [depth, label, ranks]`);
    }
  });
  return b as IWherePayload;
}

/** The tree drawn into `node`: a caption with the time, then a line per node, indented by depth. */
export function drawWhere(node: HTMLElement, payload: IWherePayload): void {
  const at = new Date(payload.time * 1000).toLocaleTimeString();
  const caption = el(
    'div',
    'jp-mgpu-where-caption',
    `where ${payload.ranks} are, at ${at}`
  );
  const rows = payload.lines.map(([depth, label, span]) => {
    const row = el('div', 'jp-mgpu-where-line');
    row.style.paddingLeft = `${depth * 0.9}em`;
    const what = el('span', 'jp-mgpu-where-frame', label);
    what.title = `${label}: ${span}`;
    row.append(what, el('span', 'jp-mgpu-where-ranks', span));
    return row;
  });
  node.replaceChildren(caption, ...rows);
  node.hidden = false;
}

/** The error drawn in place of the tree, in one line. */
export function drawWhereError(node: HTMLElement, message: string): void {
  node.replaceChildren(
    el('div', 'jp-mgpu-where-error', `where the ranks are: ${message}`)
  );
  node.hidden = false;
}
