/**
 * @jest-environment jsdom
 */
/** The placement view's geometry and frame drawing (static/placement.js, transport.js prepended). */
import { fakeModel, loadWidget } from './widget_source';

const { esc, geometry, tileRect, drawFrame, render } = loadWidget(
  'placement.js',
  ['esc', 'geometry', 'tileRect', 'drawFrame', 'render']
);

// two ranks, one 4×4 panel of two row halves; block b: [panel, r0, r1, c0, c1, tiles]
const data = {
  world_size: 2,
  colors: ['#1f77b4', '#ff7f0e'],
  max_mem: 64,
  panels: [
    {
      title: 'x <4×4>',
      size: [4, 4],
      tiles: [
        [0, 2, 0, 4],
        [2, 4, 0, 4]
      ],
      tile_bytes: ['32 B', '32 B']
    }
  ],
  blocks: [
    [0, 0, 2, 0, 4, [0]],
    [0, 2, 4, 0, 4, [1]]
  ],
  frames: [
    { caption: 'start', add: [], rm: [] },
    {
      caption: 'scatter',
      add: [
        [0, 0],
        [1, 1]
      ],
      rm: [],
      mem: [32, 32],
      mem_text: ['32 B', '32 B'],
      arrows: [[-1, 0, 32, false]]
    },
    {
      caption: 'rank 1 copies block 0',
      add: [[1, 0]],
      rm: [],
      compute: [[1, 0]]
    }
  ]
};

const owners = (svg: string): string[] => {
  const div = document.createElement('div');
  div.innerHTML = svg;
  return Array.from(div.querySelectorAll<SVGGElement>('g.mgpu-tile')).map(g =>
    g.getAttribute('data-owners')!
  );
};

describe('placement.js', () => {
  it('escapes text for SVG', () => {
    expect(esc('<a & b>')).toBe('&lt;a &amp; b&gt;');
    expect(esc(3)).toBe('3');
  });

  it('lays out panels within 200 px, aspect kept within 1:6', () => {
    const square = geometry({ world_size: 2, panels: [{ size: [4, 4] }] });
    expect(square.panels).toEqual([
      { x: 10, y: 44, w: 200, h: 200, R: 4, C: 4 }
    ]);
    expect(square.width).toBe(300); // room for the rank boxes: 120 + 90 × 2 > 10 + 200 + 36
    expect(square.height).toBe(364);
    const wide = geometry({ world_size: 8, panels: [{ size: [1, 100] }] });
    expect(wide.panels[0].w).toBe(200);
    expect(wide.panels[0].h).toBe(34); // 200 / 6, but never under 34 px
    expect(wide.width).toBe(120 + 90 * 8);
    const two = geometry({
      world_size: 1,
      panels: [{ size: [2, 1] }, { size: [0, 0] }]
    });
    expect(two.panels[1].x).toBe(10 + 100 + 36);
    expect(two.panels[1].R).toBe(1);
  });

  it('maps a tile [r0, r1, c0, c1] to its rectangle in the panel', () => {
    const g = { x: 10, y: 44, w: 200, h: 100, R: 4, C: 8 };
    expect(tileRect(g, [0, 2, 4, 8])).toEqual([110, 44, 100, 50]);
  });

  it('draws each tile with the ranks holding it', () => {
    const geo = geometry(data);
    const start = drawFrame(data, new Set(), data.frames[0], geo);
    expect(start).toContain('class="mgpu-placement-svg"');
    expect(start).toContain('>start</text>');
    expect(owners(start)).toEqual(['', '']);
    const held = new Set(['0,0', '1,1']);
    const scattered = drawFrame(data, held, data.frames[1], geo);
    expect(owners(scattered)).toEqual(['0', '1']);
    expect(scattered).toContain('data-rank="0" data-mem="32"');
    expect(scattered).toContain('>notebook</text>'); // an arrow from the notebook (-1)
    expect(scattered.match(/class="mgpu-arrow"/g)).toHaveLength(1);
    expect(scattered).toContain('x &lt;4×4&gt;');
    held.add('1,0');
    const copied = drawFrame(data, held, data.frames[2], geo);
    expect(owners(copied)).toEqual(['0 1', '1']);
    expect(copied).toContain('class="mgpu-compute"');
    expect(copied).not.toContain('>notebook</text>');
  });

  it('steps through the frames by applying their differences', () => {
    const model = fakeModel({
      data,
      index: 0,
      playing: false,
      loop: false,
      interval_ms: 100,
      speed: 1,
      live: false,
      follow: false,
      mode: 'player',
      badge: 'trace',
      title: 'scatter'
    });
    const el = document.createElement('div');
    const stop = render({ model, el });
    const shown = () =>
      owners(el.querySelector('.mgpu-placement-stage')!.innerHTML);
    expect(shown()).toEqual(['', '']);
    model.set('index', 2);
    expect(shown()).toEqual(['0 1', '1']);
    model.set('index', 1);
    expect(shown()).toEqual(['0', '1']);
    model.set('index', 0);
    expect(shown()).toEqual(['', '']);
    model.set('mode', 'view');
    expect(
      el.querySelector<HTMLElement>('.mgpu-placement-stage')
    ).not.toBeNull();
    stop();
  });

  it('says so while a live player has no events yet', () => {
    const model = fakeModel({
      data: null,
      index: 0,
      playing: false,
      interval_ms: 100,
      live: true,
      follow: true,
      mode: 'player',
      badge: '',
      title: ''
    });
    const el = document.createElement('div');
    render({ model, el });
    expect(el.querySelector('.mgpu-placement-stage')!.textContent).toBe(
      'waiting for events…'
    );
    model.set('data', data);
    expect(model.state.index).toBe(2); // follows the newest frame
    expect(el.querySelector('.mgpu-placement-stage svg')).not.toBeNull();
  });
});
