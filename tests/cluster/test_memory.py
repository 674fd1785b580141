"""Live memory with real engines: sampler numbers, updates while busy, dashboard state, death, cleanup."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

import jupyter_mgpu as mg
from jupyter_mgpu.errors import CollectiveHangError, MgpuError
from jupyter_mgpu.monitoring.memory_monitor import live_threads as reader_threads
from jupyter_mgpu.monitoring.memory_monitor import monitor
from jupyter_mgpu.widgets import memory_dashboard as wm

pytestmark = pytest.mark.cluster

MiB = 2**20


def wait_for(predicate, timeout: float = 10.0, every: float = 0.02):
    """Poll ``predicate()`` until it returns something truthy; returns it, or None after ``timeout`` (long: it
    only tells a thing that comes late on a loaded machine from one that never comes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return None


def resident(rank: int) -> int:
    return mg.memory()[rank]["resident_bytes"]


def settled(rank: int, timeout: float = 10.0) -> dict:
    """The first sample of ``rank`` taken after now (older ones may predate what just happened)."""
    since = time.time()
    sample = wait_for(lambda: (r := mg.memory()[rank])["time"] and r["time"] > since and r, timeout)
    assert sample, f"no fresh sample from rank {rank} within {timeout} s"
    return sample


def test_memory_rows_have_the_documented_keys_in_rank_order(s4):
    rows = wait_for(lambda: (r := mg.memory()) and all(x["time"] for x in r) and r)
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    for r in rows:
        assert {"rank", "time", "state", "resident_bytes", "peak_resident_bytes", "budget_bytes"} <= set(r)
        assert r["state"] in ("idle", "busy")
        assert abs(r["time"] - time.time()) < 60  # a wall-clock time of a recent sample (not a monotonic clock's)
        assert r["peak_resident_bytes"] >= r["resident_bytes"] > 50 * MiB
        assert r["budget_bytes"] == s4.devices[r["rank"]].total_memory
        assert r["pid"] == s4.cluster.engine_pids[r["rank"]]


def test_a_known_allocation_shows_on_its_rank_only(s2):
    # the first use of an op pages in library code: warm it up so only the tensor counts
    s2.run_cell("_w = torch.ones(4096, dtype=torch.uint8) + 1; del _w; import gc; gc.collect()")
    before = [settled(0)["resident_bytes"], settled(1)["resident_bytes"]]
    s2.run_cell("_mem_probe = torch.ones(96 * 2**20, dtype=torch.uint8) + 1", targets=1)  # 96 MiB, touched
    try:
        after = settled(1)
        grown = after["resident_bytes"] - before[1]
        assert abs(grown - 96 * MiB) < 0.05 * 96 * MiB + 4 * MiB, f"grew by {grown / MiB:.1f} MiB"
        assert abs(settled(0)["resident_bytes"] - before[0]) < 16 * MiB
        assert after["peak_resident_bytes"] >= before[1] + 90 * MiB
    finally:
        s2.run_cell("del _mem_probe", targets=1)
    assert settled(1)["resident_bytes"] - before[1] < 16 * MiB, "the freed tensor still shows as resident"


def test_samples_keep_arriving_while_an_engine_is_busy_in_a_long_cpp_op(s2):
    base = resident(0)
    pending = s2.run_cell(
        "_hold = torch.ones(64 * 2**20, dtype=torch.uint8) + 1\n"
        "_m = torch.randn(1400, 1400)\n"
        "for _ in range(12): _m = torch.tanh(_m @ _m)\n"
        "del _hold, _m",
        targets=0,
        block=False,
        stream=False,
    )
    try:
        busy = wait_for(
            lambda: (r := mg.memory()[0])["state"] == "busy" and r["resident_bytes"] - base > 60 * MiB, timeout=5
        )
        assert busy, "the 64 MiB allocated before the matmul loop did not show while the rank was busy"
        times = set()
        while not pending.ready() and len(times) < 5:
            times.add(mg.memory()[0]["time"])
            time.sleep(0.06)
        assert len(times) >= 5 or pending.ready(), "samples stopped while the engine was busy"
        assert len(times) >= 3
        assert mg.memory()[0]["op"] in ("%%mgpu cell", None)
    finally:
        pending.get(timeout=60)
    assert wait_for(lambda: mg.memory()[0]["state"] == "idle")


@pytest.mark.slow
def test_dashboard_model_follows_the_samples_while_a_cell_runs(s2, tmp_path):
    board = mg.dashboard()
    assert mg.dashboard() is board  # one per session: every view shows the same model
    assert [d["rank"] for d in board.devices] == [0, 1]
    before = board.devices[1]["used"]
    start = board.updates
    release = tmp_path / "release"  # the cell holds its 80 MiB until the test has looked
    pending = s2.run_cell(
        "_hold = torch.ones(80 * 2**20, dtype=torch.uint8) + 1\nimport os, time as _t\n_end = _t.monotonic() + 30\n"
        f"while not os.path.exists({str(release)!r}) and _t.monotonic() < _end:\n    _t.sleep(0.02)\ndel _hold",
        targets=1,
        block=False,
        stream=False,
    )
    try:
        seen = wait_for(lambda: board.devices[1]["used"] - before > 75 * MiB and board.devices[1])
        assert seen, "the dashboard did not show the 80 MiB allocated while the cell was running"
        assert seen["state"] == "busy" and not pending.ready()
        assert seen["fill"] == wm.FILL_OK and 0 < seen["fraction"] < 0.6
        assert seen["limit"] == seen["baseline"] + s2.devices[1].total_memory
        assert board.updates > start
    finally:
        release.touch()
        pending.get(timeout=30)
    points = wait_for(lambda: len(board.timeline[1]) >= 3 and board.timeline[1])
    assert points and all(-board.window <= ago <= 0.5 for ago, _ in points)
    assert max(v for _, v in points) - before > 75 * MiB  # the timeline kept the spike


@pytest.mark.slow
def test_pause_stops_updates_and_resume_restarts_them(s2):
    board = mg.dashboard()
    board.paused = True
    time.sleep(0.25)
    frozen = board.updates
    time.sleep(0.5)
    assert board.updates == frozen
    board.paused = False
    assert wait_for(lambda: board.updates > frozen, timeout=2)
    board.refresh_rate = 2.0
    time.sleep(0.2)
    n = board.updates
    time.sleep(1.5)
    assert board.updates - n <= 4  # at most 2 per second
    board.refresh_rate = wm.DEFAULT_RATE


@pytest.mark.slow
def test_reset_peak_works_on_every_rank_even_while_one_is_busy(s2):
    s2.run_cell("_peak = torch.ones(64 * 2**20, dtype=torch.uint8) + 1\ndel _peak")
    wait_for(lambda: all(r["peak_resident_bytes"] - r["resident_bytes"] > 48 * MiB for r in mg.memory()))
    pending = s2.run_cell("import time as _t\n_t.sleep(1.0)", targets=0, block=False, stream=False)
    try:
        time.sleep(0.2)
        mg.reset_peak()
        assert not pending.ready()
        for r in mg.memory():
            assert r["peak_resident_bytes"] - r["resident_bytes"] < 16 * MiB, r
    finally:
        pending.get(timeout=30)


def test_history_covers_the_recent_minutes(s2):
    def recent() -> tuple[float, list[dict]] | None:
        asked = time.time()
        rows = mg.memory_history(minutes=0.05)
        return (asked, rows) if len([r for r in rows if r["rank"] == 0]) >= 10 else None  # ~10 samples a second

    got = wait_for(recent)  # a session just started holds fewer than 3 s of samples
    assert got, mg.memory_history(minutes=0.05)
    asked, rows = got
    assert {r["rank"] for r in rows} == {0, 1}
    times = [r["time"] for r in rows]
    assert times == sorted(times) and times[0] >= asked - 3.1  # none older than the 3 s asked for
    with pytest.raises(MgpuError, match="minutes must be more than 0"):
        mg.memory_history(minutes=0)


def test_bad_input_gets_one_sentence(s2):
    for rate in (0, -1, 1e6, "fast", True):
        with pytest.raises(MgpuError, match="refresh_rate must be between 0.1 and 20 updates per second"):
            mg.dashboard(refresh_rate=rate)
    import jupyter_mgpu.session.lifecycle as sm

    saved, sm._current = sm._current, None
    try:
        with pytest.raises(MgpuError, match="no multi-GPU session is running"):
            mg.dashboard()
        with pytest.raises(MgpuError, match="no multi-GPU session is running"):
            mg.memory()
    finally:
        sm._current = saved


@pytest.mark.slow
def test_eight_ranks_a_dead_engine_and_clean_shutdown(own_session):
    with own_session(8) as s:
        board = mg.dashboard()
        rows = wait_for(lambda: (r := mg.memory()) and all(x["state"] in ("idle", "busy") for x in r) and r, 10)
        assert rows and [r["rank"] for r in rows] == list(range(8))
        assert len({r["pid"] for r in rows}) == 8
        assert wait_for(
            lambda: [d["rank"] for d in board.devices] == list(range(8)) and all(d["time"] for d in board.devices)
        )
        # the same 8 ranks (sessions this size are few): a hang past 4 ranks says them as ranges and draws the tree
        with pytest.raises(CollectiveHangError) as info:
            s.run_cell("def sync():\n    dist.barrier()\nif rank < 6:\n    sync()", stream=False)
        sentence, *tree = str(info.value).splitlines()
        assert "ranks 0–5 (6) wait in barrier" in sentence and "ranks 6, 7 finished the cell without" in sentence
        assert [" ".join(line.split()) for line in tree] == [
            "the user's frames of ranks 0–7 (8)",
            "finished the cell ranks 6, 7",
            "line 4 of the cell ranks 0–5 (6)",
            "line 2 of the cell, in sync() · waiting in barrier #1 ranks 0–5 (6)",
        ], tree
        rundir = Path(s.runtime_dir)
        killed = time.monotonic()
        os.kill(s.cluster.engine_pids[5], signal.SIGKILL)
        # seen from the exit record, three times a second; the bound only tells it from never (a loaded machine)
        assert wait_for(lambda: mg.memory()[5]["state"] == "dead", timeout=10), "rank 5 not dead within 10 s"
        assert wait_for(lambda: board.devices[5]["state"] == "dead", timeout=12 - (time.monotonic() - killed))
        assert board.devices[5]["fill"] == wm.FILL_DEAD
        assert [r["state"] for r in mg.memory()].count("dead") == 1
        assert len(reader_threads()) >= 1 and board.running
        mon = monitor(s)
    # after shutdown: no reader or dashboard thread of that session, no files
    assert not mon.running and not board.running
    assert board.status == "session shut down"
    assert not rundir.exists()
    assert not [t for t in threading.enumerate() if t in (mon._thread, board._thread)]


@pytest.mark.slow
def test_sessions_leave_no_threads_behind(own_session):
    before = {t.ident for t in reader_threads() + wm.live_threads()}
    with own_session(2) as s:
        mg.dashboard()
        mg.memory_history(1)
        assert len({t.ident for t in reader_threads() + wm.live_threads()} - before) == 2
        telemetry = Path(s.runtime_dir) / "telemetry"
        assert sorted(p.name for p in telemetry.glob("rank*.json")) == ["rank0.json", "rank1.json"]
        assert oct(telemetry.stat().st_mode & 0o777) == "0o700"
    assert {t.ident for t in reader_threads() + wm.live_threads()} - before == set()
    assert not telemetry.exists()
