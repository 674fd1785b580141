/**
 * The "Multi-GPU" sidebar: the host's GPUs and this user's clusters, each a card with its Stop button
 * in its title line, a 60 s sparkline and its ranks (rank_list.ts: each rank once, compact and
 * grouped by host at 32–64 ranks), updated in place from the stream (buttons keep working while it
 * refreshes). Each card says whose it is: the current notebook's, or another notebook's.
 */
import { Widget } from '@lumino/widgets';

import { fetchWhere } from './api';
import { ICurrentNotebook, ownerLabel, isCurrent } from './cluster_owner';
import { bar, el, setBar, SVG_NS } from './dom';
import { formatBytes, formatUsedTotal } from './format';
import { groupSummary } from './hosts';
import { ClusterInfo, DeviceEntry, SnapshotMessage } from './payloads';
import { drawProfile } from './profile_view';
import { COMPACT_AT, RankList } from './rank_list';
import { showOtherUsers } from './other_users';
import { History, scalePoints, toPolyline } from './sparkline';
import { drawWhere, drawWhereError, IWherePayload } from './where_view';

const SPARK_W = 220;
const SPARK_H = 40;
const RANK_COLORS = 8;

export interface IPanelActions {
  insertInit(): void;
  stopCluster(cluster: ClusterInfo): void;
  togglePause(): void;
  /** Every rank's stack now, as one tree (the card's "Where" button); the server's route by default. */
  where?(cluster: ClusterInfo): Promise<IWherePayload>;
}

interface ClusterView {
  card: HTMLDivElement;
  title: HTMLSpanElement;
  /** `this notebook` / `another notebook`: whose cluster it is. */
  owner: HTMLDivElement;
  meta: HTMLDivElement;
  spark: SVGSVGElement;
  sparkAxis: HTMLDivElement;
  /** `32 ranks · 2 busy · 30 idle · …`, shown above a compact or multi-host list. */
  summary: HTMLDivElement;
  ranks: RankList;
  stop: HTMLButtonElement;
  info: ClusterInfo;
  /** The last profile's section (hidden until there is one). */
  profile: HTMLDivElement;
  /** The stack tree the "Where" button asked for (hidden until then). */
  where: HTMLDivElement;
}

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

  /** The notebook JupyterLab has current: its cluster's card says "this notebook". */
  setCurrent(current: ICurrentNotebook | null): void {
    this._current = current;
    for (const view of this._views.values()) {
      this._renderOwner(view);
    }
  }

  private _renderDevices(
    devices: DeviceEntry[],
    source: string,
    host: string
  ): void {
    this._devices.textContent = '';
    // without NVML the devices are the clusters' CPU virtual devices, i.e. their ranks, listed once,
    // under their cluster (an older server still sends them here: they are not drawn twice)
    if (source !== 'nvml' || devices.length === 0) {
      this._devices.appendChild(
        el(
          'div',
          'jp-mgpu-empty',
          `No GPU on ${host}: a cluster's CPU virtual devices are its ranks, under Clusters.`
        )
      );
      return;
    }
    for (const d of devices) {
      const row = el('div', 'jp-mgpu-device');
      row.dataset.deviceId = d.id;
      const label = `${d.kind}:${d.index} ${d.name}`;
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
    // the title line holds the Stop button: in reach however many ranks the card lists
    const head = el('div', 'jp-mgpu-cluster-head');
    const title = el('span', 'jp-mgpu-cluster-title');
    const stop = el('button', 'jp-mgpu-button jp-mgpu-stop', 'Stop cluster');
    head.append(title, stop);
    const ask = el(
      'button',
      'jp-mgpu-button jp-mgpu-where-button',
      'Where are the ranks?'
    );
    ask.title = "every rank's stack now: the user's frames as one tree";
    const owner = el('div', 'jp-mgpu-owner');
    const meta = el('div', 'jp-mgpu-cluster-meta');
    const spark = document.createElementNS(SVG_NS, 'svg');
    spark.setAttribute('class', 'jp-mgpu-sparkline');
    spark.setAttribute('viewBox', `0 0 ${SPARK_W} ${SPARK_H}`);
    spark.setAttribute('preserveAspectRatio', 'none');
    const sparkTitle = document.createElementNS(SVG_NS, 'title');
    sparkTitle.textContent = 'memory per rank, last 60 s';
    spark.appendChild(sparkTitle);
    const sparkAxis = el('div', 'jp-mgpu-spark-axis');
    const summary = el('div', 'jp-mgpu-summary');
    const ranks = new RankList();
    const profile = el('div', 'jp-mgpu-profile');
    profile.hidden = true;
    const where = el('div', 'jp-mgpu-where');
    where.hidden = true;
    const view: ClusterView = {
      card,
      title,
      owner,
      meta,
      spark,
      sparkAxis,
      summary,
      ranks,
      stop,
      info: c,
      profile,
      where
    };
    stop.onclick = () => this._actions.stopCluster(view.info);
    ask.onclick = async () => {
      ask.disabled = true;
      try {
        const ask = this._actions.where ?? (c => fetchWhere(c.cluster_id));
        drawWhere(where, await ask(view.info));
      } catch (err) {
        drawWhereError(where, String((err as Error).message ?? err));
      } finally {
        ask.disabled = false;
      }
    };
    card.append(
      head,
      owner,
      meta,
      spark,
      sparkAxis,
      profile,
      ask,
      where,
      summary,
      ranks.node
    );
    this._clusters.appendChild(card);
    this._views.set(c.cluster_id, view);
    return view;
  }

  private _renderOwner(view: ClusterView): void {
    const c = view.info;
    view.card.dataset.owner = isCurrent(c, this._current) ? 'this' : 'other';
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
    view.owner.textContent = ownerLabel(c, this._current);
    view.meta.replaceChildren(
      ...pieces.map(p => el('span', 'jp-mgpu-piece', p))
    );
  }

  private _renderCluster(c: ClusterInfo, now: number): void {
    const view = this._views.get(c.cluster_id) ?? this._makeClusterView(c);
    view.info = c;
    view.card.dataset.status = c.status;
    view.card.dataset.worldSize = String(c.world_size);
    view.title.textContent = `${c.cluster_id} · ${c.status}`;
    view.title.title = view.title.textContent;
    this._renderOwner(view);
    view.stop.disabled = c.status === 'stopped' || c.status === 'stopping';
    const many = c.ranks.length > COMPACT_AT || c.ranks.some(r => r.host);
    view.summary.hidden = !many;
    view.summary.textContent = many ? groupSummary(c.ranks) : '';
    view.ranks.render(c);
    this._renderSpark(view, c, now);
    if (c.profile !== null) {
      drawProfile(view.profile, c.profile); // the stream carries each new profile once
    }
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
  private _current: ICurrentNotebook | null = null;
  private _history = new History(60);
}
