import pytest

from jupyter_mgpu.engine.group.process_group import check_timeout, choose_backend
from jupyter_mgpu.errors import (
    CollectiveHangError,
    CollectiveTimeoutError,
    DeviceOutOfMemoryError,
    MgpuError,
    RankError,
)
from jupyter_mgpu.session.rank_errors import build_error
from jupyter_mgpu.session.targets import parse_targets


@pytest.mark.parametrize(
    "targets,expected",
    [
        (None, [0, 1, 2, 3]),
        ("all", [0, 1, 2, 3]),
        (2, [2]),
        ("0,2", [0, 2]),
        ("1:3", [1, 2]),
        ([3, 1, 1], [1, 3]),
        ("2:", [2, 3]),
    ],
)
def test_parse_targets(targets, expected):
    assert parse_targets(targets, 4) == expected


@pytest.mark.parametrize(
    "targets,message",
    [
        (4, "rank 4 is out of range: this session has ranks 0-3"),
        ("x", "targets must be ranks"),
        ([0.5], "whole-number ranks"),
        (True, "targets must be ranks"),
        ([], "names no rank"),
        (-1, "rank -1 is out of range"),
    ],
)
def test_parse_targets_rejects(targets, message):
    with pytest.raises(MgpuError, match=message):
        parse_targets(targets, 4)


def _fail(rank, ename="ValueError", evalue="boom", **extra):
    info = {
        "ok": False,
        "rank": rank,
        "ename": ename,
        "evalue": evalue,
        "frames": [{"file": "<cell>", "line": 3, "name": "<module>", "code": "f(x)"}],
    }
    info.update(extra)
    return info


def test_same_error_on_several_ranks_is_reported_once():
    err = build_error({1: _fail(1), 3: _fail(3)}, succeeded=[0, 2])
    assert type(err) is RankError
    assert str(err) == "ValueError on ranks 1, 3: boom at line 3 of the cell: f(x) (ranks 0, 2 succeeded)"
    assert err.ranks == [1, 3]


def test_oom_names_rank_budget_and_size():
    err = build_error(
        {2: _fail(2, "RuntimeError", "DefaultCPUAllocator: can't allocate memory", oom=True, requested_bytes=4 << 30)},
        succeeded=[0, 1, 3],
        budgets={2: 2 << 30},
    )
    assert isinstance(err, DeviceOutOfMemoryError)
    assert str(err).startswith("rank 2 ran out of device memory (budget 2.0 GiB) while allocating 4.0 GiB")


def test_collective_timeout_names_the_missing_rank_from_sequence_numbers():
    fails = {r: _fail(r, "DistBackendError", "Timed out waiting", collective_failure=True) for r in (0, 1, 2)}
    err = build_error(fails, succeeded=[3], sequence_numbers={0: 5, 1: 5, 2: 5, 3: 4}, timeout=60, rebuilt=True)
    assert isinstance(err, CollectiveTimeoutError)
    assert "timed out after 60 s on ranks 0, 1, 2: rank 3 never joined it" in str(err)
    assert "rebuilt" in str(err)


def test_a_collective_whose_connection_closed_is_not_said_to_have_timed_out():
    """gloo closed rank 0's connection seconds in: the configured timeout never ran out, nor is it said to."""
    text = "[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5001"
    fails = {0: _fail(0, "DistBackendError", text, collective_failure=True)}
    err = build_error(fails, succeeded=[1, 2, 3], sequence_numbers={0: 1, 1: 0, 2: 0, 3: 0}, timeout=1800)
    assert isinstance(err, CollectiveTimeoutError)
    assert str(err).startswith(f"a collective failed on rank 0: a connection to a peer closed ({text}): ranks 1, 2, 3")
    assert "1800" not in str(err)


def _late_rank_found_stuck(failed_rank_entered: int) -> RankError:
    """Notebook 11 on a loaded machine: rank 2 raised before its all_reduce; ranks 0 and 1, waiting in it, were
    released on that failure's account; rank 3 reached it only then, and the hang watch found it there first."""
    from jupyter_mgpu.session.hang_watch import Diagnosis

    fails = {r: _fail(r, "RuntimeError", "Connection closed by peer", collective_failure=True) for r in (0, 1, 3)}
    fails[2] = _fail(2, "ZeroDivisionError", "division by zero")
    stuck = Diagnosis(
        "hang",
        [3],
        "the ranks are stuck: rank 3 waits in all_reduce float32[1] at line 9 of the cell; "
        "ranks 0, 1, 2 finished the cell without calling it",
    )
    entered = {0: 1, 1: 1, 2: failed_rank_entered, 3: 1}
    return build_error(fails, sequence_numbers=entered, released=[0, 1], stuck=stuck, rebuilt=True)


def test_a_rank_left_waiting_by_a_failure_is_said_with_that_failure_even_if_the_hang_watch_saw_it_first():
    err = str(_late_rank_found_stuck(failed_rank_entered=0))
    assert err.startswith("ZeroDivisionError on rank 2: division by zero at line 3 of the cell"), err
    assert "ranks 0, 1, 3 were left waiting in a collective and released at once" in err, err
    assert "without calling it" not in err and "rebuilt" in err, err
    # a rank stuck in a collective the failed rank did enter is not that failure's doing: the hang is said
    hang = _late_rank_found_stuck(failed_rank_entered=1)
    assert isinstance(hang, CollectiveHangError) and "rank 3 released at once" in str(hang), hang


def test_backend_choice_and_errors():
    assert choose_backend(None, "cpu") == "gloo"
    assert choose_backend(None, "cuda") == "nccl"
    assert choose_backend("GLOO", "cpu") == "gloo"
    with pytest.raises(MgpuError, match="unknown backend 'tcp'"):
        choose_backend("tcp", "cpu")
    with pytest.raises(MgpuError, match="backend 'nccl' needs CUDA GPUs"):
        choose_backend("nccl", "cpu")


@pytest.mark.parametrize("bad", [0, -1, "5", True, 1e9])
def test_timeout_validation(bad):
    with pytest.raises(MgpuError, match="timeout must be a number of seconds"):
        check_timeout(bad)
