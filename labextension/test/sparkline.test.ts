import { History, scalePoints, toPolyline } from '../src/sparkline';

describe('History', () => {
  it('keeps only the last 60 s per key and ignores repeated times', () => {
    const h = new History(60);
    for (let t = 0; t <= 100; t += 10) {
      h.add('a', t, t);
    }
    h.add('a', 100, 999);
    expect(h.get('a').map(s => s.t)).toEqual([40, 50, 60, 70, 80, 90, 100]);
    expect(h.get('a')[h.get('a').length - 1].v).toBe(100);
    h.add('b', 1, 1);
    h.retain(new Set(['a']));
    expect(h.size).toBe(1);
    expect(h.get('b')).toEqual([]);
  });
});

describe('scalePoints', () => {
  it('maps the window to the width and 0..max to the height (0 at the bottom)', () => {
    const pts = scalePoints(
      [
        { t: 40, v: 0 },
        { t: 70, v: 50 },
        { t: 100, v: 100 }
      ],
      100,
      100,
      200,
      40
    );
    expect(pts).toEqual([
      [0, 40],
      [100, 20],
      [200, 0]
    ]);
  });
  it('drops samples outside the window and clamps values above max', () => {
    const pts = scalePoints(
      [
        { t: 10, v: 5 },
        { t: 100, v: 500 },
        { t: 130, v: 1 }
      ],
      100,
      100,
      60,
      10
    );
    expect(pts).toEqual([[60, 0]]);
  });
  it('scales to the largest sample when max is unknown', () => {
    const pts = scalePoints(
      [
        { t: 99, v: 2 },
        { t: 100, v: 4 }
      ],
      100,
      0,
      60,
      10
    );
    expect(pts[1][1]).toBe(0);
    expect(pts[0][1]).toBe(5);
    expect(toPolyline(pts)).toBe('59,5 60,0');
  });
});
