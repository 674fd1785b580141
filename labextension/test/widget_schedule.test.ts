/**
 * @jest-environment jsdom
 */
/** The pipeline schedule player's captions and drawing (static/schedule.js, transport.js prepended). */
import { fakeModel, loadWidget, moduleSource } from './widget_source';

const { pct, escS, captionOf, legendOf, drawSchedule, render } = loadWidget(
  'schedule.js',
  ['pct', 'escS', 'captionOf', 'legendOf', 'drawSchedule', 'render']
);

// two stages, one micro-batch: stage 0 forward, send to stage 1, stage 1 forward, backward, ...
// a box: [stage, kind (0 forward, 1 backward), micro-batch, start s, end s, waiting s]
const step = (n: number) => ({
  step: n,
  span: 0.4,
  boxes: [
    [0, 0, 0, 0.0, 0.1, 0],
    [1, 0, 0, 0.1, 0.2, 0.001],
    [1, 1, 0, 0.2, 0.3, 0],
    [0, 1, 0, 0.3, 0.4, 0]
  ],
  // [src, dst, micro-batch, kind, sent s, received s]
  arrows: [
    [0, 1, 0, 0, 0.1, 0.1],
    [1, 0, 0, 1, 0.3, 0.3]
  ],
  idle: [0.2, 0.2],
  busy: [0.2, 0.2],
  bubble: [0.2, 0.1],
  other: [0, 0.1]
});

const data = {
  stages: 2,
  colors: ['#1f77b4', '#ff7f0e'],
  light: ['#aec7e8', '#ffbb78'],
  microbatches: 1,
  schedule: 'gpipe',
  timed_from: 2,
  expected_bubble: 0.5,
  bubble: [0.5, 0.25],
  steps: [step(0), step(1), step(2)],
  frames: [0, 1, 2].flatMap(si => [1, 2, 3, 4].map(n => [si, n]))
};

describe('schedule.js', () => {
  it('is sent with the transport prepended', () => {
    const src = moduleSource('schedule.js');
    expect(src.indexOf('function transport(')).toBeLessThan(
      src.indexOf('function drawSchedule(')
    );
  });

  it('formats shares and escapes text', () => {
    expect(pct(0.256)).toBe('26%');
    expect(pct(0)).toBe('0%');
    expect(pct(null)).toBe('–');
    expect(pct(undefined)).toBe('–');
    expect(escS('a<b>&c')).toBe('a&lt;b&gt;&amp;c');
  });

  it('captions a frame: the step phase, the box, and the bubble against the formula', () => {
    const [l1, l2] = captionOf(data, 1);
    expect(l1).toBe(
      'training step 0 (warm-up) · stage 1 forward of micro-batch 0 · 100.0–200.0 ms of 400.0 ms'
    );
    expect(l2).toBe(
      'bubble per stage, share of computing + bubble (timed steps): 50%, 25% · formula (p−1)/(m+p−1) = 50%'
    );
    expect(captionOf(data, 4 + 3)[0]).toContain(
      'training step 1 (measured) · stage 0 backward'
    );
    expect(captionOf(data, 8)[0]).toContain('training step 2 (timed)');
  });

  it('draws the legend in the stage colours', () => {
    const legend = legendOf(data);
    expect(legend.startsWith('<g class="mgpu-sched-legend">')).toBe(true);
    expect(legend).toContain('fill="#aec7e8"'); // forward: the light colour
    expect(legend).toContain('fill="#1f77b4"'); // backward: the full one
    expect(legend).toContain('bubble: waiting for work still being computed');
  });

  it('draws the first n boxes, the newest outlined, and only the sends received by then', () => {
    const div = document.createElement('div');
    div.innerHTML = drawSchedule(data, 1);
    const boxes = Array.from(
      div.querySelectorAll<SVGGElement>('g.mgpu-sched-box')
    );
    expect(
      boxes.map(b => [
        b.getAttribute('data-stage'),
        b.getAttribute('data-kind'),
        b.getAttribute('data-mb')
      ])
    ).toEqual([
      ['0', 'forward', '0'],
      ['1', 'forward', '0']
    ]);
    expect(boxes[1].querySelector('rect')!.getAttribute('stroke')).toBe('#000');
    expect(boxes[0].querySelector('rect')!.getAttribute('stroke')).toBe('#fff');
    expect(boxes[1].querySelector('title')!.textContent).toBe(
      'stage 1 forward of micro-batch 0: 100.00–200.00 ms, 1.00 ms of it waiting for a core'
    );
    expect(div.querySelectorAll('line.mgpu-sched-arrow')).toHaveLength(1);
    expect(div.querySelectorAll('g.mgpu-sched-split')).toHaveLength(2);
    div.innerHTML = drawSchedule(data, 3);
    expect(div.querySelectorAll('g.mgpu-sched-box')).toHaveLength(4);
    expect(div.querySelectorAll('line.mgpu-sched-arrow')).toHaveLength(2);
    expect(div.querySelector('.mgpu-sched-idle')!.textContent).toBe(
      'bubble 50% · other 0%'
    );
  });

  it('renders the frame at index, and says so before the first events', () => {
    const model = fakeModel({
      data: null,
      index: 0,
      playing: false,
      loop: false,
      interval_ms: 100,
      speed: 1,
      live: true,
      follow: true,
      badge: '',
      title: 'pipeline'
    });
    const el = document.createElement('div');
    const stop = render({ model, el });
    const stage = el.querySelector('.mgpu-schedule-stage')!;
    expect(stage.textContent).toBe("waiting for the pipeline's first events…");
    expect(el.querySelector('.mgpu-player-counter')!.textContent).toBe(
      'no events yet'
    );
    model.set('data', data);
    expect(model.state.index).toBe(11); // follows the newest frame
    expect(stage.querySelectorAll('g.mgpu-sched-box')).toHaveLength(4);
    model.set('index', 4);
    expect(stage.querySelectorAll('g.mgpu-sched-box')).toHaveLength(1);
    stop();
  });
});
