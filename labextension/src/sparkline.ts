/**
 * A 60-second memory history per rank and the pure scaling that turns it into SVG polyline points.
 */

export interface Sample {
  /** seconds since the epoch (the server's sample time) */
  t: number;
  /** bytes */
  v: number;
}

/** Per-key ring of samples no older than `windowS` seconds before the newest one. */
export class History {
  constructor(readonly windowS = 60) {}

  add(key: string, t: number, v: number): void {
    let list = this._series.get(key);
    if (!list) {
      list = [];
      this._series.set(key, list);
    }
    if (list.length > 0 && t <= list[list.length - 1].t) {
      return; // the same snapshot twice, or out of order
    }
    list.push({ t, v });
    const cutoff = t - this.windowS;
    while (list.length > 0 && list[0].t < cutoff) {
      list.shift();
    }
  }

  get(key: string): Sample[] {
    return this._series.get(key) ?? [];
  }

  /** Forget every key not in `keep` (clusters that ended). */
  retain(keep: Set<string>): void {
    for (const key of Array.from(this._series.keys())) {
      if (!keep.has(key)) {
        this._series.delete(key);
      }
    }
  }

  get size(): number {
    return this._series.size;
  }

  private _series = new Map<string, Sample[]>();
}

/**
 * Scale samples into a `width`×`height` box: x spans the last `windowS` seconds ending at `now`
 * (older samples are dropped), y spans 0..`max` bytes with 0 at the bottom. Returns [x, y] pairs.
 */
export function scalePoints(
  samples: Sample[],
  now: number,
  max: number,
  width: number,
  height: number,
  windowS = 60
): Array<[number, number]> {
  const top = max > 0 ? max : Math.max(1, ...samples.map(s => s.v));
  const out: Array<[number, number]> = [];
  for (const s of samples) {
    const age = now - s.t;
    if (age > windowS || age < 0) {
      continue;
    }
    const x = width * (1 - age / windowS);
    const y = height * (1 - Math.min(1, Math.max(0, s.v / top)));
    out.push([Math.round(x * 10) / 10, Math.round(y * 10) / 10]);
  }
  return out;
}

/** The `points` attribute of an SVG polyline. */
export function toPolyline(points: Array<[number, number]>): string {
  return points.map(([x, y]) => `${x},${y}`).join(' ');
}
