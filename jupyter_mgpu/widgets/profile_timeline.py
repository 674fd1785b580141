"""``p.timeline()``: every rank of a profile on one time axis (a plotly figure, zoom and hover as plotly
gives them): the calls it ran, its longest operations, the collectives its code called (the part before
the group's last rank arrived drawn apart: waiting), the collectives torch ran from C++, and a line joining
the ranks of each collective at the moment the last one arrived. Rows stay readable at 16 ranks and
more (28 px each); the figure takes the cell's width. The data comes from ``profiling/profile_data.py``.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.profiling.profile_data import BACKEND_EVENT, RankRecord, collective_rows, instances
from jupyter_mgpu.profiling.profile_data import waits as split_at_last_arrival

ROW_PX = 28
MAX_OPS_PER_RANK = 1500
COLOURS = {"all_reduce": "#1f77b4", "broadcast": "#2ca02c", "reduce": "#17becf", "barrier": "#7f7f7f"}


def _ms(ns: float, t0: float) -> float:
    return (ns - t0) / 1e6


def _top_level_ops(rec: RankRecord, window_ns: float) -> list[dict[str, Any]]:
    """The rank's longest CPU operations that no other operation of its busiest thread contains."""
    ops = [e for e in rec.events() if e.get("cat") == "cpu_op" and not BACKEND_EVENT.match(str(e.get("name", "")))]
    if not ops:
        return []
    busy: dict[Any, int] = {}
    for e in ops:
        busy[e.get("tid")] = busy.get(e.get("tid"), 0) + e["end_ns"] - e["start_ns"]
    main = max(busy, key=lambda t: busy[t])
    top, end = [], -1
    for e in sorted((e for e in ops if e.get("tid") == main), key=lambda e: (e["start_ns"], -e["end_ns"])):
        if e["start_ns"] >= end:
            top.append(e)
            end = e["end_ns"]
    shortest = max(20_000, window_ns * 0.002)  # shorter than 20 µs or 0.2 % of the profile: not drawn
    top = [e for e in top if e["end_ns"] - e["start_ns"] >= shortest]
    return sorted(top, key=lambda e: e["start_ns"] - e["end_ns"])[:MAX_OPS_PER_RANK]


def _bars(
    name: str,
    colour: str,
    width: float,
    rows: list[tuple[str, float, float, str]],
    opacity: float = 1.0,
    hover: bool = True,
) -> Any:
    import plotly.graph_objects as go

    return go.Bar(
        name=name,
        orientation="h",
        y=[r[0] for r in rows],
        base=[r[1] for r in rows],
        x=[r[2] for r in rows],
        width=width,
        marker={"color": colour, "line": {"width": 0}},
        opacity=opacity,
        hovertext=[r[3] for r in rows],
        # plotly's hovertemplate overrides hoverinfo: a bar without hover must have none
        hovertemplate="%{hovertext}<extra></extra>" if hover else None,
        hoverinfo=None if hover else "skip",
        showlegend=bool(rows),
    )


def timeline_figure(ranks: list[RankRecord]) -> Any:
    """The figure (see the module's docstring)."""
    import plotly.graph_objects as go

    label = {rec.rank: f"rank {rec.rank}" for rec in ranks}
    starts = [c["start_ns"] for rec in ranks for c in rec.calls] + [
        c["enter_ns"] for rec in ranks for c in rec.collectives
    ]
    ends = [c["end_ns"] for rec in ranks for c in rec.calls] + [c["exit_ns"] for rec in ranks for c in rec.collectives]
    t0 = min(starts) if starts else 0
    window = (max(ends) - t0) if ends else 1
    calls, ops, colls, waits, torch_colls = [], [], [], [], []
    for rec in sorted(ranks, key=lambda x: x.rank):
        y = label[rec.rank]
        for c in rec.calls:
            calls.append((y, _ms(c["start_ns"], t0), (c["end_ns"] - c["start_ns"]) / 1e6, f"{y}: {c['label']}"))
        for e in _top_level_ops(rec, window):
            shapes = (e.get("args") or {}).get("Input Dims")
            text = f"{y}: {e['name']} {shapes if shapes else ''} {(e['end_ns'] - e['start_ns']) / 1e6:.2f} ms"
            ops.append((y, _ms(e["start_ns"], t0), (e["end_ns"] - e["start_ns"]) / 1e6, text))
    lines_x: list[float | None] = []
    lines_y: list[str | None] = []
    for w in split_at_last_arrival(ranks):
        c, y, latest = w["record"], label[w["rank"]], w["latest"]
        waited = (w["wait_end_ns"] - c["enter_ns"]) / 1e6
        text = (
            f"{y}: {c.get('call')} #{w['number']} ({c.get('bytes', 0)} B) at {c.get('line')}; "
            f"{(c['exit_ns'] - c['enter_ns']) / 1e6:.2f} ms, {waited:.2f} ms waiting for rank {latest}"
        )
        moving = max(0.01, (c["exit_ns"] - w["wait_end_ns"]) / 1e6)  # once all have arrived
        colls.append((y, _ms(w["wait_end_ns"], t0), moving, text))
        if waited > 0:
            waits.append((y, _ms(c["enter_ns"], t0), waited, f"{y} waits {waited:.2f} ms for rank {latest}"))
    for by_rank in instances(ranks).values():
        last = max(c["enter_ns"] for c in by_rank.values())
        if len(by_rank) > 1:
            lines_x += [_ms(last, t0), _ms(last, t0), None]
            lines_y += [label[min(by_rank)], label[max(by_rank)], None]
    for row in collective_rows(ranks):
        if row["source"] != "your code":
            for r, skew in row["skew_ms"].items():
                start = _ms(row["start_ns"], t0) + skew
                torch_colls.append(
                    (
                        label[r],
                        start,
                        max(0.01, _ms(row["end_ns"], t0) - start),
                        f"{label[r]}: {row['call']} ({row['bytes']} B)",
                    )
                )
    fig = go.Figure(
        [
            _bars("calls", "#d9d9d9", 0.9, calls, 0.6, hover=False),
            _bars("operations", "#9ecae1", 0.55, ops),
            _bars("collectives", "#1f77b4", 0.7, colls),
            _bars("waiting for the last rank", "#e6550d", 0.7, waits, 0.8),
            _bars("collectives torch ran (C++)", "#756bb1", 0.3, torch_colls),
            go.Scatter(
                x=lines_x,
                y=lines_y,
                mode="lines",
                name="last rank arrives",
                line={"color": "#444", "width": 1, "dash": "dot"},
                hoverinfo="skip",
                showlegend=bool(lines_x),
            ),
        ]
    )
    fig.update_layout(
        barmode="overlay",
        height=150 + ROW_PX * max(1, len(ranks)),
        margin={"l": 70, "r": 20, "t": 40, "b": 40},
        xaxis={"title": {"text": "ms since the profile's first call"}, "zeroline": False},
        yaxis={"categoryorder": "array", "categoryarray": [label[r] for r in sorted(label)], "autorange": "reversed"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        hovermode="closest",
        title=None,
    )
    return fig
