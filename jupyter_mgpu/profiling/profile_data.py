"""The answers of a profile, from what the ranks recorded (pure: no torch, no session).

Inputs, per rank: the Kineto trace torch.profiler wrote (``traceEvents`` with ``ts`` in µs from
``baseTimeNanoseconds``), the calls it ran and the collectives its code called (``engine/records/rank_profiler.py``,
times in ns since the epoch on the rank's clock) and the rank clock's offset from the notebook's.
Every time here is the notebook's clock, in ns. The profile's answers:

- :func:`summary_rows`: per rank ``compute_s`` (time in calls outside collectives), ``collective_s``
  (time inside them), ``wait_s`` (the part of it before the group's last rank arrived) and
  ``last_to_arrive`` (how many collectives this rank entered last) — those torch ran from C++ included
  (their time on the backend's thread, which may overlap the rank's computing);
- :func:`collective_rows`: one row per collective instance — those the ranks' code called, numbered
  as the ranks number them, with each rank's arrival skew, who came last and the bus bandwidth once
  all had arrived; and those torch ran from C++ (DDP's gradient buckets), from the backend's events;
- :func:`merged_chrome_trace`: one Chrome/Perfetto trace, a process per rank, on one time axis.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.ops.collective_bench import BUS_FACTORS

BACKEND_EVENT = re.compile(r"^(gloo|nccl|ucc|mpi):([a-z_]+)$")
ELEMENT_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
}
PROFILE_CALL = "mg.profile"  # the label of the profile's own start and stop calls: not the user's


@dataclass
class RankRecord:
    """One rank's part of a profile, times moved onto the notebook's clock."""

    rank: int
    host: str
    offset_ns: int  # the rank's clock minus the notebook's
    trace: dict[str, Any]  # the Kineto trace as torch wrote it
    calls: list[dict[str, Any]] = field(default_factory=list)
    collectives: list[dict[str, Any]] = field(default_factory=list)
    issued: list[dict[str, Any]] = field(default_factory=list)  # the flight recorder's: op, created_ns, bytes

    def __post_init__(self) -> None:
        for c in self.issued:
            c["created_ns"] -= self.offset_ns
        for c in self.calls:
            c["start_ns"] -= self.offset_ns
            c["end_ns"] -= self.offset_ns
        self.calls = [c for c in self.calls if c["label"] != PROFILE_CALL]
        for c in self.collectives:
            c["enter_ns"] -= self.offset_ns
            c["exit_ns"] -= self.offset_ns

    @property
    def base_ns(self) -> int:
        """Where the trace's ``ts`` 0 is on the notebook's clock."""
        return int(self.trace.get("baseTimeNanoseconds") or 0) - self.offset_ns

    def events(self) -> list[dict[str, Any]]:
        """The trace's complete events (``ph`` X) with ``start_ns``/``end_ns`` on the notebook's clock."""
        out = []
        for e in self.trace.get("traceEvents") or ():
            if e.get("ph") != "X" or "ts" not in e:
                continue
            start = self.base_ns + int(float(e["ts"]) * 1000)
            out.append({**e, "start_ns": start, "end_ns": start + int(float(e.get("dur") or 0) * 1000)})
        return out


def instances(ranks: list[RankRecord]) -> dict[tuple[Any, ...], dict[int, dict[str, Any]]]:
    """The collectives the ranks' code called, by (generation, group, number): rank -> its record."""
    out: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = defaultdict(dict)
    for rec in ranks:
        for c in rec.collectives:
            if c.get("n") is not None:
                out[(c.get("gen"), c.get("g"), c["n"])][rec.rank] = c
    return dict(sorted(out.items(), key=lambda kv: min(c["enter_ns"] for c in kv[1].values())))


def _bus_factor(op: str, n: int) -> float:
    base = op.replace("_into_tensor", "").replace("_tensor", "").replace("_single", "")
    factor: Callable[[int], float] = BUS_FACTORS.get(base, lambda n: 1.0)
    return factor(n)


def collective_rows(ranks: list[RankRecord]) -> list[dict[str, Any]]:
    """One row per collective instance, in the order they began (see the module's docstring)."""
    rows = []
    for (_gen, group, number), by_rank in instances(ranks).items():
        first = min(c["enter_ns"] for c in by_rank.values())
        last = max(c["enter_ns"] for c in by_rank.values())
        done = max(c["exit_ns"] for c in by_rank.values())
        sample = by_rank[min(by_rank)]
        members = sample.get("group") or sorted(by_rank)
        complete = set(members) <= set(by_rank)
        moved = done - last
        nbytes = int(sample.get("bytes") or 0)
        busbw = nbytes * _bus_factor(sample["op"], len(members)) / (moved / 1e9) if complete and moved > 0 else None
        rows.append(
            {
                "source": "your code",
                "op": sample["op"],
                "number": number,
                "group": group,
                "call": sample.get("call"),
                "line": sample.get("line"),
                "bytes": nbytes,
                "start_ns": first,
                "last_arrival_ns": last,
                "end_ns": done,
                "skew_ms": {r: round((c["enter_ns"] - first) / 1e6, 1) for r, c in sorted(by_rank.items())},
                "last_rank": max(by_rank, key=lambda r: by_rank[r]["enter_ns"]) if len(by_rank) > 1 else None,
                "busbw_gbps": None if busbw is None else busbw / 1e9,
            }
        )
    return rows + _backend_rows(ranks)


def _backend_bytes(e: dict[str, Any]) -> int:
    args = e.get("args") or {}
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    total = 0
    for d, t in zip(dims, types):
        count = 1
        for x in d if isinstance(d, list) else ():
            count *= int(x) if not isinstance(x, list) else 1
        total += count * ELEMENT_BYTES.get(str(t), 0)
    return total


MATCH_NS = 50_000_000  # a backend event may start this much before its flight-recorder entry's creation (clocks)
LATE_NS = 5_000_000_000  # and this much after it: gloo runs a group's collectives in turn, late on a loaded machine


def _sized(
    events: list[dict[str, Any]], entries: list[dict[str, Any]], watched: Sequence[tuple[int, int]] = ()
) -> None:
    """Give each backend event the flight-recorder entry of the same op issued first among those not yet
    matched (a process group runs its collectives in the order they were issued; each entry used once):
    its group and torch's number for it (``g``, ``n``: the collective watch's numbering), and its ``bytes``
    unless the recorded shapes (``record_shapes``) give them. Entries of the ranks' own calls (``watched``)
    are not candidates: their backend events are not among ``events``."""
    left = sorted(
        (c for c in entries if not any(a - MATCH_NS <= c["created_ns"] <= b for a, b in watched)),
        key=lambda c: c["created_ns"],
    )
    for e in events:
        e["bytes"] = _backend_bytes(e)
        while left and left[0]["created_ns"] < e["start_ns"] - LATE_NS:
            left.pop(0)  # an entry whose event the profile did not record
        if left and left[0]["created_ns"] <= e["start_ns"] + MATCH_NS:
            near = left.pop(0)
            e["bytes"] = e["bytes"] or int(near["bytes"])
            e["g"], e["n"] = near.get("g"), near.get("n")


def _backend_instances(ranks: list[RankRecord]) -> list[tuple[str, int, dict[int, dict[str, Any]]]]:
    """The collectives torch ran from C++ (DDP's buckets, FSDP2's all-gathers): the backend's events outside
    every collective the ranks' code called, matched across ranks by torch's number for them where the flight
    recorder gave one, else by their order per op: (op, number, rank -> its event, with its ``bytes``)."""
    per_rank: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for rec in ranks:
        watched = [(c["enter_ns"], c["exit_ns"]) for c in rec.collectives]
        found: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in sorted(rec.events(), key=lambda e: e["start_ns"]):
            m = BACKEND_EVENT.match(str(e.get("name", "")))
            if m and not any(a <= e["start_ns"] <= b for a, b in watched):
                found[m.group(2)].append(e)
        for op, events in found.items():
            _sized(events, [c for c in rec.issued if c["op"] == op], watched)
        per_rank[rec.rank] = found
    numbered = all(e.get("n") for found in per_rank.values() for events in found.values() for e in events)
    out: list[tuple[str, int, dict[int, dict[str, Any]]]] = []
    for op in sorted({op for found in per_rank.values() for op in found}):
        if numbered:
            by_number: dict[tuple[Any, int], dict[int, dict[str, Any]]] = defaultdict(dict)
            for r, found in per_rank.items():
                for e in found.get(op, ()):
                    by_number[(e["g"], int(e["n"]))][r] = e
            out.extend((op, n, by_rank) for (_, n), by_rank in sorted(by_number.items(), key=lambda kv: kv[0][1]))
            continue
        count = max(len(found.get(op, ())) for found in per_rank.values())
        for k in range(count):
            out.append((op, k + 1, {r: found[op][k] for r, found in per_rank.items() if k < len(found.get(op, ()))}))
    return out


def _backend_rows(ranks: list[RankRecord]) -> list[dict[str, Any]]:
    """One row per collective torch ran from C++ (:func:`_backend_instances`)."""
    rows = []
    for op, number, by_rank in _backend_instances(ranks):
        first = min(e["start_ns"] for e in by_rank.values())
        rows.append(
            {
                "source": "torch (C++)",
                "op": op,
                "number": number,
                "group": by_rank[min(by_rank)].get("g"),
                "call": f"{op} issued by torch",
                "line": None,
                "bytes": by_rank[min(by_rank)]["bytes"],
                "start_ns": first,
                "last_arrival_ns": max(e["start_ns"] for e in by_rank.values()),
                "end_ns": max(e["end_ns"] for e in by_rank.values()),
                "skew_ms": {r: round((e["start_ns"] - first) / 1e6, 1) for r, e in sorted(by_rank.items())},
                "last_rank": max(by_rank, key=lambda r: by_rank[r]["start_ns"]) if len(by_rank) > 1 else None,
                "busbw_gbps": None,
            }
        )
    return sorted(rows, key=lambda r: r["start_ns"])


def summary_rows(ranks: list[RankRecord]) -> list[dict[str, Any]]:
    """Per rank: compute_s, collective_s, wait_s, last_to_arrive, calls_s (see the module's docstring);
    the collectives torch ran from C++ count as the ranks' own do."""
    wait: dict[int, float] = defaultdict(float)
    last: dict[int, int] = defaultdict(int)
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)  # each rank's time in collectives from C++
    called = [{r: (c["enter_ns"], c["exit_ns"]) for r, c in by.items()} for by in instances(ranks).values()]
    from_cpp = [{r: (e["start_ns"], e["end_ns"]) for r, e in by.items()} for _, _, by in _backend_instances(ranks)]
    for by_rank in called + from_cpp:
        latest = max(a for a, _ in by_rank.values())
        if len(by_rank) > 1:
            last[max(by_rank, key=lambda r: by_rank[r][0])] += 1
        for r, (a, b) in by_rank.items():
            wait[r] += max(0, min(b, latest) - a) / 1e9
    for by_rank in from_cpp:  # on the backend's thread: they may overlap one another, counted once
        for r, span in by_rank.items():
            spans[r].append(span)
    rows = []
    for rec in sorted(ranks, key=lambda x: x.rank):
        calls_s = sum(c["end_ns"] - c["start_ns"] for c in rec.calls) / 1e9
        collective_s = (sum(c["exit_ns"] - c["enter_ns"] for c in rec.collectives) + _covered(spans[rec.rank])) / 1e9
        rows.append(
            {
                "rank": rec.rank,
                "compute_s": max(0.0, calls_s - collective_s),
                "collective_s": collective_s,
                "wait_s": wait[rec.rank],
                "last_to_arrive": last[rec.rank],
                "calls_s": calls_s,
            }
        )
    return rows


def _covered(spans: list[tuple[int, int]]) -> int:
    """The time the intervals ``spans`` cover together (an overlap counted once), in ns."""
    total, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def merged_chrome_trace(ranks: list[RankRecord]) -> dict[str, Any]:
    """Every rank's events in one Chrome/Perfetto trace: a process per rank (``pid`` = rank), one time
    axis (µs from the earliest event), the collectives the ranks' code called as events of their own."""
    all_events = {rec.rank: rec.events() for rec in ranks}
    starts = [e["start_ns"] for evs in all_events.values() for e in evs]
    starts += [c["enter_ns"] for rec in ranks for c in rec.collectives]
    t0 = min(starts) if starts else 0
    out: list[dict[str, Any]] = []
    for rec in sorted(ranks, key=lambda x: x.rank):
        out.append({"ph": "M", "name": "process_name", "pid": rec.rank, "tid": 0, "args": {"name": f"rank {rec.rank}"}})
        out.append(
            {"ph": "M", "name": "process_sort_index", "pid": rec.rank, "tid": 0, "args": {"sort_index": rec.rank}}
        )
        for e in all_events[rec.rank]:
            clean = {k: v for k, v in e.items() if k not in ("start_ns", "end_ns")}
            out.append({**clean, "pid": rec.rank, "ts": (e["start_ns"] - t0) / 1000})
        for c in rec.collectives:
            out.append(
                {
                    "ph": "X",
                    "cat": "mgpu collective",
                    "name": f"{c['op']} #{c.get('n')}",
                    "pid": rec.rank,
                    "tid": "collectives",
                    "ts": (c["enter_ns"] - t0) / 1000,
                    "dur": (c["exit_ns"] - c["enter_ns"]) / 1000,
                    "args": {"call": c.get("call"), "line": c.get("line"), "bytes": c.get("bytes")},
                }
            )
    return {"traceEvents": out, "displayTimeUnit": "ms"}


SIDEBAR_SEGMENTS = 150  # per rank and kind, the longest first: what a 250 px wide row can show


def waits(ranks: list[RankRecord]) -> list[dict[str, Any]]:
    """Each watched collective on each rank, split where the group's last rank arrived: ``wait_end_ns``
    (the rank waited from entering until then), the collective's ``number`` and the ``latest`` rank."""
    out = []
    for (_gen, _group, number), by_rank in instances(ranks).items():
        last = max(c["enter_ns"] for c in by_rank.values())
        latest = max(by_rank, key=lambda r: by_rank[r]["enter_ns"])
        for r, c in by_rank.items():
            out.append(
                {
                    "rank": r,
                    "record": c,
                    "number": number,
                    "latest": latest,
                    "wait_end_ns": max(c["enter_ns"], min(c["exit_ns"], last)),
                }
            )
    return out


def sidebar_data(ranks: list[RankRecord], profiled_at: float) -> dict[str, Any]:
    """The last profile as the JupyterLab sidebar draws it: per rank its calls, collectives (once all had
    arrived) and waiting as ``[start ms, length ms]`` from the first call, and the summary."""
    starts = [c["start_ns"] for rec in ranks for c in rec.calls] + [
        c["enter_ns"] for rec in ranks for c in rec.collectives
    ]
    ends = [c["end_ns"] for rec in ranks for c in rec.calls] + [c["exit_ns"] for rec in ranks for c in rec.collectives]
    t0 = min(starts, default=0)
    segs: dict[int, dict[str, list[list[float]]]] = {
        rec.rank: {"calls": [], "collective": [], "wait": []} for rec in ranks
    }

    def add(rank: int, kind: str, a: int, b: int) -> None:
        if b > a:
            segs[rank][kind].append([round((a - t0) / 1e6, 3), round((b - a) / 1e6, 3)])

    for rec in ranks:
        for c in rec.calls:
            add(rec.rank, "calls", c["start_ns"], c["end_ns"])
    for w in waits(ranks):
        add(w["rank"], "wait", w["record"]["enter_ns"], w["wait_end_ns"])
        add(w["rank"], "collective", w["wait_end_ns"], w["record"]["exit_ns"])
    rows = []
    for rank in sorted(segs):
        kinds = {k: sorted(v, key=lambda s: -s[1])[:SIDEBAR_SEGMENTS] for k, v in segs[rank].items()}
        rows.append({"rank": rank, **kinds})
    summary = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()} for row in summary_rows(ranks)]
    window = (max(ends) - t0) / 1e6 if ends else 0.0
    return {"profiled_at": profiled_at, "window_ms": round(window, 3), "ranks": rows, "summary": summary}


def dumps(trace: dict[str, Any]) -> str:
    return json.dumps(trace, separators=(",", ":"))
