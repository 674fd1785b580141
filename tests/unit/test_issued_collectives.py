"""Which collective torch issued from C++ a rank waits in (``engine/watch/issued_collectives.py``), from the
flight recorder's answers and the main thread's CPU time, without engines: in flight *and* the main thread
still is a wait; computing with one in flight is busy; nccl is not judged; a rebuilt group's new id."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.watch import issued_collectives as ic


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
