"""What the memory dashboard shows, from telemetry samples, without a widget: rows, host groups, axes.

``widgets/memory_dashboard.py`` (the anywidget and its pusher thread) sends these to ``static/memory.js``,
which only draws them: every size is formatted here (one format for every view). A row per rank
(:func:`device_row`); a group per host (:func:`host_groups`) whose summary line counts its ranks by state,
so that at 32–64 ranks a folded group still says what its ranks do; the timelines' shared axes
(:func:`timeline_axis`); and the rows a dashboard keeps once its session shut down (:func:`ended_rows`:
"shut down", never a live-looking "idle"). Pure: no widget, no session.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine.records.memory_figures import figures
from jupyter_mgpu.units import format_bytes
from jupyter_mgpu.widgets.colors import rank_color

# bar colours by fraction of the device used, like Dask's worker-memory bars
FILL_OK, FILL_HIGH, FILL_FULL, FILL_DEAD = "#1f77b4", "#ff7f0e", "#d62728", "#9e9e9e"
HIGH_FRACTION, FULL_FRACTION = 0.6, 0.85
COMPACT_AT = 8  # more ranks than this: compact rows, a bounded scrolling list, hosts folded (memory.js too)
ENDED_STATE, ENDED_BADGE = "stopped", "shut down"
# states that ask for attention first when ranks are counted; any other comes before idle
STATE_ORDER = ("dead", "restarting", "busy", "starting", "unknown", ENDED_STATE)


def fill_color(fraction: float | None, state: str) -> str:
    """The bar colour for a device ``fraction`` full: blue, orange past 60 %, red past 85 %, grey when dead,
    restarting or shut down."""
    if state in ("dead", "restarting", ENDED_STATE):
        return FILL_DEAD
    if fraction is None or fraction < HIGH_FRACTION:
        return FILL_OK
    return FILL_HIGH if fraction < FULL_FRACTION else FILL_FULL


def device_row(sample: dict[str, Any]) -> dict[str, Any]:
    """What one bar shows, from one telemetry sample: used, reserved, peak, limit (``engine/records/memory_figures``:
    the convention of every view), fraction, colours, and the texts (formatted here, never in the browser)."""
    rank = int(sample["rank"])
    state = sample.get("state") or "unknown"
    if (sample.get("where") or {}).get("state") == "debugging":  # at a pdb prompt: not busy, as mg.where() says
        state = "debugging"
    f = figures(sample)
    used, reserved, peak, limit, labels = f["used"], f["reserved"], f["peak"], f["limit"], f["labels"]
    fraction = (used / limit) if used is not None and limit else None
    held = sample.get("failure_held_bytes") or 0  # the last failure's frames, kept for %mgpu_debug
    size: Callable[[Any], str] = lambda n: "?" if n is None else format_bytes(n)  # noqa: E731
    text = (
        size(used)
        + (f" / {size(limit)}" if limit else "")
        + (f" · peak {size(peak)}" if peak else "")
        + (f" · reserved {size(reserved)}" if reserved is not None else "")
        + (f" · {size(held)} held by the last failure" if held else "")
    )
    tips = {
        "used": f"{labels['used']} {size(used)}",
        "reserved": f"{labels['reserved']} {size(reserved)}",
        "peak": f"{labels['peak']} {size(peak)}",
        "limit": f"{labels['limit']} {size(limit)}",
        "baseline": f"engine runtime {size(f['baseline'])}",
        "held": f"held by the last failure's frames {size(held)} (%mgpu_debug --release frees them)" if held else "",
    }
    return {
        "rank": rank,
        "device": sample.get("device") or f"rank {rank}",
        "host": sample.get("host") or "",  # set in clusters across hosts: the rows are grouped under it
        "name": sample.get("name") or "",
        "color": rank_color(rank),
        "state": state,
        "badge": state,  # the badge's words: the state, or "shut down" (ended_rows)
        "op": sample.get("op") or "",
        "time": sample.get("time"),
        "used": used,
        "reserved": reserved,
        "peak": peak,
        "limit": limit,
        "baseline": f["baseline"],
        "held": held,
        "restarts": list(sample.get("restarts") or ()),  # when mg.restart started the rank again (epoch s)
        "fraction": fraction,
        "fill": fill_color(fraction, state),
        "labels": labels,
        "text": text,
        "tips": tips,
    }


def ended_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a session that shut down: each rank "shut down" with its last figures, greyed, no op."""
    return [{**r, "state": ENDED_STATE, "badge": ENDED_BADGE, "op": "", "fill": FILL_DEAD} for r in rows]


def state_counts(states: list[str]) -> str:
    """``1 dead · 2 busy · 29 idle``: ranks counted by state, those that ask for attention first, idle last."""
    counts: dict[str, int] = {}
    for s in states:
        counts[s] = counts.get(s, 0) + 1

    def order(state: str) -> tuple[int, str]:
        if state == "idle":
            return len(STATE_ORDER) + 1, state
        return (STATE_ORDER.index(state) if state in STATE_ORDER else len(STATE_ORDER)), state

    return " · ".join(f"{counts[s]} {ENDED_BADGE if s == ENDED_STATE else s}" for s in sorted(counts, key=order))


def host_groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One group per host, in the order hosts first appear (one group of every rank on one host, host ``""``):
    ``{"host", "ranks": [rank, ...], "text": "node1 · 16 ranks · 1 busy · 15 idle · 2.3 GiB / 64.0 GiB"}``."""
    by_host: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_host.setdefault(r["host"] or "", []).append(r)
    groups = []
    for host, members in by_host.items():
        n = "1 rank" if len(members) == 1 else f"{len(members)} ranks"
        used = sum(r["used"] or 0 for r in members)
        limit = sum(r["limit"] or 0 for r in members)
        memory = f" · {format_bytes(used)} / {format_bytes(limit)}" if limit else ""
        text = f"{n} · {state_counts([r['state'] for r in members])}{memory}"
        groups.append(
            {"host": host, "ranks": [r["rank"] for r in members], "text": f"{host} · {text}" if host else text}
        )
    return groups


def visible(row: dict[str, Any]) -> dict[str, Any]:
    """What of a device row can change the picture: byte counts to the MiB, not the sample time."""
    out = {k: v for k, v in row.items() if k not in ("time", "fraction", "text", "tips")}
    for k in ("used", "reserved", "peak"):
        if isinstance(out.get(k), int):
            out[k] >>= 20
    return out


def same_picture(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> bool:
    """True when two lists of device rows differ at most in their sample times and by less than 1 MiB
    (an idle engine's resident size wobbles by a few pages; the bars show MiB at best)."""
    return len(new) == len(old) and all(visible(a) == visible(b) for a, b in zip(new, old))


def restart_marks(devices: list[dict[str, Any]], now: float, window: float) -> list[list[list[Any]]]:
    """Per row, the restarts within the timeline's ``window``: ``[seconds before now, "restarted at 20:31:05"]``,
    drawn on the rank's timeline so that its history shows where the new engine began."""
    return [
        [
            [round(t - now, 2), f"rank {d['rank']} restarted at {time.strftime('%H:%M:%S', time.localtime(t))}"]
            for t in d.get("restarts") or ()
            if now - window <= t <= now + 1
        ]
        for d in devices
    ]


def timeline_axis(timeline: list[list[list[float]]], devices: list[dict[str, Any]], window: float) -> dict[str, Any]:
    """The timelines' shared axes: a byte range that fits what they show (labelled), and the seconds they span
    (the time since the first point, up to ``window``, so a young dashboard is not squeezed to the right)."""
    seen = [v for pts in timeline for _, v in pts if v is not None] + [d["used"] for d in devices if d["used"]]
    hi, lo = (max(seen), min(seen)) if seen else (1.0, 0.0)
    pad = 0.1 * (hi - lo) + 0.05 * hi
    lo, hi = max(0.0, lo - pad), hi + pad
    oldest = -min([pts[0][0] for pts in timeline if pts] + [0.0])
    span = min(window, max(10.0, 10.0 * -(-oldest // 10)))  # whole tens of seconds, at least 10
    return {
        "lo": lo,
        "hi": hi,
        "lo_text": format_bytes(lo),
        "hi_text": format_bytes(hi),
        "span": span,
        "span_text": f"−{span:.0f} s",
    }
