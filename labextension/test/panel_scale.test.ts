/**
 * @jest-environment jsdom
 */
/** The sidebar at 32 and 64 ranks: each rank once, states whole, the Stop button in reach, hosts folded;
 * each card says whose it is; the status item follows the current notebook. */
jest.mock('@lumino/widgets', () => {
  const g = globalThis as any;
  if (g.DragEvent === undefined) {
    g.DragEvent = class DragEvent extends MouseEvent {};
  }
  return jest.requireActual('@lumino/widgets');
});

import * as fs from 'fs';
import * as path from 'path';

import { MgpuPanel } from '../src/panel';
import { ClusterInfo, DeviceEntry, SnapshotMessage } from '../src/payloads';
import { MgpuStatus } from '../src/statusbar';
import { bigCluster, cluster } from './samples';

const CSS = ['base.css', 'ranks.css']
  .map(f => fs.readFileSync(path.join(__dirname, '..', 'style', f), 'utf8'))
  .join('\n');

let time = 1700000100;
const snapshot = (
  clusters: ClusterInfo[],
  devices: DeviceEntry[] = []
): SnapshotMessage => ({
  type: 'snapshot',
  time: time++,
  clusters,
  devices: { time, host: 'node1', source: 'clusters', devices },
  interval: 1,
  paused: false
});

function makePanel(): MgpuPanel {
  const panel = new MgpuPanel({
    insertInit: jest.fn(),
    stopCluster: jest.fn(),
    togglePause: jest.fn()
  });
  document.body.appendChild(panel.node);
  return panel;
}

/** How many times each rank shows anywhere in the panel (rank rows and device rows alike). */
function rankCounts(panel: MgpuPanel): Map<string, number> {
  const counts = new Map<string, number>();
  const rows = panel.node.querySelectorAll<HTMLElement>(
    '.jp-mgpu-rank, .jp-mgpu-device'
  );
  for (const r of Array.from(rows)) {
    const key = r.dataset.rank ?? `device ${r.dataset.deviceId}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

/** The CPU devices an older server still sends in a frame: one per rank, the ranks again. */
const cpuDevices = (c: ClusterInfo): DeviceEntry[] =>
  c.ranks.map(r => ({
    id: `${c.cluster_id}/cpu:${r.rank}`,
    kind: 'cpu',
    index: r.rank,
    name: `CPU virtual device ${r.rank}`,
    used_bytes: r.used_bytes,
    total_bytes: r.total_bytes,
    utilization: null,
    cluster_id: c.cluster_id,
    rank: r.rank,
    own_bytes: null,
    other_users_bytes: null
  }));

beforeEach(() => {
  const style = document.createElement('style');
  style.textContent = CSS;
  document.head.appendChild(style);
});

afterEach(() => {
  document.body.replaceChildren();
  document.head.replaceChildren();
});

describe('the sidebar at 32 ranks on one host', () => {
  const c = bigCluster('32-a', 32, null);

  it('lists each rank once, even when the frame lists the CPU devices too', () => {
    const panel = makePanel();
    panel.render(snapshot([c], cpuDevices(c)));
    const counts = rankCounts(panel);
    expect(counts.size).toBe(32);
    expect(Array.from(counts.values()).every(n => n === 1)).toBe(true);
    expect(panel.node.querySelectorAll('.jp-mgpu-device')).toHaveLength(0);
    expect(panel.node.querySelector('.jp-mgpu-devices')!.textContent).toContain(
      "a cluster's CPU virtual devices are its ranks"
    );
  });

  it('keeps every state whole, in its own element, apart from the name, and cuts nothing', () => {
    const panel = makePanel();
    panel.render(snapshot([c]));
    const rows = Array.from(
      panel.node.querySelectorAll<HTMLElement>('.jp-mgpu-rank')
    );
    expect(rows.map(r => Number(r.dataset.rank))).toEqual(
      Array.from({ length: 32 }, (_, r) => r)
    );
    for (const [i, row] of rows.entries()) {
      const state = row.querySelector('.jp-mgpu-state')!;
      expect(state.textContent).toBe(c.ranks[i].state);
      // compact: the name leaves the pid to the tooltip, which has everything
      expect(row.querySelector('.jp-mgpu-label')!.textContent).toBe(
        `rank ${i} · cpu:${i}`
      );
      expect(row.title).toContain(`pid ${20000 + i} · ${c.ranks[i].state}`);
    }
    expect(rows[10].querySelector('.jp-mgpu-state')!.textContent).toBe('idle');
    expect(rows[19].querySelector('.jp-mgpu-state')!.textContent).toBe('busy');
    // the state never wraps or ellipsises, in a column of its own
    const state = getComputedStyle(rows[10].querySelector('.jp-mgpu-state')!);
    expect(state.whiteSpace).toBe('nowrap');
    expect(state.overflow).not.toBe('hidden');
    expect(state.textOverflow).not.toBe('ellipsis');
    // "rank 10" stays whole, and so does each piece after it: a narrow row wraps between them
    const id = rows[10].querySelector<HTMLElement>('.jp-mgpu-rank-id')!;
    expect(id.textContent).toBe('rank 10');
    expect(getComputedStyle(id).whiteSpace).toBe('nowrap');
    const where = rows[10].querySelector<HTMLElement>('.jp-mgpu-where')!;
    expect(where.textContent).toBe(' · cpu:10');
    const pieces = Array.from(
      where.querySelectorAll<HTMLElement>('.jp-mgpu-where-piece')
    );
    expect(pieces.map(p => p.textContent)).toEqual(['· cpu:10']);
    expect(getComputedStyle(pieces[0]).whiteSpace).toBe('nowrap');
    // nothing in a row is cut: no part of it hides what overflows or ellipsises (issue 47)
    const cut = rows
      .flatMap(row => [row, ...Array.from(row.querySelectorAll('*'))])
      .filter(part => {
        const style = getComputedStyle(part);
        return (
          style.textOverflow === 'ellipsis' ||
          (style.overflow === 'hidden' &&
            !part.classList.contains('jp-mgpu-bar'))
        );
      })
      .map(part => part.className);
    expect(cut).toEqual([]);
    // what a busy rank does is on a line of its own under its name: the op, then the activity
    const busy = rows[19].querySelector<HTMLElement>('.jp-mgpu-doing')!;
    expect(busy.hidden).toBe(false);
    expect(busy.parentElement).toBe(rows[19]);
    expect(busy.querySelector('.jp-mgpu-op')!.textContent).toBe('%%mgpu cell');
    expect(busy.querySelector('.jp-mgpu-activity')!.textContent).toBe(
      'running line 3 of the cell for 19 s'
    );
    expect(rows[10].querySelector<HTMLElement>('.jp-mgpu-doing')!.hidden).toBe(
      true
    );
  });

  it('puts the Stop button before the ranks, which scroll in a list of bounded height', () => {
    const panel = makePanel();
    panel.render(snapshot([c, cluster('2-b', 2)]));
    const card = panel.node.querySelector<HTMLElement>(
      '.jp-mgpu-cluster[data-cluster-id="32-a"]'
    )!;
    const stop = card.querySelector<HTMLButtonElement>('.jp-mgpu-stop')!;
    const list = card.querySelector<HTMLElement>('.jp-mgpu-ranks')!;
    const first = list.querySelector('.jp-mgpu-rank')!;
    expect(stop.parentElement!.classList).toContain('jp-mgpu-cluster-head');
    expect(list.contains(stop)).toBe(false);
    expect(
      stop.compareDocumentPosition(first) & Node.DOCUMENT_POSITION_FOLLOWING
    ).toBeTruthy();
    expect(list.dataset.compact).toBe('true');
    const style = getComputedStyle(list);
    expect(style.maxHeight).toBe('24em');
    expect(style.overflowY).toBe('auto');
    // a small cluster keeps its roomy rows, unbounded
    const small = panel.node.querySelector<HTMLElement>(
      '.jp-mgpu-cluster[data-cluster-id="2-b"] .jp-mgpu-ranks'
    )!;
    expect(small.dataset.compact).toBe('false');
    expect(getComputedStyle(small).maxHeight).not.toBe('24em');
    // the card sums its ranks up above the list: counts by state, the attention-worthy first
    expect(card.querySelector('.jp-mgpu-summary')!.textContent).toBe(
      '32 ranks · 1 dead · 2 busy · 29 idle · 528.0 MiB / 128.0 GiB'
    );
    expect(
      panel.node.querySelector<HTMLElement>(
        '.jp-mgpu-cluster[data-cluster-id="2-b"] .jp-mgpu-summary'
      )!.hidden
    ).toBe(true);
  });
});

describe('the sidebar at 64 ranks on 4 hosts', () => {
  const c = bigCluster('64-a', 64, 4);
  const groups = (panel: MgpuPanel) =>
    Array.from(
      panel.node.querySelectorAll<HTMLDetailsElement>(
        'details.jp-mgpu-host-group'
      )
    );

  it('folds each host to a summary line counting its ranks by state', () => {
    const panel = makePanel();
    panel.render(snapshot([c]));
    const gs = groups(panel);
    expect(gs.map(g => g.dataset.host)).toEqual([
      'node1',
      'node2',
      'node3',
      'node4'
    ]);
    expect(gs.every(g => !g.open)).toBe(true);
    expect(gs.map(g => g.querySelector('summary')!.textContent)).toEqual([
      'node1 · 16 ranks · 1 dead · 1 busy · 14 idle · 136.0 MiB / 64.0 GiB',
      'node2 · 16 ranks · 1 busy · 15 idle · 392.0 MiB / 64.0 GiB',
      'node3 · 16 ranks · 1 busy · 15 idle · 648.0 MiB / 64.0 GiB',
      'node4 · 16 ranks · 1 busy · 15 idle · 904.0 MiB / 64.0 GiB'
    ]);
    // each rank once, under its own host
    const counts = rankCounts(panel);
    expect(counts.size).toBe(64);
    expect(Array.from(counts.values()).every(n => n === 1)).toBe(true);
    for (const g of gs) {
      const hosts = Array.from(
        g.querySelectorAll<HTMLElement>('.jp-mgpu-rank')
      ).map(r => c.ranks[Number(r.dataset.rank)].host);
      expect(hosts).toEqual(Array(16).fill(g.dataset.host));
    }
  });

  it('keeps a host the user opened open, and updates rows in place', () => {
    const panel = makePanel();
    panel.render(snapshot([c]));
    groups(panel)[1].open = true;
    const row = panel.node.querySelector('.jp-mgpu-rank[data-rank="20"]');
    const busier = bigCluster('64-a', 64, 4, r => r >= 16 && r < 32);
    panel.render(snapshot([busier]));
    expect(groups(panel).map(g => g.open)).toEqual([false, true, false, false]);
    expect(panel.node.querySelector('.jp-mgpu-rank[data-rank="20"]')).toBe(row);
    expect(row!.querySelector('.jp-mgpu-state')!.textContent).toBe('busy');
    expect(groups(panel)[1].querySelector('summary')!.textContent).toContain(
      '16 busy'
    );
  });

  it('drops rows and groups of ranks that are gone, and unfolds a small cluster', () => {
    const panel = makePanel();
    panel.render(snapshot([c]));
    const small = bigCluster('64-a', 4, 2, () => false);
    panel.render(snapshot([small]));
    expect(rankCounts(panel).size).toBe(4);
    expect(groups(panel).map(g => g.dataset.host)).toEqual(['node1', 'node2']);
    const list = panel.node.querySelector<HTMLElement>('.jp-mgpu-ranks')!;
    expect(list.dataset.compact).toBe('false');
    expect(
      Array.from(list.querySelectorAll<HTMLElement>('.jp-mgpu-rank')).map(
        r => r.dataset.rank
      )
    ).toEqual(['0', '1', '2', '3']);
  });
});

describe('whose cluster each card and the status item speak of', () => {
  const mine = cluster('1-a', 2, {
    kernel_id: 'k-here',
    notebook: 'here.ipynb'
  });
  const theirs = cluster('2-b', 2, {
    kernel_id: 'k-there',
    notebook: 'there.ipynb'
  });

  it("labels the current notebook's card and the others'", () => {
    const panel = makePanel();
    panel.render(snapshot([theirs, mine]));
    panel.setCurrent({ kernelId: 'k-here', path: 'here.ipynb' });
    const owner = (id: string) =>
      panel.node.querySelector<HTMLElement>(
        `.jp-mgpu-cluster[data-cluster-id="${id}"]`
      )!;
    expect(owner('1-a').dataset.owner).toBe('this');
    expect(owner('1-a').querySelector('.jp-mgpu-owner')!.textContent).toBe(
      'this notebook'
    );
    expect(owner('2-b').dataset.owner).toBe('other');
    expect(owner('2-b').querySelector('.jp-mgpu-owner')!.textContent).toBe(
      'another notebook'
    );
    panel.setCurrent({ kernelId: 'k-there', path: 'there.ipynb' });
    expect(owner('1-a').dataset.owner).toBe('other');
    expect(owner('2-b').dataset.owner).toBe('this');
  });

  it('redraws the status item when the notebook or its kernel changes', () => {
    const status = new MgpuStatus(jest.fn());
    expect(status.node.textContent).toBe('mgpu …');
    status.render(snapshot([theirs]));
    expect(status.node.textContent).toBe(
      'mgpu – · 1 cluster in another notebook'
    );
    status.setCurrent({ kernelId: 'k-here', path: 'here.ipynb' });
    expect(status.node.textContent).toBe(
      'mgpu – · 1 cluster in another notebook'
    );
    expect(status.node.dataset.ownClusters).toBe('0');
    status.render(snapshot([theirs, mine]));
    expect(status.node.textContent).toBe('mgpu 2× cpu · 2.0 KiB / 7.8 KiB');
    expect(status.node.dataset.ownClusters).toBe('1');
    expect(status.node.title).toContain(
      'This notebook (here.ipynb): cluster 1-a'
    );
    status.setCurrent({ kernelId: 'k-new', path: 'here.ipynb' }); // a restarted kernel, no cluster yet
    expect(status.node.textContent).toBe(
      'mgpu – · 2 clusters in other notebooks'
    );
    status.paused = true;
    status.render(snapshot([mine]));
    expect(status.node.textContent).toBe(
      'mgpu – · 1 cluster in another notebook (paused)'
    );
  });
});
