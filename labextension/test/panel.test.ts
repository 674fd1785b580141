/**
 * @jest-environment jsdom
 */
/** The sidebar's DOM (MgpuPanel): cards, rank rows, the Stop and Pause buttons, the last profile. */
// @lumino/widgets is the real one; only jsdom's missing DragEvent (@lumino/dragdrop subclasses it when
// loaded) is supplied first. jest hoists this above the imports.
jest.mock('@lumino/widgets', () => {
  const g = globalThis as any;
  if (g.DragEvent === undefined) {
    g.DragEvent = class DragEvent extends MouseEvent {};
  }
  return jest.requireActual('@lumino/widgets');
});

import { MgpuPanel, IPanelActions } from '../src/panel';
import { ClusterInfo, SnapshotMessage } from '../src/payloads';
import { cluster, profile, rank } from './samples';

let time = 1700000100;

const snapshot = (
  clusters: ClusterInfo[],
  over: Partial<SnapshotMessage> = {}
): SnapshotMessage => ({
  type: 'snapshot',
  time: time++,
  clusters,
  devices: { time, host: 'node1', source: 'clusters', devices: [] },
  interval: 1,
  paused: false,
  ...over
});

function makePanel(): {
  panel: MgpuPanel;
  actions: jest.Mocked<IPanelActions>;
} {
  const actions = {
    insertInit: jest.fn(),
    stopCluster: jest.fn(),
    togglePause: jest.fn()
  };
  const panel = new MgpuPanel(actions);
  document.body.appendChild(panel.node);
  return { panel, actions };
}

const cards = (panel: MgpuPanel) =>
  Array.from(
    panel.node.querySelectorAll<HTMLElement>(
      '.jp-mgpu-cluster[data-cluster-id]'
    )
  );

const card = (panel: MgpuPanel, id: string) => {
  const found = panel.node.querySelector<HTMLElement>(
    `.jp-mgpu-cluster[data-cluster-id="${id}"]`
  );
  if (!found) {
    throw new Error(`no card for ${id}`);
  }
  return found;
};

const empty = (panel: MgpuPanel) =>
  panel.node.querySelector<HTMLElement>('.jp-mgpu-clusters > .jp-mgpu-empty')!;

afterEach(() => {
  document.body.replaceChildren();
});

describe('MgpuPanel', () => {
  it('shows the empty message until a cluster runs, and again when none is left', () => {
    const { panel } = makePanel();
    expect(panel.id).toBe('jupyter-mgpu-panel');
    expect(empty(panel).textContent).toContain('No running cluster');
    expect(empty(panel).style.display).toBe('');
    panel.render(snapshot([]));
    expect(cards(panel)).toHaveLength(0);
    expect(empty(panel).style.display).toBe('');
    expect(panel.node.querySelector('.jp-mgpu-live')!.textContent).toBe(
      'live · every 1 s'
    );
    panel.render(snapshot([cluster('1-a', 2)]));
    expect(empty(panel).style.display).toBe('none');
    panel.render(snapshot([]));
    expect(cards(panel)).toHaveLength(0);
    expect(empty(panel).style.display).toBe('');
  });

  it('draws one card per cluster with a row per rank, and removes a card whose cluster left', () => {
    const { panel } = makePanel();
    panel.render(snapshot([cluster('1-a', 2), cluster('2-b', 4)]));
    expect(cards(panel).map(c => c.dataset.clusterId)).toEqual(['1-a', '2-b']);
    const a = card(panel, '1-a');
    expect(a.dataset.status).toBe('running');
    expect(a.dataset.worldSize).toBe('2');
    expect(a.querySelector('.jp-mgpu-cluster-title')!.textContent).toBe(
      '1-a · running'
    );
    const pieces = Array.from(a.querySelectorAll('.jp-mgpu-piece')).map(
      p => p.textContent
    );
    expect(a.querySelector('.jp-mgpu-owner')!.textContent).toBe(
      'another notebook' // no notebook is current yet
    );
    expect(pieces.slice(0, 3)).toEqual([
      '01_quickstart.ipynb',
      '2× cpu',
      'gloo'
    ]);
    const rows = Array.from(a.querySelectorAll<HTMLElement>('.jp-mgpu-rank'));
    expect(rows.map(r => r.dataset.rank)).toEqual(['0', '1']);
    expect(rows[1].dataset.usedBytes).toBe('1001');
    expect(rows[1].dataset.pid).toBe('101');
    // the name and, apart, the state: a narrow row shortens the name, never the state
    expect(rows[1].querySelector('.jp-mgpu-label')!.textContent).toBe(
      'rank 1 · cpu:1 · pid 101'
    );
    expect(rows[1].querySelector('.jp-mgpu-state')!.textContent).toBe('idle');
    expect(rows[1].title).toBe(
      'rank 1 · cpu:1 · pid 101 · idle · 1001 B / 3.9 KiB'
    );
    expect(rows[1].querySelector('.jp-mgpu-figures')!.textContent).toBe(
      '1001 B / 3.9 KiB'
    );
    expect(card(panel, '2-b').querySelectorAll('.jp-mgpu-rank')).toHaveLength(
      4
    );
    // one sparkline per rank
    expect(a.querySelectorAll('.jp-mgpu-sparkline polyline')).toHaveLength(2);

    // the same card is updated in place; the cluster that left loses its card
    panel.render(
      snapshot([
        cluster('2-b', 4, {
          ranks: [0, 1, 2, 3].map(r => rank(r, { state: 'busy' }))
        })
      ])
    );
    expect(cards(panel).map(c => c.dataset.clusterId)).toEqual(['2-b']);
    const states = Array.from(
      card(panel, '2-b').querySelectorAll<HTMLElement>('.jp-mgpu-rank')
    ).map(r => r.dataset.state);
    expect(states).toEqual(['busy', 'busy', 'busy', 'busy']);
  });

  it('stops a cluster with its Stop button, disabled while stopping or stopped', () => {
    const { panel, actions } = makePanel();
    panel.render(snapshot([cluster('1-a', 2), cluster('2-b', 1)]));
    const stop = (id: string) =>
      card(panel, id).querySelector<HTMLButtonElement>('.jp-mgpu-stop')!;
    expect(stop('1-a').disabled).toBe(false);
    stop('1-a').click();
    expect(actions.stopCluster).toHaveBeenCalledTimes(1);
    expect(actions.stopCluster.mock.calls[0][0].cluster_id).toBe('1-a');

    for (const status of ['stopping', 'stopped']) {
      panel.render(
        snapshot([cluster('1-a', 2, { status }), cluster('2-b', 1)])
      );
      expect(stop('1-a').disabled).toBe(true);
      expect(stop('2-b').disabled).toBe(false);
      expect(card(panel, '1-a').dataset.status).toBe(status);
    }
    // the button acts on the cluster as last rendered
    stop('2-b').click();
    expect(actions.stopCluster).toHaveBeenCalledTimes(2);
    expect(actions.stopCluster.mock.calls[1][0].cluster_id).toBe('2-b');
  });

  it('hides the last profile until a cluster carries one, then draws a rect per segment', () => {
    const { panel } = makePanel();
    panel.render(snapshot([cluster('1-a', 2)]));
    const section = () =>
      card(panel, '1-a').querySelector<HTMLElement>('.jp-mgpu-profile')!;
    expect(section().hidden).toBe(true);
    expect(section().dataset.ranks).toBeUndefined();

    panel.render(
      snapshot([cluster('1-a', 2, { profile, profile_time: 1700000000 })])
    );
    expect(section().hidden).toBe(false);
    expect(section().dataset.ranks).toBe('2');
    // rank 0: a call, a collective, a wait; rank 1: a call, a collective
    const rects = section().querySelectorAll('svg.jp-mgpu-profile-plot rect');
    expect(rects).toHaveLength(5);
    expect(
      section().querySelectorAll('rect.jp-mgpu-profile-wait')
    ).toHaveLength(1);
    expect(
      section().querySelector('.jp-mgpu-profile-caption')!.textContent
    ).toBe('rank 1 came last to 3 collectives · the others waited 0.90 s');

    // the stream carries a profile once: the next snapshot (profile null) keeps it shown
    panel.render(snapshot([cluster('1-a', 2, { profile_time: 1700000000 })]));
    expect(section().hidden).toBe(false);
    expect(section().querySelectorAll('rect')).toHaveLength(5);
  });

  it('calls togglePause and insertInit from the toolbar, and shows the paused state', () => {
    const { panel, actions } = makePanel();
    const pause =
      panel.node.querySelector<HTMLButtonElement>('.jp-mgpu-pause')!;
    pause.click();
    expect(actions.togglePause).toHaveBeenCalledTimes(1);
    panel.node.querySelector<HTMLButtonElement>('.jp-mgpu-insert')!.click();
    expect(actions.insertInit).toHaveBeenCalledTimes(1);
    expect(actions.stopCluster).not.toHaveBeenCalled();

    panel.render(snapshot([], { paused: true }));
    expect(pause.textContent).toBe('Resume');
    expect(panel.node.querySelector('.jp-mgpu-live')!.textContent).toBe(
      'paused'
    );
    panel.setPaused(false, 2);
    expect(pause.textContent).toBe('Pause');
    expect(panel.node.querySelector('.jp-mgpu-live')!.textContent).toBe(
      'live · every 2 s'
    );
  });

  it('lists the host devices, or says there is no GPU', () => {
    const { panel } = makePanel();
    panel.render(snapshot([]));
    expect(
      panel.node.querySelector('.jp-mgpu-devices .jp-mgpu-empty')!.textContent
    ).toContain('No GPU on node1');
    panel.render(
      snapshot([], {
        devices: {
          time,
          host: 'node1',
          source: 'nvml',
          devices: [
            {
              id: 'cuda:0',
              kind: 'cuda',
              index: 0,
              name: 'Test GPU',
              used_bytes: 512,
              total_bytes: 1024,
              utilization: null,
              cluster_id: null,
              rank: null,
              own_bytes: null,
              other_users_bytes: null
            }
          ]
        }
      })
    );
    const rows = panel.node.querySelectorAll<HTMLElement>('.jp-mgpu-device');
    expect(rows).toHaveLength(1);
    expect(rows[0].dataset.deviceId).toBe('cuda:0');
    expect(rows[0].querySelector('.jp-mgpu-label')!.textContent).toBe(
      'cuda:0 Test GPU'
    );
    expect(
      rows[0].querySelector<HTMLElement>('.jp-mgpu-bar-fill')!.style.width
    ).toBe('50.0%');
  });
});
