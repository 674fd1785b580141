/**
 * The cluster's last `mg.profile()` in the sidebar (issue 36): a row per rank on one time axis — its
 * calls, its collectives once all ranks had arrived, and its waiting for the last rank — and one line
 * naming the straggler. Pure: geometry and words here, the DOM in panel.ts.
 */
import { ProfilePayload } from './payloads';

export const PROFILE_W = 240;
export const PROFILE_ROW = 8;

export type SegmentKind = 'calls' | 'collective' | 'wait';

export interface ProfileRect {
  kind: SegmentKind;
  x: number;
  y: number;
  width: number;
  height: number;
}

/** Rectangles of every rank's segments in a `width` × (ranks × `row`) box, x scaled to the profile's
 * window; a segment is at least 0.5 px wide, so a short wait still shows. */
export function profileRects(
  p: ProfilePayload,
  width = PROFILE_W,
  row = PROFILE_ROW
): ProfileRect[] {
  const scale = p.window_ms > 0 ? width / p.window_ms : 0;
  const out: ProfileRect[] = [];
  const kinds: [SegmentKind, number][] = [
    ['calls', 0],
    ['collective', 1],
    ['wait', 1]
  ];
  p.ranks.forEach((r, i) => {
    for (const [kind, inset] of kinds) {
      for (const [start, length] of r[kind]) {
        out.push({
          kind,
          x: start * scale,
          y: i * row + inset,
          width: Math.max(0.5, length * scale),
          height: row - 1 - 2 * inset
        });
      }
    }
  });
  return out;
}

/** `rank 2 came last to 3 collectives · the others waited 0.90 s` (or that no rank was waited for). */
export function profileCaption(p: ProfilePayload): string {
  const rows = p.summary;
  if (rows.length === 0) {
    return 'no rank in this profile';
  }
  const last = rows.reduce((a, b) =>
    b.last_to_arrive > a.last_to_arrive ? b : a
  );
  if (last.last_to_arrive === 0) {
    return `${p.window_ms.toFixed(0)} ms profiled · no rank was waited for`;
  }
  const others = rows
    .filter(r => r.rank !== last.rank)
    .reduce((s, r) => s + r.wait_s, 0);
  const times = last.last_to_arrive === 1 ? 'collective' : 'collectives';
  return `rank ${last.rank} came last to ${last.last_to_arrive} ${times} · the others waited ${others.toFixed(2)} s`;
}
