"""Which collective torch issued from C++ a rank waits in (``engine/watch/issued_collectives.py``), from the
flight recorder's answers and the main thread's CPU time, without engines: in flight *and* the main thread
still is a wait; computing with one in flight is busy; nccl is not judged by that rule; a rebuilt group's new
id. On nccl, NCCL's own recorder (``nccl_records.py``) on recorded dumps: a collective started on the GPU and
unfinished across readings is a wait, scheduled work is not."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.watch import issued_collectives as ic
from jupyter_mgpu.engine.watch import nccl_records as nr


def _entry(seq: int, pg_id: int, retired: bool) -> dict[str, Any]:
    return {
        "collective_seq_id": seq,
        "pg_id": pg_id,
        "process_group": ["0", "default_pg"],  # a rebuilt group keeps the name, gets a new id
        "profiling_name": "gloo:all_reduce",
        "input_sizes": [[1010]],
        "input_dtypes": ["Float"],
        "time_created_ns": 50 * 10**9,
        "retired": retired,
    }


@pytest.fixture
def rank(monkeypatch):
    """Rank 0 of 2 on gloo, the recorder on; its main thread's CPU ticks and the recorder played by the test."""
    monkeypatch.setattr(rank_state, "STATE", SimpleNamespace(backend="gloo"))
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "2000")
    monkeypatch.setattr(ic, "_cpu", [-1.0, 0.0])
    monkeypatch.setattr(ic, "_group_ranks", lambda name: [0, 1])
    played: dict[str, Any] = {"ticks": 100.0, "status": {}, "entries": []}
    monkeypatch.setattr(ic, "_main_thread_ticks", lambda: played["ticks"])

    def recorder(only_active: bool, entries: bool) -> dict[str, Any]:
        return {"pg_status": played["status"], "entries": played["entries"] if entries else []}

    monkeypatch.setattr(ic, "recorder", recorder)
    return played


def test_a_collective_in_flight_with_the_main_thread_still_is_a_wait(rank):
    rank["status"] = {"1": {"last_enqueued_collective": "8", "last_completed_collective": "7"}}
    rank["entries"] = [_entry(7, 1, True), _entry(8, 1, False), _entry(3, 0, False)]  # #3: the old group's
    assert ic.waiting(now=100.0) is None  # the first look: the thread's CPU time just read
    assert ic.waiting(now=100.5) is None  # still for 0.5 s: not yet
    got = ic.waiting(now=101.2)
    assert got == {
        "state": "collective",
        "since": 100.0,  # when its CPU time last moved (after the entry was created)
        "collective": "all_reduce #8",
        "call": "all_reduce float32[1010] issued by torch",
        "group": [0, 1],
        "arrival": ["0", 8],
        "issued_by": "torch",
    }


def test_computing_with_one_in_flight_is_busy_and_nothing_in_flight_is_no_wait(rank):
    rank["status"] = {"0": {"last_enqueued_collective": "8", "last_completed_collective": "7"}}
    rank["entries"] = [_entry(8, 0, False)]
    for t in range(10):  # DDP overlapping its buckets with the backward pass: the thread computes
        rank["ticks"] += 5
        assert ic.waiting(now=100.0 + t) is None
    rank["status"] = {"0": {"last_enqueued_collective": "8", "last_completed_collective": "8"}}
    assert ic.waiting(now=120.0) is None  # still, but nothing in flight: idle, not waiting


def test_nccl_and_a_recorder_that_is_off_are_not_judged(rank, monkeypatch):
    rank["status"] = {"0": {"last_enqueued_collective": "8", "last_completed_collective": "7"}}
    rank["entries"] = [_entry(8, 0, False)]
    ic.still_for(now=100.0)
    monkeypatch.setattr(rank_state, "STATE", SimpleNamespace(backend="nccl"))
    assert ic.waiting(now=110.0) is None  # a GPU's queued kernels keep nccl's collectives in flight
    monkeypatch.setattr(rank_state, "STATE", SimpleNamespace(backend="gloo"))
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE")
    assert ic.waiting(now=110.0) is None


def test_the_recorders_dtype_names_are_torchs():
    import torch

    assert ic.dtype_of("Float") is torch.float32 and ic.dtype_of("BFloat16") is torch.bfloat16
    assert ic.dtype_of("Long") is torch.int64 and ic.dtype_of("NoSuchType") is None


# -- nccl: NCCL's own recorder, on recorded dumps (tests/unit/data/nccl_fr_hang.json: torch 2.13's JSON format,
# written from FlightRecorderDetail.hpp's dump_json; no GPU recorded it) ----------------------------------------


T = 1767225600.0  # the fixture's last reading (epoch s)


@functools.cache
def _fixture() -> dict[str, Any]:
    return json.loads((Path(__file__).parent / "data" / "nccl_fr_hang.json").read_text())


def _readings(case: str, rank: str) -> list[tuple[float, dict[str, Any]]]:
    """A rank's readings in order: (when read, the dump), each dump a copy a test may change."""
    return [(r["read_at_ns"] / 1e9, copy.deepcopy(r["dump"])) for r in _fixture()[case][rank]]


def _read_all(readings: list[tuple[float, dict[str, Any]]], seen: dict[Any, float] | None = None) -> list[Any]:
    seen = {} if seen is None else seen
    return [nr.waiting(dump, now, seen, ic.describe, lambda name: None) for now, dump in readings]


def _nccl_entry(dump: dict[str, Any], seq: int) -> dict[str, Any]:
    return next(e for e in dump["entries"] if e["collective_seq_id"] == seq)


def test_nccl_a_collective_started_on_the_gpu_and_unfinished_is_named_from_its_first_reading():
    first, last = _read_all(_readings("hang", "0"))
    assert first is None  # seen started once: it may have just begun
    assert last == {
        "state": "collective",
        "since": pytest.approx(T - 30.0, abs=1e-3),  # the reading that first saw it started, 30 s before
        "collective": "all_reduce #8",  # not #9, queued behind it, nor #7, done
        "call": "all_reduce float32[6553600] issued by torch",
        "group": [0, 1],  # the dump's pg_config: no live group here
        "arrival": ["0", 8],
        "issued_by": "torch",
    }
    assert _read_all(_readings("hang", "1")) == [None]  # rank 1's last is #7, completed: not waiting


def test_nccl_the_wait_begins_at_the_threshold_and_each_reading_stamps_its_own_start():
    (t0, first), (_, later) = _readings("hang", "0")
    # torch stamps time_discovered_started_ns on a dump's copy at the dump: a single reading is 0 s old
    assert _nccl_entry(later, 8)["time_discovered_started_ns"] / 1e9 == pytest.approx(T, abs=1e-3)
    seen: dict[Any, float] = {}
    assert _read_all([(t0, first), (t0 + nr.NCCL_STUCK_S - 0.1, later)], seen) == [None, None]
    got = nr.waiting(later, t0 + nr.NCCL_STUCK_S + 0.1, seen, ic.describe, lambda name: [0, 1, 2, 3])
    assert got is not None and got["collective"] == "all_reduce #8" and got["group"] == [0, 1, 2, 3]
    assert _read_all([(T, later)]) == [None]  # without the earlier reading: seen started just now


def test_nccl_healthy_readings_and_scheduled_work_are_no_wait():
    assert _read_all(_readings("healthy", "0")) == [None, None]  # each time another collective just started
    readings = _readings("hang", "0")
    for _, dump in readings:  # timing off: #8 stays scheduled until it completes, however long it is queued
        _nccl_entry(dump, 8).update(state="scheduled", time_discovered_started_ns=0)
    assert _read_all(readings) == [None, None]


def test_nccl_retired_and_p2p_entries_are_left_out():
    for change in ({"retired": True}, {"is_p2p": True}):  # retired: torch's watchdog gave it up (timed out)
        readings = _readings("hang", "0")
        for _, dump in readings:
            _nccl_entry(dump, 8).update(change)
        assert _read_all(readings) == [None, None], change
    seen: dict[Any, float] = {}
    (t0, first), (_, later) = _readings("hang", "0")
    _read_all([(t0, first)], seen)
    assert list(seen) == [(0, 8)]
    _nccl_entry(later, 8).update(state="completed", retired=True)
    assert _read_all([(T, later)], seen) == [None] and seen == {}  # gone: forgotten


def test_nccl_of_two_groups_stuck_the_older_collective_is_named():
    readings = _readings("hang", "0")
    for _, dump in readings:  # a second group (a DTensor mesh's) stuck in its #3 too, created before or after #8
        eight = _nccl_entry(dump, 8)
        later = eight["time_created_ns"] + 10**8
        dump["entries"].append(
            dict(eight, pg_id=1, process_group=["1", "mesh_dp"], collective_seq_id=3, time_created_ns=later)
        )
    assert _read_all(copy.deepcopy(readings))[1]["collective"] == "all_reduce #8"  # #3 created later
    for _, dump in readings:
        dump["entries"][-1]["time_created_ns"] -= 2 * 10**8
    assert _read_all(readings)[1]["arrival"] == ["1", 3]


@pytest.fixture
def nccl_rank(monkeypatch):
    """Rank 0 on nccl; NCCL's recorder binding played from the fixture's readings, as torch answers its
    arguments (``includeCollectives``, ``onlyActive``); the calls it got."""
    import torch

    monkeypatch.setattr(rank_state, "STATE", SimpleNamespace(backend="nccl"))
    monkeypatch.setattr(nr, "_seen", {})
    monkeypatch.setattr(ic, "_group_ranks", lambda name: [0, 1])
    played: dict[str, Any] = {"dump": {}, "calls": []}

    def dump(includeCollectives: bool = True, onlyActive: bool = False) -> bytes:
        played["calls"].append((includeCollectives, onlyActive))
        d = copy.deepcopy(played["dump"])
        if not includeCollectives:
            d.pop("entries", None)
        elif onlyActive:
            d["entries"] = [e for e in d.get("entries", []) if e["state"] != "completed"]
        return json.dumps(d).encode()

    monkeypatch.setattr(torch._C._distributed_c10d, "_dump_nccl_trace_json", dump, raising=False)
    return played


def test_nccl_waiting_reads_the_recorder_and_names_the_hang(nccl_rank):
    (t0, first), (_, later) = _readings("hang", "0")
    nccl_rank["dump"] = first
    assert ic.waiting(now=t0) is None
    assert nccl_rank["calls"] == [(False, True), (True, True)]  # pg_status, then the unfinished collectives
    nccl_rank["dump"] = later
    got = ic.waiting(now=T)
    assert got is not None and got["collective"] == "all_reduce #8" and got["since"] == pytest.approx(T - 30, abs=1e-3)
    assert got["group"] == [0, 1] and got["call"] == "all_reduce float32[6553600] issued by torch"


def test_nccl_without_timing_the_entries_are_not_read(nccl_rank):
    (t0, first), (_, later) = _readings("hang", "0")
    for dump in (first, later):
        dump["pg_status"]["0"]["last_started_collective"] = "-1"  # TORCH_NCCL_ENABLE_TIMING unset
        _nccl_entry(dump, 8).update(state="scheduled", time_discovered_started_ns=0)
    nccl_rank["dump"] = first
    assert ic.waiting(now=t0) is None
    nccl_rank["dump"] = later
    assert ic.waiting(now=T) is None
    assert nccl_rank["calls"] == [(False, True), (False, True)]


def test_nccl_an_absent_or_unreadable_recorder_gives_none(nccl_rank, monkeypatch):
    import torch

    def boom(**kwargs: bool) -> bytes:
        raise RuntimeError("the recorder failed")

    for answer in (lambda **kw: b"{not json", lambda **kw: b"[1, 2]", boom):
        monkeypatch.setattr(torch._C._distributed_c10d, "_dump_nccl_trace_json", answer)
        assert nr.recorder(entries=True) == {}
        assert ic.waiting(now=T) is None
    monkeypatch.delattr(torch._C._distributed_c10d, "_dump_nccl_trace_json")  # a CPU build has none
    assert nr.recorder(entries=True) == {} and ic.waiting(now=T) is None
    assert nr.waiting({"entries": [{"state": "started", "pg_id": "x"}, "junk"]}, T, {}, str, lambda n: None) is None


def test_the_status_line_says_a_collective_torch_issued_as_such_with_the_users_line():
    from jupyter_mgpu.engine.watch import collective_watch

    bucket = {
        "state": "collective",
        "since": 88.0,
        "collective": "all_reduce #8",
        "call": f"all_reduce float32[20] issued by torch ({collective_watch.JOIN_HINT})",
        "issued_by": "torch",
        "line": "line 4 of the cell",
    }
    said = collective_watch.describe(bucket, now=100.0)
    assert said == "waiting in all_reduce #8 (DDP bucket) for 12 s, from line 4 of the cell"
    gather = {**bucket, "collective": "all_gather #3", "call": "all_gather float32[8] issued by torch"}
    assert collective_watch.describe(gather, now=100.0) == (
        "waiting in all_gather #3 (issued by torch) for 12 s, from line 4 of the cell"
    )
    mine = {k: v for k, v in bucket.items() if k != "issued_by"}  # the user's own call: as before
    assert collective_watch.describe(mine, now=100.0) == "waiting in all_reduce #8 for 12 s"
