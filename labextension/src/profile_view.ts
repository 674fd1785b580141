/**
 * The cluster's last `mg.profile()` in the sidebar (issue 36): a row per rank on one time axis — its
 * calls, its collectives once all ranks had arrived, and its waiting for the last rank — and one line
 * naming the straggler. The geometry and the words are pure; `drawProfile` puts them in a card's section.
 */
import { el, SVG_NS } from './dom';
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

/** Fill a cluster card's profile `section` with profile `p` (heading, a row per rank, the caption) and show it. */
export function drawProfile(section: HTMLElement, p: ProfilePayload): void {
  const height = Math.max(1, p.ranks.length) * PROFILE_ROW;
  const svg = document.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('class', 'jp-mgpu-profile-plot');
  svg.setAttribute('viewBox', `0 0 ${PROFILE_W} ${height}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.style.height = `${height}px`;
  const title = document.createElementNS(SVG_NS, 'title');
  title.textContent =
    'last profile: a row per rank; grey calls, blue collectives, orange waiting for the last rank';
  svg.appendChild(title);
  for (const r of profileRects(p)) {
    const rect = document.createElementNS(SVG_NS, 'rect');
    rect.setAttribute('class', `jp-mgpu-profile-${r.kind}`);
    rect.setAttribute('x', r.x.toFixed(2));
    rect.setAttribute('y', String(r.y));
    rect.setAttribute('width', r.width.toFixed(2));
    rect.setAttribute('height', String(r.height));
    svg.appendChild(rect);
  }
  section.replaceChildren(
    el('div', 'jp-mgpu-profile-heading', 'Last profile'),
    svg,
    el('div', 'jp-mgpu-profile-caption', profileCaption(p))
  );
  section.dataset.ranks = String(p.ranks.length);
  section.hidden = false;
}
