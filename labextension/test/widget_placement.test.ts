/**
 * @jest-environment jsdom
 */
/** The placement view's geometry and frame drawing (static/placement.js, transport.js prepended). */
import { fakeModel, loadWidget } from './widget_source';

const {
  esc,
  geometry,
  tileRect,
  drawFrame,
  render,
  wrap,
  tileLabel,
  labelFit
} = loadWidget('placement.js', [
  'esc',
  'geometry',
  'tileRect',
  'drawFrame',
  'render',
  'wrap',
  'tileLabel',
  'labelFit'
]);

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
  ],
  // what widgets/placement_geometry.geometry gives for this data (Python sends it with the data)
  geo: {
    width: 360,
    height: 361.7,
    caption: [21, 1, 45],
    panels: [[10, 49, 200, 200]],
    titles: true,
    ranks: [
      [92, 289.7],
      [174, 289.7]
    ],
    box: [78, 40],
    compact: false,
    groups: [],
    host: [10, 289.7],
    arrow_room: 28.7,
    row_room: 24
  }
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

  it('draws where Python placed everything, with the same text rules', () => {
    expect(geometry(data)).toBe(data.geo);
    // the same answers as placement_geometry.wrap, tile_label and label_fit
    expect(wrap('one two three four five six', 9, 2)).toEqual([
      'one two',
      'three…'
    ]);
    expect(tileLabel([0, 1, 2, 3], 4)).toBe('all');
    expect(tileLabel([3, 5], 8)).toBe('3,5');
    expect(tileLabel([0, 1, 2, 3, 4], 8)).toBe('5 ranks');
    // a 10 px label with 1.5 px to each edge of its tile (issue 47): 13 px, and not 12
    expect(labelFit('12', 40, 13)).toBe('h');
    expect(labelFit('12', 13, 40)).toBe('v');
    expect(labelFit('12', 40, 12)).toBe('');
    expect(labelFit('12', 12, 40)).toBe('');
    expect(labelFit('12', 9, 9)).toBe('');
  });

  it('tells ranks 32 to 63 apart from ranks 0 to 31', () => {
    const P = 64;
    const many = {
      ...data,
      world_size: P,
      colors: Array.from(
        { length: P },
        (_, r) => `#0000${(r + 16).toString(16)}`
      ),
      panels: [
        {
          title: '',
          size: [64, 4],
          tiles: Array.from({ length: P }, (_, r) => [r, r + 1, 0, 4])
        }
      ],
      blocks: Array.from({ length: P }, (_, r) => [0, r, r + 1, 0, 4, [r]]),
      geo: {
        ...data.geo,
        compact: true,
        box: [42, 36],
        host: null,
        ranks: Array.from({ length: P }, (_, r) => [
          10 + (r % 16) * 46,
          400 + Math.floor(r / 16) * 40
        ])
      }
    };
    const held = new Set([32, 33, 63].map(r => `${r},${r}`));
    const svg = drawFrame(
      many,
      held,
      { caption: 'x', add: [], rm: [] },
      many.geo
    );
    const drawn = owners(svg);
    expect(drawn[32]).toBe('32');
    expect(drawn[63]).toBe('63');
    expect(drawn[0]).toBe(''); // not rank 32 folded onto rank 0
    expect(svg.match(/class="mgpu-rank"/g)).toHaveLength(P);
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
    expect(scattered).toMatch(/class="mgpu-arrow" d="M49,289.7 Q/); // an arc from the notebook's box
    expect(scattered).toContain('x &lt;4×4&gt;'); // a panel title: several tensors, or one not named above
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
