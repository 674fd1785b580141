"""What every wait for a call checks (``session/call_wait.py``), without engines: how a report names the
call, the fresh ``where`` of each rank from telemetry, and a dead rank or a passed deadline ending the
wait with the ranks still at work interrupted."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_mgpu.cluster.local import describe_exit
from jupyter_mgpu.engine.records import telemetry
from jupyter_mgpu.errors import EngineDiedError, MgpuError
from jupyter_mgpu.session import call_wait
from jupyter_mgpu.session.hang_watch import HangWatch
from jupyter_mgpu.session.rank_debugging import DebugDesk
from jupyter_mgpu.session.recovery import GroupRecovery


class Cluster:
    """A cluster without engines: its directory, its exit records, and the ranks it was asked to interrupt."""

    def __init__(self, path: Path, dead: dict[int, dict[str, Any]] | None = None):
        self.path, self.dead, self.interrupted = path, dead or {}, []

    def exits(self) -> dict[int, dict[str, Any]]:
        return self.dead

    def interrupt(self, ranks: list[int]) -> None:
        self.interrupted.append(list(ranks))


class Session(SimpleNamespace):
    broken: str | None = None

    def _check_infrastructure(self) -> None:
        if self.broken:
            raise MgpuError(self.broken)


def _session(path: Path, world_size: int = 4, dead: dict[int, dict[str, Any]] | None = None) -> Session:
    """A session's waiting parts, real (group recovery, hang watch) over a cluster without engines."""
    s = Session(cluster=Cluster(path, dead), world_size=world_size)

    def run_on_all(*args: Any) -> Any:
        raise AssertionError("no call on the ranks is expected here")

    s.recovery = GroupRecovery(str(path), world_size, 5.0, run_on_all, lambda reason: None)
    s.hang_watch = HangWatch(lambda: call_wait.read_where(s), s.recovery.release)
    s.debug_desk = DebugDesk(s)
    return s


class Relay:
    live = False

    def __init__(self) -> None:
        self.flushed = 0

    def flush(self) -> None:
        self.flushed += 1


def _write_sample(rundir: Path, rank: int, age: float, where: dict[str, Any] | None) -> float:
    directory = rundir / telemetry.TELEMETRY_DIR
    directory.mkdir(mode=0o700, exist_ok=True)
    stamp = time.time() - age
    data = {"seq": 1, "time": stamp, "rank": rank, "state": "busy", "where": where, "check": 1}
    (directory / f"rank{rank}.json").write_text(json.dumps(data))
    return stamp


@pytest.mark.parametrize(
    ("label", "words"),
    [
        ("%%mgpu", "the cell"),
        ("%%mgpu --targets 0,1", "the cell"),
        ("%mgpu_run train.py", "the script"),
        ("mg.collective('all_reduce')", "the call (mg.collective('all_reduce'))"),
        ("", "the call"),
    ],
)
def test_how_a_hang_report_names_the_call(label, words):
    assert call_wait.what_runs(label) == words


def test_read_where_keeps_fresh_samples_only(tmp_path):
    waiting = {"state": "collective", "since": time.time() - 3, "collective": "barrier #7", "line": "line 2"}
    fresh = _write_sample(tmp_path, 0, 0.1, waiting)
    _write_sample(tmp_path, 1, 30.0, {"state": "running", "since": 0.0})  # busy in C++ or gone: not judged
    _write_sample(tmp_path, 2, 0.1, None)  # a sample that says nothing of where the rank is
    running = _write_sample(tmp_path, 3, 0.5, {"state": "running", "since": 1.0, "line": "line 9"})
    out = call_wait.read_where(_session(tmp_path))
    assert out == {
        0: {**waiting, "sampled": fresh},
        3: {"state": "running", "since": 1.0, "line": "line 9", "sampled": running},
    }
    assert call_wait.read_where(_session(tmp_path), stale_s=0.3).keys() == {0}


def test_a_dead_rank_ends_the_wait_and_the_others_are_interrupted(tmp_path):
    record = {"signal_name": "SIGKILL"}
    s, relay = _session(tmp_path, dead={2: record, 7: {"returncode": 1}}), Relay()
    with pytest.raises(EngineDiedError) as err:
        call_wait.check_waiting(s, [0, 1, 2, 3], lambda: [0, 2, 3], "%%mgpu", None, None, relay)
    assert str(err.value) == describe_exit(2, record, "while running this")
    assert "rank 2 died (killed by SIGKILL) while running this" in str(err.value)
    assert err.value.ranks == [2]
    assert s.cluster.interrupted == [[0, 3]]  # the ranks still at work, not the dead one
    assert relay.flushed == 1  # what the ranks printed comes out before the error


def test_the_lowest_dead_rank_is_named_and_all_are_listed(tmp_path):
    dead = {3: {"returncode": 1}, 1: {"signal_name": "SIGSEGV"}}
    with pytest.raises(EngineDiedError) as err:
        call_wait.check_waiting(_session(tmp_path, dead=dead), [0, 1, 3], lambda: [0, 1, 3], "x", None, None)
    assert str(err.value).startswith("rank 1 died (segmentation fault, SIGSEGV) while running this")
    assert err.value.ranks == [1, 3]


def test_a_passed_deadline_interrupts_the_waiting_ranks_and_dirties_the_group(tmp_path):
    s = _session(tmp_path, dead={5: {"returncode": 0}})  # a rank outside the call is not this call's concern
    pending = [3, 1]
    with pytest.raises(MgpuError) as err:
        call_wait.check_waiting(s, [0, 1, 2, 3], lambda: pending, "%%mgpu", time.monotonic() - 0.01, 1.5)
    assert not isinstance(err.value, EngineDiedError)
    assert str(err.value) == (
        "%%mgpu did not finish within 1.5 s on ranks 1, 3; "
        "those ranks were interrupted and the process group is rebuilt before the next call"
    )
    assert s.cluster.interrupted == [[3, 1]]
    assert s.recovery.dirty == "the timeout"


def test_time_at_a_pdb_prompt_does_not_count_to_the_deadline(tmp_path):
    s = _session(tmp_path)
    s.debug_desk.paused_s = 30.0  # the call spent 30 s at prompts
    call_wait.check_waiting(s, [0, 1], lambda: [1], "%%mgpu", time.monotonic() - 5, 10.0)
    assert s.cluster.interrupted == []
    s.debug_desk.start_call()  # a new call: its own time only
    with pytest.raises(MgpuError, match="did not finish within 10 s"):
        call_wait.check_waiting(s, [0, 1], lambda: [1], "%%mgpu", time.monotonic() - 5, 10.0)


def test_a_wait_with_nothing_wrong_goes_on(tmp_path):
    s = _session(tmp_path)
    for deadline in (None, time.monotonic() + 60):
        call_wait.check_waiting(s, [0, 1], lambda: [1], "%%mgpu", deadline, 60.0, Relay(), done={0: {"ok": True}})
    assert s.cluster.interrupted == [] and s.recovery.dirty is None
    assert s.hang_watch.take_report() is None


def test_a_broken_cluster_ends_the_wait(tmp_path):
    s = _session(tmp_path)
    s.broken = "the cluster's controller has stopped"
    with pytest.raises(MgpuError, match="controller has stopped"):
        call_wait.check_waiting(s, [0, 1], lambda: [0, 1], "%%mgpu", None, None)
    assert s.cluster.interrupted == []
