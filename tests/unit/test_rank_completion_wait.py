"""How long Tab waits for a rank (``magics/rank_completion.py``): past the short budget only while the rank is
seen running (its telemetry record moves), so a loaded machine's slow answer still comes from the rank and a
stopped rank falls back to the kernel's own answer soon. A real Unix socket and a rank played by a thread."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from jupyter_mgpu.engine.execution.direct_channel import recv_frames, send_frames
from jupyter_mgpu.engine.records.telemetry import TELEMETRY_DIR
from jupyter_mgpu.magics import rank_completion
from jupyter_mgpu.magics.rank_completion import BUDGET, STALE_S, RankAsker


def _rank(path: Path, delay: float) -> threading.Thread:
    """A rank that answers one request after ``delay`` seconds."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            request = json.loads(bytes(recv_frames(conn)[0]))
            time.sleep(delay)
            try:
                send_frames(conn, [json.dumps({"status": "ok", "echo": request["code"]}).encode()])
            except OSError:
                pass  # the asker gave up and closed

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def _telemetry(rundir: Path, rank: int, until: float) -> threading.Thread:
    """The rank's sampler: rewrites its record every 0.1 s until ``until``, then stands still (stopped)."""
    record = rundir / TELEMETRY_DIR / f"rank{rank}.json"
    record.parent.mkdir(exist_ok=True)

    def write() -> None:
        while time.monotonic() < until:
            record.write_text("{}")
            time.sleep(0.1)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def test_a_rank_seen_running_is_waited_for_past_the_budget(tmp_path):
    _telemetry(tmp_path, 0, time.monotonic() + 5)
    _rank(tmp_path / "c0.sock", delay=4 * BUDGET)  # slower than the budget: a loaded machine
    start = time.monotonic()
    reply = RankAsker().ask(
        tmp_path / "c0.sock", {"code": "x"}, BUDGET, alive=lambda: rank_completion._seen_running(tmp_path, 0)
    )
    assert reply == {"status": "ok", "echo": "x"}
    assert time.monotonic() - start >= 4 * BUDGET


def test_a_rank_whose_telemetry_stands_still_is_given_up_on(tmp_path):
    _telemetry(tmp_path, 0, time.monotonic() + 0.05)  # stopped right after its last sample
    _rank(tmp_path / "c0.sock", delay=10)
    start = time.monotonic()
    reply = RankAsker().ask(
        tmp_path / "c0.sock", {"code": "x"}, BUDGET, alive=lambda: rank_completion._seen_running(tmp_path, 0)
    )
    took = time.monotonic() - start
    assert reply is None
    assert took < rank_completion.LOADED_BUDGET  # given up once the record was STALE_S old, not at the end
    assert took >= BUDGET
    assert STALE_S < rank_completion.LOADED_BUDGET


def test_a_rank_sampling_slowly_is_seen_running_for_three_of_its_periods(tmp_path):
    record = tmp_path / TELEMETRY_DIR / "rank0.json"
    record.parent.mkdir()
    old = time.time() - (STALE_S + 1)
    for period, running in ((0.1, False), (STALE_S, True), ("not a number", False)):
        record.write_text(json.dumps({"rank": 0, "time": old, "period": period}))
        os.utime(record, (old, old))
        assert rank_completion._seen_running(tmp_path, 0) is running, period
    record.write_text('{"peri')  # caught mid-write
    os.utime(record, (old, old))
    assert rank_completion._seen_running(tmp_path, 0) is False
    assert rank_completion._seen_running(tmp_path, 1) is False  # no record: telemetry off, or no such rank


def test_without_telemetry_the_budget_is_all(tmp_path):
    _rank(tmp_path / "c0.sock", delay=10)
    start = time.monotonic()
    assert RankAsker().ask(tmp_path / "c0.sock", {"code": "x"}, BUDGET, alive=lambda: False) is None
    assert time.monotonic() - start < rank_completion.LOADED_BUDGET
