/**
 * @jest-environment jsdom
 */
/** The memory dashboard's drawing helpers (static/memory.js, sent alone: no transport). */
import { fakeModel, loadWidget, moduleSource } from './widget_source';

const { pct, el, drawBar, drawTimeline, render, RATES } = loadWidget(
  'memory.js',
  ['pct', 'el', 'drawBar', 'drawTimeline', 'render', 'RATES']
);

const device = (over: Record<string, any> = {}) => ({
  rank: 0,
  device: 'cpu:0',
  host: null,
  state: 'idle',
  op: null,
  used: 50,
  reserved: 60,
  peak: 80,
  limit: 100,
  baseline: null,
  fill: '#3a3',
  color: '#1f77b4',
  text: '50 B / 100 B',
  labels: { used: '50 B' },
  tips: {
    used: 'used',
    reserved: 'reserved',
    peak: 'peak',
    limit: 'limit',
    baseline: 'baseline'
  },
  ...over
});

describe('memory.js', () => {
  it('is sent without the players transport', () => {
    expect(moduleSource('memory.js')).not.toContain('function transport(');
  });

  it('clamps a value to a percentage of the scale', () => {
    expect(pct(50, 200)).toBe(25);
    expect(pct(300, 100)).toBe(100);
    expect(pct(-5, 100)).toBe(0);
    expect(pct(null, 100)).toBe(0);
    expect(pct(undefined, 100)).toBe(0);
    expect(pct(5, 0)).toBe(0);
  });

  it('makes elements with a class and a text', () => {
    const node = el('span', 'a b', 'hello');
    expect(node.tagName).toBe('SPAN');
    expect(node.className).toBe('a b');
    expect(node.textContent).toBe('hello');
    expect(el('div').className).toBe('');
  });

  it('draws a bar: used and reserved widths, peak and limit marks', () => {
    const bar = drawBar(device(), 200);
    const style = (cls: string) =>
      bar.querySelector(`.${cls}`)!.getAttribute('style');
    expect(bar.className).toBe('mgpu-mem-bar');
    expect(style('mgpu-mem-used')).toContain('width: 25%');
    expect(style('mgpu-mem-reserved')).toContain('width: 30%');
    expect(style('mgpu-mem-peak')).toContain('left: 40%');
    expect(style('mgpu-mem-limit')).toContain('left: 50%');
    expect(bar.querySelector('.mgpu-mem-baseline')).toBeNull();
    const bare = drawBar(
      device({ reserved: null, peak: 0, limit: 0, baseline: 20 }),
      100
    );
    expect(bare.querySelector('.mgpu-mem-reserved')).toBeNull();
    expect(bare.querySelector('.mgpu-mem-peak')).toBeNull();
    expect(bare.querySelector('.mgpu-mem-limit')).toBeNull();
    expect(
      bare.querySelector('.mgpu-mem-baseline')!.getAttribute('style')
    ).toContain('width: 20%');
  });

  it('draws a timeline over the last span seconds, time labels on the last row only', () => {
    const axis = { span: 60, lo: 0, hi: 100, lo_text: '0 B', hi_text: '100 B' };
    const svg = drawTimeline(
      [
        [-120, 10], // older than the span: left out
        [-60, 0],
        [0, 100]
      ],
      device(),
      axis,
      false
    );
    expect(svg.getAttribute('class')).toBe('mgpu-mem-timeline');
    expect(svg.getAttribute('height')).toBe('34');
    const line = svg.querySelector('polyline')!;
    // x from 58 (60 s ago) to 258 (now), y from 32 (lo) to 2 (hi)
    expect(line.getAttribute('points')).toBe('58.0,32.0 258.0,2.0');
    expect(line.getAttribute('stroke')).toBe('#1f77b4');
    expect(svg.querySelector('.mgpu-mem-timeline-limit')).not.toBeNull();
    const texts = (s: SVGElement) =>
      Array.from(s.querySelectorAll('text')).map(t => t.textContent);
    expect(texts(svg)).toEqual(['100 B', '0 B']);
    const last = drawTimeline(
      [],
      device(),
      { ...axis, span_text: '60 s' },
      true
    );
    expect(last.getAttribute('height')).toBe('47');
    expect(texts(last)).toEqual(['100 B', '0 B', '60 s', 'time', 'now']);
    expect(last.querySelector('polyline')).toBeNull();
    expect(last.querySelector('title')!.textContent).toBe(
      'rank 0: 50 B, last 60 s (axis 0 B to 100 B)'
    );
  });

  it('renders a row per device and pauses through the model', () => {
    const model = fakeModel({
      title: 'c1',
      paused: false,
      refresh_rate: 3,
      status: '',
      devices: [device(), device({ rank: 1, state: 'busy', op: 'all_reduce' })],
      timeline: [[], []],
      axis: {}
    });
    const root = document.createElement('div');
    const dispose = render({ model, el: root });
    expect(root.classList.contains('mgpu-mem')).toBe(true);
    const rows = root.querySelectorAll<HTMLElement>('.mgpu-mem-row');
    expect(Array.from(rows).map(r => r.dataset.rank)).toEqual(['0', '1']);
    expect(
      rows[1].querySelector('.mgpu-mem-badge')!.getAttribute('title')
    ).toBe('all_reduce');
    // a rate not in the menu is added to it
    const rate = root.querySelector<HTMLSelectElement>('.mgpu-mem-rate')!;
    expect(rate.options).toHaveLength(RATES.length + 1);
    expect(rate.value).toBe('3');
    const pause = root.querySelector<HTMLButtonElement>('.mgpu-mem-pause')!;
    expect(pause.textContent).toBe('pause');
    pause.click();
    expect(model.state.paused).toBe(true);
    expect(pause.textContent).toBe('resume');
    expect(model.save_changes).toHaveBeenCalled();
    dispose();
  });

  describe('at 64 ranks on 4 hosts', () => {
    const many = (over: Record<string, any> = {}) =>
      Array.from({ length: 64 }, (_, r) =>
        device({
          rank: r,
          device: `cpu:${r % 16}`,
          host: `node${Math.floor(r / 16) + 1}`,
          state: r % 16 === 3 ? 'busy' : 'idle',
          badge: r % 16 === 3 ? 'busy' : 'idle',
          text: `${r} MiB / 4.3 GiB · peak 2.0 GiB`,
          ...over
        })
      );
    const groups = [1, 2, 3, 4].map(h => ({
      host: `node${h}`,
      ranks: Array.from({ length: 16 }, (_, i) => (h - 1) * 16 + i),
      text: `node${h} · 16 ranks · 1 busy · 15 idle · 16.5 GiB / 68.0 GiB`
    }));
    const state = (over: Record<string, any> = {}) => ({
      title: '64 × cpu · cluster c',
      paused: false,
      refresh_rate: 20,
      status: '',
      ended: false,
      devices: many(),
      groups,
      timeline: Array.from({ length: 64 }, () => [
        [-30, 10],
        [0, 20]
      ]),
      axis: { span: 60, lo: 0, hi: 100, lo_text: '0 B', hi_text: '100 B' },
      ...over
    });

    it('folds each host to its summary line, each rank once, in a list that scrolls', () => {
      const model = fakeModel(state());
      const root = document.createElement('div');
      const dispose = render({ model, el: root });
      const rows = root.querySelector<HTMLElement>('.mgpu-mem-rows')!;
      expect(rows.classList.contains('mgpu-mem-compact')).toBe(true);
      const boxes = Array.from(
        root.querySelectorAll<HTMLDetailsElement>('details.mgpu-mem-group')
      );
      expect(boxes.map(b => b.dataset.host)).toEqual([
        'node1',
        'node2',
        'node3',
        'node4'
      ]);
      expect(boxes.every(b => !b.open)).toBe(true);
      expect(boxes[2].querySelector('summary')!.textContent).toBe(
        'node3 · 16 ranks · 1 busy · 15 idle · 16.5 GiB / 68.0 GiB'
      );
      const ranks = Array.from(
        root.querySelectorAll<HTMLElement>('.mgpu-mem-row')
      ).map(r => Number(r.dataset.rank));
      expect(ranks).toEqual(Array.from({ length: 64 }, (_, r) => r));
      expect(boxes[1].querySelectorAll('.mgpu-mem-row')).toHaveLength(16);
      // compact rows: a small timeline without axis labels, the first figure, the full text as tooltip
      const row = root.querySelector<HTMLElement>(
        '.mgpu-mem-row[data-rank="19"]'
      )!;
      const spark = row.querySelector('svg.mgpu-mem-timeline')!;
      expect(spark.getAttribute('width')).toBe('120');
      expect(spark.querySelectorAll('text')).toHaveLength(0);
      expect(spark.querySelector('polyline')!.getAttribute('points')).toBe(
        '60.0,15.4 120.0,13.8'
      );
      const text = row.querySelector<HTMLElement>('.mgpu-mem-text')!;
      expect(text.textContent).toBe('19 MiB / 4.3 GiB');
      expect(text.title).toBe('19 MiB / 4.3 GiB · peak 2.0 GiB');
      expect(row.querySelector('.mgpu-mem-badge')!.textContent).toBe('busy');
      dispose();
    });

    it('keeps a host the user opened open across redraws', () => {
      const model = fakeModel(state());
      const root = document.createElement('div');
      const dispose = render({ model, el: root });
      const summary = root.querySelector<HTMLElement>(
        'details[data-host="node2"] > summary'
      )!;
      summary.click(); // jsdom toggles the <details> as a browser does
      expect(
        root.querySelector<HTMLDetailsElement>('details[data-host="node2"]')!
          .open
      ).toBe(true);
      model.set('devices', many({ state: 'busy', badge: 'busy' }));
      const open = Array.from(
        root.querySelectorAll<HTMLDetailsElement>('details.mgpu-mem-group')
      ).map(b => b.open);
      expect(open).toEqual([false, true, false, false]);
      expect(
        root.querySelector('.mgpu-mem-row[data-rank="20"] .mgpu-mem-badge')!
          .textContent
      ).toBe('busy');
      dispose();
    });

    it('shows one summary line over a single host, with the shared axes', () => {
      const model = fakeModel(
        state({
          devices: many({ host: '' }),
          groups: [
            {
              host: '',
              ranks: Array.from({ length: 64 }, (_, r) => r),
              text: '64 ranks · 4 busy · 60 idle · 66.0 GiB / 272.0 GiB'
            }
          ]
        })
      );
      const root = document.createElement('div');
      const dispose = render({ model, el: root });
      expect(root.querySelectorAll('details')).toHaveLength(0);
      expect(root.querySelectorAll('.mgpu-mem-row')).toHaveLength(64);
      const summary = root.querySelector<HTMLElement>('.mgpu-mem-summary')!;
      expect(summary.hidden).toBe(false);
      expect(summary.textContent).toBe(
        '64 ranks · 4 busy · 60 idle · 66.0 GiB / 272.0 GiB · timelines 0 B to 100 B, last 60 s'
      );
      dispose();
    });

    it('after shutdown says so in every badge, controls off, even while paused', () => {
      const model = fakeModel(state({ paused: true }));
      const root = document.createElement('div');
      const dispose = render({ model, el: root });
      model.set(
        'devices',
        many({ state: 'stopped', badge: 'shut down', op: '' })
      );
      model.set('status', 'session shut down');
      model.set('ended', true);
      const badges = Array.from(root.querySelectorAll('.mgpu-mem-badge')).map(
        b => b.textContent
      );
      expect(badges).toHaveLength(64);
      expect(new Set(badges)).toEqual(new Set(['shut down']));
      expect(root.querySelector('.mgpu-mem-status')!.textContent).toBe(
        'session shut down'
      );
      expect(root.classList.contains('mgpu-mem-ended')).toBe(true);
      expect(
        root.querySelector<HTMLButtonElement>('.mgpu-mem-pause')!.disabled
      ).toBe(true);
      expect(
        root.querySelector<HTMLSelectElement>('.mgpu-mem-rate')!.disabled
      ).toBe(true);
      dispose();
    });
  });
});
