/**
 * The "Multi-GPU" sidebar: the host's devices and this user's clusters, with per-rank memory bars and
 * a 60 s sparkline, updated in place from the stream (buttons keep working while it refreshes).
 */
import { Widget } from '@lumino/widgets';

import { formatBytes, formatUsedTotal, fraction } from './format';
import {
  ClusterInfo,
  DeviceEntry,
  ProfilePayload,
  RankInfo,
  SnapshotMessage
} from './payloads';
import { hostHeading } from './hosts';
import {
  PROFILE_ROW,
  PROFILE_W,
  profileCaption,
  profileRects
} from './profile_view';
import { rankLabel } from './rank_label';
import { showOtherUsers } from './other_users';
import { History, scalePoints, toPolyline } from './sparkline';

const SPARK_W = 220;
const SPARK_H = 40;
const RANK_COLORS = 8;

export interface IPanelActions {
  insertInit(): void;
  stopCluster(cluster: ClusterInfo): void;
  togglePause(): void;
}

function el<K extends keyof HTMLElementTagNameMap>(
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

function bar(): [HTMLDivElement, HTMLDivElement] {
  const outer = el('div', 'jp-mgpu-bar');
  const fill = el('div', 'jp-mgpu-bar-fill');
  outer.appendChild(fill);
  return [outer, fill];
}

function setBar(fill: HTMLDivElement, used: number, total: number): void {
  const f = fraction(used, total);
  fill.style.width = `${(f * 100).toFixed(1)}%`;
  fill.classList.toggle('jp-mgpu-bar-high', f > 0.9);
}

interface RankView {
  row: HTMLDivElement;
  label: HTMLSpanElement;
  activity: HTMLSpanElement;
  figures: HTMLSpanElement;
  fill: HTMLDivElement;
}

interface ClusterView {
  card: HTMLDivElement;
  title: HTMLDivElement;
  meta: HTMLDivElement;
  spark: SVGSVGElement;
  sparkAxis: HTMLDivElement;
  ranks: HTMLDivElement;
  rankViews: Map<number, RankView>;
  /** The host of the last rank row made: a cluster across hosts groups its ranks under each host. */
  lastHost?: string | null;
  stop: HTMLButtonElement;
  info: ClusterInfo;
  /** The last profile's section (hidden until there is one). */
  profile: HTMLDivElement;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export class MgpuPanel extends Widget {
  constructor(actions: IPanelActions) {
    super();
    this.id = 'jupyter-mgpu-panel';
    this.addClass('jp-mgpu-panel');
    this.title.caption = 'Multi-GPU';
    this._actions = actions;

    const header = el('div', 'jp-mgpu-header');
    header.appendChild(el('h2', 'jp-mgpu-heading', 'Multi-GPU'));
    this._live = el('span', 'jp-mgpu-live', 'connecting…');
    header.appendChild(this._live);
    this.node.appendChild(header);

    const toolbar = el('div', 'jp-mgpu-toolbar');
    const insert = el(
      'button',
      'jp-mgpu-button jp-mgpu-insert',
      'Insert %mgpu_init'
    );
    insert.title = 'Insert a %mgpu_init cell into the active notebook';
    insert.onclick = () => this._actions.insertInit();
    this._pause = el('button', 'jp-mgpu-button jp-mgpu-pause', 'Pause');
    this._pause.onclick = () => this._actions.togglePause();
    toolbar.append(insert, this._pause);
    this.node.appendChild(toolbar);

    this.node.appendChild(el('h3', 'jp-mgpu-section', 'Devices'));
    this._devices = el('div', 'jp-mgpu-devices');
    this.node.appendChild(this._devices);
    this.node.appendChild(el('h3', 'jp-mgpu-section', 'Clusters'));
    this._clusters = el('div', 'jp-mgpu-clusters');
    this._empty = el(
      'div',
      'jp-mgpu-empty',
      'No running cluster. Run %mgpu_init in a notebook.'
    );
    this._clusters.appendChild(this._empty);
    this.node.appendChild(this._clusters);
  }

  /** Reflect a local pause/resume at once (a paused server sends nothing to render). */
  setPaused(paused: boolean, interval: number): void {
    this._live.classList.remove('jp-mgpu-error');
    this._live.textContent = paused ? 'paused' : `live · every ${interval} s`;
    this._pause.textContent = paused ? 'Resume' : 'Pause';
  }

  /** Show an error line (stream errors, failed stop requests). */
  showError(message: string): void {
    this._live.textContent = message;
    this._live.classList.add('jp-mgpu-error');
  }

  /** Render one snapshot: devices, clusters (keyed by id), bars and sparklines. */
  render(snap: SnapshotMessage): void {
    this._live.classList.remove('jp-mgpu-error');
    this._live.textContent = snap.paused
      ? 'paused'
      : `live · every ${snap.interval} s`;
    this._pause.textContent = snap.paused ? 'Resume' : 'Pause';
    this._renderDevices(
      snap.devices.devices,
      snap.devices.source,
      snap.devices.host
    );
    const keep = new Set<string>();
    for (const c of snap.clusters) {
      for (const r of c.ranks) {
        const key = `${c.cluster_id}/${r.rank}`;
        keep.add(key);
        if (!snap.paused) {
          this._history.add(key, snap.time, r.used_bytes);
        }
      }
    }
    this._history.retain(keep);
    const ids = new Set(snap.clusters.map(c => c.cluster_id));
    for (const [id, view] of Array.from(this._views.entries())) {
      if (!ids.has(id)) {
        view.card.remove();
        this._views.delete(id);
      }
    }
    for (const c of snap.clusters) {
      this._renderCluster(c, snap.time);
    }
    this._empty.style.display = snap.clusters.length ? 'none' : '';
  }

  private _renderDevices(
    devices: DeviceEntry[],
    source: string,
    host: string
  ): void {
    this._devices.textContent = '';
    if (devices.length === 0) {
      this._devices.appendChild(
        el(
          'div',
          'jp-mgpu-empty',
          `No GPU on ${host}; CPU virtual devices appear here while a cluster runs.`
        )
      );
      return;
    }
    for (const d of devices) {
      const row = el('div', 'jp-mgpu-device');
      row.dataset.deviceId = d.id;
      const label =
        source === 'nvml'
          ? `${d.kind}:${d.index} ${d.name}`
          : `${d.kind}:${d.index} (rank ${d.rank})`;
      row.appendChild(el('span', 'jp-mgpu-label', label));
      const [outer, fill] = bar();
      setBar(fill, d.used_bytes, d.total_bytes);
      row.appendChild(outer);
      row.appendChild(
        el(
          'span',
          'jp-mgpu-figures',
          formatUsedTotal(d.used_bytes, d.total_bytes)
        )
      );
      showOtherUsers(row, outer, fill, d); // a shared GPU: other users' part of the bar, and its figure
      this._devices.appendChild(row);
    }
  }

  private _makeClusterView(c: ClusterInfo): ClusterView {
    const card = el('div', 'jp-mgpu-cluster');
    card.dataset.clusterId = c.cluster_id;
    const title = el('div', 'jp-mgpu-cluster-title');
    const meta = el('div', 'jp-mgpu-cluster-meta');
    const spark = document.createElementNS(SVG_NS, 'svg');
    spark.setAttribute('class', 'jp-mgpu-sparkline');
    spark.setAttribute('viewBox', `0 0 ${SPARK_W} ${SPARK_H}`);
    spark.setAttribute('preserveAspectRatio', 'none');
    const sparkTitle = document.createElementNS(SVG_NS, 'title');
    sparkTitle.textContent = 'memory per rank, last 60 s';
    spark.appendChild(sparkTitle);
    const sparkAxis = el('div', 'jp-mgpu-spark-axis');
    const ranks = el('div', 'jp-mgpu-ranks');
    const stop = el('button', 'jp-mgpu-button jp-mgpu-stop', 'Stop cluster');
    const profile = el('div', 'jp-mgpu-profile');
    profile.hidden = true;
    const view: ClusterView = {
      card,
      title,
      meta,
      spark,
      sparkAxis,
      ranks,
      rankViews: new Map(),
      stop,
      info: c,
      profile
    };
    stop.onclick = () => this._actions.stopCluster(view.info);
    card.append(title, meta, spark, sparkAxis, profile, ranks, stop);
    this._clusters.appendChild(card);
    this._views.set(c.cluster_id, view);
    return view;
  }

  private _renderCluster(c: ClusterInfo, now: number): void {
    const view = this._views.get(c.cluster_id) ?? this._makeClusterView(c);
    view.info = c;
    view.card.dataset.status = c.status;
    view.card.dataset.worldSize = String(c.world_size);
    view.title.textContent = `${c.cluster_id} · ${c.status}`;
    const notebook = c.notebook
      ? c.notebook.split('/').pop()
      : 'unknown notebook';
    view.meta.title = c.notebook ?? '';
    // pieces that never break inside (no "glo/o"): the line wraps between them only
    const pieces = [
      notebook ?? '',
      `${c.world_size}× ${c.kind}`,
      c.backend ?? ''
    ].filter(p => p);
    if (c.total_bytes > 0) {
      pieces.push(formatUsedTotal(c.used_bytes, c.total_bytes));
    }
    view.meta.replaceChildren(
      ...pieces.map(p => el('span', 'jp-mgpu-piece', p))
    );
    view.stop.disabled = c.status === 'stopped' || c.status === 'stopping';

    for (const r of c.ranks) {
      const rv = view.rankViews.get(r.rank) ?? this._makeRankView(view, r);
      this._renderRank(rv, r);
    }
    for (const [rank, rv] of Array.from(view.rankViews.entries())) {
      if (rank >= c.ranks.length) {
        rv.row.remove();
        view.rankViews.delete(rank);
      }
    }
    this._renderSpark(view, c, now);
    if (c.profile !== null) {
      this._renderProfile(view, c.profile); // the stream carries each new profile once
    }
  }

  private _renderProfile(view: ClusterView, p: ProfilePayload): void {
    const height = Math.max(1, p.ranks.length) * PROFILE_ROW;
    const svg = document.createElementNS(SVG_NS, 'svg');
    svg.setAttribute('class', 'jp-mgpu-profile-plot');
    svg.setAttribute('viewBox', `0 0 ${PROFILE_W} ${height}`);
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.style.height = `${height}px`;
    const title = document.createElementNS(SVG_NS, 'title');
    title.textContent =
      'last profile: a row per rank; grey calls, blue collectives, orange waiting for the last rank';
    svg.appendChild(title);
    for (const r of profileRects(p)) {
      const rect = document.createElementNS(SVG_NS, 'rect');
      rect.setAttribute('class', `jp-mgpu-profile-${r.kind}`);
      rect.setAttribute('x', r.x.toFixed(2));
      rect.setAttribute('y', String(r.y));
      rect.setAttribute('width', r.width.toFixed(2));
      rect.setAttribute('height', String(r.height));
      svg.appendChild(rect);
    }
    view.profile.replaceChildren(
      el('div', 'jp-mgpu-profile-heading', 'Last profile'),
      svg,
      el('div', 'jp-mgpu-profile-caption', profileCaption(p))
    );
    view.profile.dataset.ranks = String(p.ranks.length);
    view.profile.hidden = false;
  }

  private _makeRankView(view: ClusterView, r: RankInfo): RankView {
    const heading = hostHeading(view.lastHost, r);
    if (heading) {
      const head = el('div', 'jp-mgpu-host', heading);
      head.dataset.host = heading;
      view.ranks.appendChild(head);
    }
    view.lastHost = r.host;
    const row = el(
      'div',
      `jp-mgpu-rank jp-mgpu-rank-color-${r.rank % RANK_COLORS}`
    );
    row.dataset.rank = String(r.rank);
    const label = el('span', 'jp-mgpu-label');
    const activity = el('span', 'jp-mgpu-activity');
    const [outer, fill] = bar();
    const figures = el('span', 'jp-mgpu-figures');
    row.append(label, activity, outer, figures);
    view.ranks.appendChild(row);
    const rv = { row, label, activity, figures, fill };
    view.rankViews.set(r.rank, rv);
    return rv;
  }

  private _renderRank(rv: RankView, r: RankInfo): void {
    rv.row.dataset.usedBytes = String(r.used_bytes);
    rv.row.dataset.totalBytes = String(r.total_bytes);
    rv.row.dataset.pid = r.pid === null ? '' : String(r.pid);
    rv.row.dataset.state = r.state;
    rv.row.dataset.activity = r.activity ?? '';
    rv.label.textContent = rankLabel(r);
    rv.label.title = rv.label.textContent;
    rv.activity.textContent = r.activity ?? '';
    rv.activity.title = r.activity ?? '';
    rv.activity.hidden = !r.activity;
    setBar(rv.fill, r.used_bytes, r.total_bytes);
    rv.figures.textContent = r.figures;
  }

  private _renderSpark(view: ClusterView, c: ClusterInfo, now: number): void {
    // scale to the largest value seen in the window (not the budget) so that changes are visible
    const series = c.ranks.map(r =>
      this._history.get(`${c.cluster_id}/${r.rank}`)
    );
    const seen = series.flatMap(s => s.map(x => x.v));
    const max = Math.max(1, ...seen) * 1.1;
    // the time axis spans the history there is (whole 10 s, up to 60 s): a young cluster is not a
    // line squeezed into the right edge
    const oldest = Math.min(now, ...series.flatMap(s => s.map(x => x.t)));
    const span = Math.min(
      60,
      Math.max(10, Math.ceil((now - oldest) / 10) * 10)
    );
    view.sparkAxis.textContent = `0 to ${formatBytes(max)} · last ${span} s`;
    for (const old of Array.from(view.spark.querySelectorAll('polyline'))) {
      old.remove();
    }
    for (const r of c.ranks) {
      const points = scalePoints(
        this._history.get(`${c.cluster_id}/${r.rank}`),
        now,
        max,
        SPARK_W,
        SPARK_H,
        span
      );
      const line = document.createElementNS(SVG_NS, 'polyline');
      line.setAttribute(
        'class',
        `jp-mgpu-spark-line jp-mgpu-rank-stroke-${r.rank % RANK_COLORS}`
      );
      line.setAttribute('points', toPolyline(points));
      line.dataset.rank = String(r.rank);
      view.spark.appendChild(line);
    }
  }

  private _actions: IPanelActions;
  private _live: HTMLSpanElement;
  private _pause: HTMLButtonElement;
  private _devices: HTMLDivElement;
  private _clusters: HTMLDivElement;
  private _empty: HTMLDivElement;
  private _views = new Map<string, ClusterView>();
  private _history = new History(60);
}
