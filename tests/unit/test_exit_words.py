"""How a rank's end is told while a cluster starts (``cluster/local.py``): a plain exit code names no reason,
so the cluster log's last line comes with it; a signal or an error the rank reported is said alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_mgpu.cluster.local import Cluster
from jupyter_mgpu.errors import EngineDiedError

GAVE_UP = "2026-11-29 08:18:31.203 [IPEngine] Registration timed out after 30.0 seconds"


def _cluster(path: Path, record: dict, log: str) -> Cluster:
    (path / "exits").mkdir()
    (path / "exits" / "1.json").write_text(json.dumps({"rank": 1, "pid": 4321, "time": 0.0, **record}))
    (path / "processes.log").write_text(log)
    cluster = Cluster.__new__(Cluster)  # only its directory is read
    cluster.path = path
    return cluster


def test_a_rank_that_exited_with_a_code_is_told_with_the_logs_last_line(tmp_path):
    cluster = _cluster(tmp_path, {"returncode": 1, "signal": None}, f"engine 0 up\n{GAVE_UP}\n\n")
    with pytest.raises(EngineDiedError) as info:
        cluster._check_alive("while starting")
    assert str(info.value).startswith(
        f"rank 1 exited with code 1 (the log says: {GAVE_UP}) while starting; run %mgpu_init --restart"
    )
    assert info.value.ranks == [1]


def test_a_rank_whose_engine_crashed_is_told_with_the_supervisors_note(tmp_path):
    cluster = _cluster(tmp_path, {"returncode": 1, "signal": None}, f"{GAVE_UP}\n")
    (tmp_path / "launcher.log").write_text(
        "08:18:01 rank 0 (pid 11) ended with status 256\n08:18:02 rank 1 crashed: OSError: [Errno 24] Too many open files\n"
    )
    with pytest.raises(
        EngineDiedError,
        match=r"^rank 1 exited with code 1 \(the log says: rank 1 crashed: "
        r"OSError: \[Errno 24\] Too many open files\) while starting;",
    ):
        cluster._check_alive("while starting")


@pytest.mark.parametrize(
    "record, told",
    [
        (
            {"returncode": None, "signal": 9, "signal_name": "SIGKILL"},
            "rank 1 died (killed by SIGKILL) while starting;",
        ),
        (
            {"returncode": None, "signal": None, "error": "ImportError: no torch"},
            "failed to start: ImportError: no torch",
        ),
        ({"returncode": 1, "signal": None}, "rank 1 exited with code 1 while starting;"),  # an empty log: nothing added
    ],
)
def test_a_signal_an_error_or_an_empty_log_is_said_without_the_log(tmp_path, record, told):
    log = "" if record.get("returncode") else f"{GAVE_UP}\n"
    with pytest.raises(EngineDiedError) as info:
        _cluster(tmp_path, record, log)._check_alive("while starting")
    assert told in str(info.value) and "log says" not in str(info.value)
