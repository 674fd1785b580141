"""The pure answers of a profile (issue 36), from synthetic rank records: waiting is the time before the
group's last rank arrived, the last rank is counted, busbw uses nccl-tests' factors, clocks are moved by
each rank's offset, torch's own (C++) collectives come from the backend's events, and the merged trace
puts every rank on one axis."""

from __future__ import annotations

import pytest

from jupyter_mgpu.profiling.profile_data import RankRecord, collective_rows, merged_chrome_trace, summary_rows

MS = 1_000_000  # ns


def _rank(rank: int, arrivals: list[float], offset_ms: float = 0.0, events: list[dict] | None = None) -> RankRecord:
    """A rank that ran one call of 1 s with an all_reduce #k entered at arrivals[k] ms; all of them end
    at 10 ms after the latest arrival of that number (times on its own clock: + offset)."""
    latest = [max(a) for a in zip(*ALL)] if ALL else arrivals
    collectives = [
        {
            "op": "all_reduce",
            "n": k + 1,
            "g": "0",
            "gen": 0,
            "call": "all_reduce float32[1000]",
            "line": "line 6 of the cell",
            "group": [0, 1, 2],
            "bytes": 4000,
            "enter_ns": int((a + offset_ms) * MS),
            "exit_ns": int((latest[k] + 10 + offset_ms) * MS),
        }
        for k, a in enumerate(arrivals)
    ]
    calls = [{"label": "%%mgpu cell", "start_ns": int(offset_ms * MS), "end_ns": int((1000 + offset_ms) * MS)}]
    calls.append({"label": "mg.profile", "start_ns": 0, "end_ns": 5 * MS})  # the profile's own: left out
    trace = {"baseTimeNanoseconds": int(offset_ms * MS), "traceEvents": events or []}
    return RankRecord(rank, "host", int(offset_ms * MS), trace, calls, collectives)


ALL = [[0.0, 100.0, 200.0], [0.0, 100.0, 200.0], [300.0, 400.0, 500.0]]  # rank 2 late by 300 ms each time


@pytest.fixture
def ranks() -> list[RankRecord]:
    # rank 1's clock runs 40 ms ahead of the notebook's: its offset brings it back
    return [_rank(0, ALL[0]), _rank(1, ALL[1], offset_ms=40.0), _rank(2, ALL[2])]


def test_waiting_is_the_time_before_the_last_rank_arrived_and_the_last_rank_is_counted(ranks):
    rows = {r["rank"]: r for r in summary_rows(ranks)}
    for r in (0, 1):
        assert rows[r]["wait_s"] == pytest.approx(3 * 0.3) and rows[r]["last_to_arrive"] == 0
    assert rows[2]["wait_s"] == 0 and rows[2]["last_to_arrive"] == 3
    assert rows[0]["calls_s"] == pytest.approx(1.0)  # mg.profile's own calls are not the user's
    assert rows[0]["collective_s"] == pytest.approx(3 * 0.31)
    assert rows[0]["compute_s"] == pytest.approx(1.0 - 3 * 0.31)


def test_a_row_per_collective_with_skews_last_rank_and_busbw(ranks):
    rows = [r for r in collective_rows(ranks) if r["source"] == "your code"]
    assert [r["number"] for r in rows] == [1, 2, 3]
    first = rows[0]
    assert first["skew_ms"] == {0: 0.0, 1: 0.0, 2: 300.0} and first["last_rank"] == 2
    # 4000 B, 2(n-1)/n = 4/3 for all_reduce on 3 ranks, moved in the 10 ms after the last arrival
    assert first["busbw_gbps"] == pytest.approx(4000 * 4 / 3 / 0.010 / 1e9)
    assert first["line"] == "line 6 of the cell"


def test_torchs_own_collectives_come_from_the_backends_events():
    def gloo(start_ms: float) -> dict:
        return {
            "ph": "X",
            "name": "gloo:all_reduce",
            "ts": start_ms * 1000,
            "dur": 2000,
            "tid": 9,
            "args": {"Input Dims": [[1010]], "Input type": ["float"]},
        }

    ranks = [RankRecord(r, "h", 0, {"baseTimeNanoseconds": 0, "traceEvents": [gloo(10 + r)]}) for r in range(2)]
    rows = collective_rows(ranks)
    assert len(rows) == 1 and rows[0]["source"] == "torch (C++)"
    assert rows[0]["op"] == "all_reduce" and rows[0]["bytes"] == 1010 * 4
    assert rows[0]["skew_ms"] == {0: 0.0, 1: 1.0} and rows[0]["last_rank"] == 1


def test_without_recorded_shapes_the_flight_recorder_sizes_them_and_the_summary_counts_them():
    """torch.profiler's defaults record no shapes: a C++ collective's size and number come from the flight
    recorder's entry of the same op created nearest before it; its time and waiting count in the summary."""

    def gloo(op: str, start_ms: float, dur_ms: float) -> dict:
        return {"ph": "X", "name": f"gloo:{op}", "ts": start_ms * 1000, "dur": dur_ms * 1000, "tid": 9, "args": {}}

    def rank(r: int, late_ms: float) -> RankRecord:
        events = [gloo("all_gather", 10 + late_ms, 5 - late_ms), gloo("reduce_scatter", 30, 2)]
        issued = [  # on the rank's clock, 3 ms ahead of the notebook's: moved like the events
            {"op": "all_gather", "created_ns": int((9.9 + late_ms + 3) * MS), "bytes": 512, "g": "0", "n": 8},
            {"op": "reduce_scatter", "created_ns": int((29.9 + 3) * MS), "bytes": 2048, "g": "0", "n": 9},
            {"op": "all_gather", "created_ns": int((500 + 3) * MS), "bytes": 1, "g": "0", "n": 12},  # another one
        ]
        calls = [{"label": "%%mgpu cell", "start_ns": 3 * MS, "end_ns": 103 * MS}]
        return RankRecord(r, "h", 3 * MS, {"baseTimeNanoseconds": 3 * MS, "traceEvents": events}, calls, [], issued)

    ranks = [rank(0, 0.0), rank(1, 4.0)]  # rank 1 reaches the all-gather 4 ms late
    rows = {r["op"]: r for r in collective_rows(ranks)}
    assert rows["all_gather"]["bytes"] == 512 and rows["reduce_scatter"]["bytes"] == 2048
    # numbered as torch numbers them in their group, as the collective watch does the user's own calls
    assert (rows["all_gather"]["number"], rows["reduce_scatter"]["number"], rows["all_gather"]["group"]) == (8, 9, "0")
    summary = {r["rank"]: r for r in summary_rows(ranks)}
    assert summary[0]["collective_s"] == pytest.approx(0.007) and summary[0]["wait_s"] == pytest.approx(0.004)
    assert summary[1]["collective_s"] == pytest.approx(0.003) and summary[1]["last_to_arrive"] == 1
    assert summary[0]["compute_s"] == pytest.approx(0.1 - 0.007)


def test_c_plus_plus_collectives_started_late_on_a_loaded_machine_get_their_own_entries_in_order():
    """Two all-gathers issued 1 ms apart and run 80 ms later (gloo runs them in turn; the machine is busy):
    each gets its own entry, in issue order, not the one created nearest its start; the entry of the rank's
    own all-gather (a call the watch saw) is no candidate."""

    def gloo(start_ms: float) -> dict:
        return {"ph": "X", "name": "gloo:all_gather", "ts": start_ms * 1000, "dur": 1000, "tid": 9, "args": {}}

    def rank(r: int) -> RankRecord:
        issued = [
            {"op": "all_gather", "created_ns": 5 * MS, "bytes": 8, "g": "0", "n": 1},  # the rank's own call
            {"op": "all_gather", "created_ns": 20 * MS, "bytes": 4096, "g": "0", "n": 2},
            {"op": "all_gather", "created_ns": 21 * MS, "bytes": 528, "g": "0", "n": 3},
            {"op": "all_gather", "created_ns": 101 * MS, "bytes": 2112, "g": "0", "n": 4},  # issued as the first ran
        ]
        own = [{"op": "all_gather", "enter_ns": 4 * MS, "exit_ns": 7 * MS, "number": 1, "group": "0"}]
        events = [gloo(5), gloo(100), gloo(102), gloo(104)]
        return RankRecord(r, "h", 0, {"baseTimeNanoseconds": 0, "traceEvents": events}, [], own, issued)

    rows = [row for row in collective_rows([rank(0), rank(1)]) if row["source"] == "torch (C++)"]
    assert [(row["number"], row["bytes"]) for row in rows] == [(2, 4096), (3, 528), (4, 2112)], rows


def test_the_merged_trace_has_a_process_per_rank_on_one_axis(ranks):
    ranks[1].trace["traceEvents"] = [{"ph": "X", "name": "aten::mm", "ts": 100.0, "dur": 5.0, "tid": 1, "pid": 777}]
    merged = merged_chrome_trace(ranks)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in merged if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 2"}
    mm = next(e for e in merged if e["name"] == "aten::mm")
    assert mm["pid"] == 1 and mm["ts"] == pytest.approx(100.0 - 0)  # rank 1's base moved by its offset
    assert min(e["ts"] for e in merged if e.get("ph") == "X") == 0


def test_the_sidebar_gets_each_ranks_calls_collectives_and_waiting(ranks):
    from jupyter_mgpu.profiling.profile_data import sidebar_data

    data = sidebar_data(ranks, profiled_at=5.0)
    assert data["profiled_at"] == 5.0 and data["window_ms"] == pytest.approx(1000.0)
    rows = {r["rank"]: r for r in data["ranks"]}
    assert sorted(rows[0]["wait"]) == [[0.0, 300.0], [100.0, 300.0], [200.0, 300.0]]
    assert rows[2]["wait"] == [] and sorted(rows[2]["collective"]) == [[300.0, 10.0], [400.0, 10.0], [500.0, 10.0]]
    assert rows[0]["calls"] == [[0.0, 1000.0]]  # the profile's own calls are left out
    assert [s["last_to_arrive"] for s in data["summary"]] == [0, 0, 3]


def test_the_profiler_starts_without_importing_the_inductor_and_leaves_torch_as_it_was():
    """torch.profiler's start imports torch._inductor (a second or more) to read a flag of compiled graphs;
    the rank's start leaves it unimported, still records, and puts torch's lazy imports back."""
    import subprocess
    import sys

    code = """
import sys, time, torch
from jupyter_mgpu.engine.records import rank_profiler as rp
from torch.profiler import profile
lazy = torch.__getattr__
p = profile()
with rp._inductor_left_unimported():
    p.start()
torch.ones(8).sum()
p.stop()
assert "torch._inductor" not in sys.modules, "imported"
assert torch.__getattr__ is lazy
assert any(e.name == "aten::sum" for e in p.events()), "nothing recorded"
assert torch._inductor.__name__ == "torch._inductor"  # the lazy import still works afterwards
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("ok"), out.stderr[-2000:]
