/**
 * A cluster card's ranks, each exactly once, updated in place. Up to `COMPACT_AT` ranks each has a
 * roomy row (its name, its state in a column of its own on the right, what it does now, a bar, its
 * figures); beyond, a compact row each (the name without the pid, the bar and the figures side by
 * side) in a list of bounded height that scrolls, so the card's Stop button (in its title line) and the
 * next cluster stay in reach. Nothing in a row is cut at the sidebar's default width: the name wraps
 * between its pieces, what the rank does wraps between words, the state is never shortened. A
 * cluster across hosts groups its ranks under each host in a `<details>` whose summary counts them by
 * state; at 32–64 ranks the groups start folded, and a group the user opened or folded stays so.
 */
import { bar, el, setBar } from './dom';
import { groupByHost, groupSummary } from './hosts';
import { ClusterInfo, RankInfo } from './payloads';
import { rankLabel, rankTitle } from './rank_label';

/** More ranks than this: compact lines, a bounded scrolling list, host groups folded at first. */
export const COMPACT_AT = 8;
const RANK_COLORS = 8;

interface IRankView {
  row: HTMLDivElement;
  /** `.jp-mgpu-label`: `rank 10` and ` · cpu:10 · pid 123`, whose pieces wrap apart when narrow. */
  label: HTMLSpanElement;
  id: HTMLSpanElement;
  where: HTMLSpanElement;
  state: HTMLSpanElement;
  /** `.jp-mgpu-doing`, the line under the name: the op and the activity, hidden when neither. */
  doing: HTMLDivElement;
  op: HTMLSpanElement;
  activity: HTMLSpanElement;
  figures: HTMLSpanElement;
  fill: HTMLDivElement;
}

interface IGroupView {
  /** `<details>` for a host, a plain `<div>` for a cluster on one host. */
  box: HTMLElement;
  summary: HTMLElement | null;
  body: HTMLDivElement;
}

export class RankList {
  /** `.jp-mgpu-ranks`: the groups and their rows. */
  readonly node = el('div', 'jp-mgpu-ranks');

  /** Show `c`'s ranks: rows made once per rank and moved only when their host group changes. */
  render(c: ClusterInfo): void {
    const compact = c.ranks.length > COMPACT_AT;
    this.node.classList.toggle('jp-mgpu-ranks-compact', compact);
    this.node.dataset.compact = String(compact);
    const groups = groupByHost(c.ranks);
    const keep = new Set<string>();
    groups.forEach((g, i) => {
      const key = g.host ?? '';
      keep.add(key);
      const view = this._groups.get(key) ?? this._makeGroup(g.host, compact);
      if (this.node.children[i] !== view.box) {
        this.node.insertBefore(view.box, this.node.children[i] ?? null);
      }
      if (view.summary) {
        view.summary.textContent = `${g.host} · ${groupSummary(g.ranks)}`;
        view.summary.title = view.summary.textContent;
      }
      g.ranks.forEach((r, j) => {
        const rv = this._rows.get(r.rank) ?? this._makeRow(r);
        if (view.body.children[j] !== rv.row) {
          view.body.insertBefore(rv.row, view.body.children[j] ?? null);
        }
        this._renderRow(rv, r, compact);
      });
    });
    const ranks = new Set(c.ranks.map(r => r.rank));
    for (const [rank, rv] of Array.from(this._rows.entries())) {
      if (!ranks.has(rank)) {
        rv.row.remove();
        this._rows.delete(rank);
      }
    }
    for (const [key, view] of Array.from(this._groups.entries())) {
      if (!keep.has(key)) {
        view.box.remove();
        this._groups.delete(key);
      }
    }
  }

  private _makeGroup(host: string | null, compact: boolean): IGroupView {
    const body = el('div', 'jp-mgpu-group-ranks');
    let view: IGroupView;
    if (host === null) {
      const box = el('div', 'jp-mgpu-group');
      box.appendChild(body);
      view = { box, summary: null, body };
    } else {
      const box = el('details', 'jp-mgpu-group jp-mgpu-host-group');
      box.dataset.host = host;
      box.open = !compact; // 32–64 ranks: folded to their summary line until opened
      const summary = el('summary', 'jp-mgpu-host');
      summary.dataset.host = host;
      box.append(summary, body);
      view = { box, summary, body };
    }
    this._groups.set(host ?? '', view);
    return view;
  }

  private _makeRow(r: RankInfo): IRankView {
    const row = el(
      'div',
      `jp-mgpu-rank jp-mgpu-rank-color-${r.rank % RANK_COLORS}`
    );
    row.dataset.rank = String(r.rank);
    const line = el('div', 'jp-mgpu-rank-line');
    const label = el('span', 'jp-mgpu-label');
    const id = el('span', 'jp-mgpu-rank-id');
    const where = el('span', 'jp-mgpu-where');
    label.append(id, where);
    const state = el('span', 'jp-mgpu-state');
    line.append(label, state);
    const doing = el('div', 'jp-mgpu-doing');
    const op = el('span', 'jp-mgpu-op');
    const activity = el('span', 'jp-mgpu-activity');
    doing.append(op, activity);
    const [outer, fill] = bar();
    const figures = el('span', 'jp-mgpu-figures');
    row.append(line, doing, outer, figures);
    const rv = {
      row,
      label,
      id,
      where,
      state,
      doing,
      op,
      activity,
      figures,
      fill
    };
    this._rows.set(r.rank, rv);
    return rv;
  }

  private _renderRow(rv: IRankView, r: RankInfo, compact: boolean): void {
    rv.row.classList.toggle('jp-mgpu-rank-compact', compact);
    rv.row.dataset.usedBytes = String(r.used_bytes);
    rv.row.dataset.totalBytes = String(r.total_bytes);
    rv.row.dataset.pid = r.pid === null ? '' : String(r.pid);
    rv.row.dataset.state = r.state;
    rv.row.dataset.activity = r.activity ?? '';
    rv.row.title = rankTitle(r);
    const name = rankLabel(r, compact);
    rv.id.textContent = `rank ${r.rank}`;
    setPieces(rv.where, name.slice(rv.id.textContent.length));
    rv.state.textContent = r.state;
    rv.op.textContent = r.op ?? '';
    rv.op.hidden = !r.op;
    rv.activity.textContent = r.activity ?? '';
    rv.activity.hidden = !r.activity;
    rv.doing.hidden = !r.op && !r.activity;
    setBar(rv.fill, r.used_bytes, r.total_bytes);
    rv.figures.textContent = r.figures;
  }

  private _rows = new Map<number, IRankView>();
  private _groups = new Map<string, IGroupView>();
}

/** ` · cpu:10 · pid 123` into `where` as pieces that never break inside (`· pid 123`), a space
 * between them where a narrow row may wrap; its text stays the same string. */
function setPieces(where: HTMLElement, text: string): void {
  if (where.textContent === text) {
    return;
  }
  const pieces = text.split(' · ').slice(1);
  where.replaceChildren(
    ...pieces.flatMap(p => [' ', el('span', 'jp-mgpu-where-piece', `· ${p}`)])
  );
}
