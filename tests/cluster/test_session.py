"""The foundation with real engines: run on ranks, all_reduce, output, errors, budget, restart."""

from __future__ import annotations

import time

import pytest
import torch
from processes import cluster_pids, wait_gone

import jupyter_mgpu as mg
from jupyter_mgpu.errors import CollectiveTimeoutError, DeviceOutOfMemoryError, MgpuError, RankError

pytestmark = pytest.mark.cluster


def _rank_info():
    import os

    import torch
    import torch.distributed as dist

    return dist.get_rank(), dist.get_world_size(), os.getpid(), torch.get_num_threads(), os.environ["RANK"]


def _all_reduce_rank():
    import torch
    import torch.distributed as dist

    x = torch.full((2,), float(dist.get_rank()))
    dist.all_reduce(x)
    return x.tolist()


def test_run_returns_one_result_per_rank_in_rank_order(s4):
    info = s4.run(_rank_info)
    assert [i[0] for i in info] == [0, 1, 2, 3]
    assert {i[1] for i in info} == {4}
    assert [i[2] for i in info] == [s4.cluster.engine_pids[r] for r in range(4)]
    assert all(i[3] == max(1, __import__("os").cpu_count() // 4) for i in info)
    assert [i[4] for i in info] == ["0", "1", "2", "3"]


def test_all_reduce_gives_the_sum_on_every_rank(s4):
    assert s4.run(_all_reduce_rank) == [[6.0, 6.0]] * 4


def test_targets_subset(s4):
    assert [i[0] for i in s4.run(_rank_info, targets=[1, 3])] == [1, 3]


def test_cell_sees_rank_names_and_returns_last_expression(s4):
    out = s4.run_cell(
        "x = torch.full((2,), float(rank), device=device)\ndist.all_reduce(x)\n(rank, world_size, str(device), x.tolist())"
    )
    assert out == [repr((r, 4, "cpu", [6.0, 6.0])) for r in range(4)]
    # the namespace persists between cells, like %px
    assert s4.run_cell("x.sum().item()") == ["12.0"] * 4


def test_streamed_output_is_prefixed_and_in_order_per_rank(s4, capsys):
    s4.run_cell("for i in range(3):\n    print('line', i, 'of', rank)")
    lines = capsys.readouterr().out.splitlines()
    for r in range(4):
        mine = [line for line in lines if line.startswith(f"[rank {r}] ")]
        assert mine == [f"[rank {r}] line {i} of {r}" for i in range(3)]


def test_output_streams_while_the_cell_runs(s4, capsys, tmp_path):
    go = tmp_path / "go"  # the cell ends only after the test saw its first line (up to 60 s)
    pending = s4.run_cell(
        "import os, time\nprint('first', flush=True)\n"
        f"end = time.monotonic() + 60\nwhile not os.path.exists({str(go)!r}) and time.monotonic() < end:\n"
        "    time.sleep(0.02)\nprint('second')",
        targets=[0],
        block=False,
        stream=True,
    )
    seen_first = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not seen_first:
        pending.relay.poll()
        seen_first = "[rank 0] first" in capsys.readouterr().out
        time.sleep(0.05)
    assert seen_first and not pending.ready()  # seen while the cell still runs
    go.touch()
    assert pending.get() == [None]


def test_exception_on_one_rank_is_reported_once_with_the_users_line(s4):
    with pytest.raises(RankError) as info:
        s4.run_cell("y = 1\nif rank == 2:\n    y = y / 0")
    msg = str(info.value)
    assert (
        msg
        == "ZeroDivisionError on rank 2: division by zero at line 3 of the cell: y = y / 0 (ranks 0, 1, 3 succeeded)"
    )
    assert info.value.ranks == [2]
    assert "Traceback" not in msg


def test_exception_in_a_function_names_the_function(s4):
    def bad(x):
        if x > 0:
            raise ValueError(f"x must not be positive, got {x}")

    with pytest.raises(
        RankError, match=r"ValueError on ranks 0, 1, 2, 3: x must not be positive, got 1 at line \d+ of bad\(\)"
    ):
        s4.run(bad, 1)


@pytest.mark.slow
def test_a_rank_that_never_joins_a_collective_is_named_and_the_group_recovers(s4):
    start = time.monotonic()
    with pytest.raises(CollectiveTimeoutError) as info:  # a CollectiveHangError, before the 5 s timeout
        s4.run_cell("if rank != 3:\n    dist.all_reduce(torch.ones(1))")
    took = time.monotonic() - start
    assert "ranks 0, 1, 2 wait in all_reduce float32[1] at line 2 of the cell" in str(info.value)
    assert "rank 3 finished the cell without calling it" in str(info.value)
    assert took < 5
    assert s4.run(_all_reduce_rank) == [[6.0, 6.0]] * 4


def test_status_rows(s4):
    deadline = time.monotonic() + 5  # the ranks' telemetry says idle a sample after the last call (later if loaded)
    rows = s4.status()
    while not all(r["state"] == "idle" for r in rows) and time.monotonic() < deadline:
        time.sleep(0.05)
        rows = s4.status()
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert all(r["device"] == f"cpu:{r['rank']}" and r["backend"] == "gloo" for r in rows)
    assert all(r["state"] == "idle" and r["memory_used"] is not None and r["memory_total"] for r in rows)
    assert [r["pid"] for r in rows] == [s4.cluster.engine_pids[i] for i in range(4)]


def test_bad_run_input(s4):
    with pytest.raises(MgpuError, match="run\\(\\) needs a function"):
        s4.run(42)
    with pytest.raises(MgpuError, match="rank 7 is out of range: this session has ranks 0-3"):
        s4.run(_rank_info, targets=7)


def test_second_init_says_a_cluster_is_running(s4):
    with pytest.raises(MgpuError, match="already running.*--restart"):
        mg.init(2)


def test_unpicklable_result_is_a_clear_error(s4):
    def make_lock():
        import threading

        return threading.Lock()

    with pytest.raises(MgpuError, match="could not be sent between the notebook and the ranks"):
        s4.run(make_lock)
    assert s4.run(_rank_info)[0][0] == 0


@pytest.mark.slow
def test_memory_budget_is_enforced_by_the_os(own_session):
    with own_session(2, mem_per_device="512MiB") as s:
        with pytest.raises(DeviceOutOfMemoryError) as info:
            s.run_cell("if rank == 1:\n    big = torch.ones(1024, 1024, 192)")
        assert str(info.value).startswith(
            "rank 1 ran out of device memory (budget 512.0 MiB) while allocating 768.0 MiB at line 2 of the cell"
        )
        # within budget works, and the rank is still usable after the OOM
        assert s.run_cell("t = torch.ones(1024, 1024, 64); t.sum().item()") == ["67108864.0"] * 2


@pytest.mark.slow
def test_restart_replaces_the_running_cluster(own_session):
    with own_session(2) as first:
        pids = cluster_pids(first)
        second = mg.init(3, cpu=True, timeout=5, restart=True)
        try:
            assert not first.alive and wait_gone(pids) == []
            assert mg.current() is second
            assert second.run(_all_reduce_rank) == [[3.0, 3.0]] * 3
        finally:
            pids2 = cluster_pids(second)
            second.shutdown()
            assert wait_gone(pids2) == []


def test_bad_init_input_starts_nothing():
    import psutil

    import jupyter_mgpu.session.lifecycle as sm

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    saved = sm._current
    sm._current = None
    try:
        for kwargs, message in [
            ({"n": 0}, "at least 1"),
            ({"n": 9, "devices": "0,1"}, "asked for 9 devices but --devices lists 2"),
            ({"n": 2, "backend": "foo"}, "unknown backend 'foo'"),
            ({"n": 2, "backend": "nccl"}, "backend 'nccl' needs CUDA GPUs"),
            ({"n": 2, "mem_per_device": "lots"}, "malformed memory size 'lots'"),
            ({"n": 2, "timeout": -1}, "timeout must be"),
        ]:
            with pytest.raises(MgpuError, match=message):
                mg.init(**kwargs)
        assert {p.pid for p in psutil.Process().children(recursive=True)} == before
    finally:
        sm._current = saved


@pytest.mark.slow
def test_with_block_shuts_down():
    import jupyter_mgpu.session.lifecycle as sm

    saved = sm._current
    sm._current = None
    try:
        with mg.init(2, cpu=True, timeout=5) as s:
            assert s.run(_all_reduce_rank) == [[1.0, 1.0]] * 2
            pids = cluster_pids(s)
        assert not s.alive and wait_gone(pids) == []
        with pytest.raises(MgpuError, match="shut down"):
            s.run(_rank_info)
    finally:
        sm._current = saved


def test_controller_never_initialises_cuda():
    assert not torch.cuda.is_initialized()
