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
});
