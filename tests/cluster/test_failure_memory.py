"""A failed call gives its memory back, on real engines (``engine/shards/held_failure.py``).

The seed's story: a matmul that runs out of memory on one device must leave that device as it was, so the
same matmul split over two devices passes next. Then a failure whose frames are kept for ``%mgpu_debug``:
the memory they hold is said (the error, ``mg.memory()``), freed by ``%mgpu_debug --release``, and freed
by itself when an allocation on that rank needs it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from ipyparallel.error import RemoteError

import jupyter_mgpu as mg
from jupyter_mgpu.errors import DeviceOutOfMemoryError, MgpuError, RankError

pytestmark = pytest.mark.cluster

MiB = 2**20
N = 4096  # a, b, c of N x N float32: 64 MiB each; two fit in the 160 MiB budget, three do not


def single(n: int) -> float:
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    c = torch.mm(a, b)
    return float(c[0, 0])


def allocated() -> int:
    from jupyter_mgpu.engine.shards import budget

    return budget.allocated()


CELL = "def single(n):\n    a = torch.randn(n, n); b = torch.randn(n, n)\n    return torch.mm(a, b)\nsingle(%d)" % N
SCRIPT = f"import torch\na = torch.randn({N}, {N})\nb = torch.randn({N}, {N})\nc = torch.mm(a, b)\n"


@pytest.mark.slow
def test_a_call_that_runs_out_of_memory_gives_it_back_on_every_path(own_session, tmp_path):
    script = tmp_path / "single.py"
    script.write_text(SCRIPT)
    with own_session(2, mem_per_device="160MiB") as s:
        paths: dict[str, Any] = {
            "Session.run, direct channel": lambda: s.run(single, N, targets=[0]),
            "Session.run, ipyparallel": lambda: s.run(single, N, targets=[0], block=False).get(timeout=60),
            "%%mgpu cell, direct channel": lambda: s.run_cell(CELL, targets=[0]),
            "%%mgpu cell, --noblock": lambda: s.run_cell(CELL, targets=[0], block=False).get(timeout=60),
            "mg.* call": lambda: mg.randn(3 * N, N, placement=mg.Replicate()),
            "%mgpu_run script": lambda: s.run_script(str(script), targets=[0]),
            "%px (ipyparallel's execute)": lambda: s.cluster.client[0].execute(CELL, block=True),
        }
        before = s.run(allocated)
        for path, call in paths.items():
            with pytest.raises(
                (DeviceOutOfMemoryError, RemoteError), match="(out of device|not enough) memory"
            ) as info:
                call()
            assert "keeps" not in str(info.value), path  # nothing kept: the frames are what ran out
            assert s.run(allocated) == before, f"{path}: {s.run(allocated)} bytes held after the failure"
        A = mg.randn(N, N, placement=mg.Shard(0), seed=0)
        B = mg.randn(N, N, placement=mg.Shard(1), seed=1)
        C = mg.matmul(A, B)  # the story's next step: the same matmul over two devices
        assert torch.allclose(C.gather(), torch.mm(A.gather(), B.gather()), rtol=1e-3, atol=1e-2)


def hold_and_fail(nbytes: int) -> None:
    kept = torch.empty(nbytes, dtype=torch.uint8)  # noqa: F841 - held by the frame %mgpu_debug keeps
    raise ValueError("a bug after a big allocation")


def room() -> int:
    from jupyter_mgpu.engine import state
    from jupyter_mgpu.engine.shards import budget

    return budget.room(state.STATE.budget_bytes)


def take(nbytes: int) -> int:
    """Allocate ``nbytes`` (pages untouched: no real memory) and free them; the bytes then allocated."""
    t = torch.empty(nbytes, dtype=torch.uint8)
    del t
    return allocated()


def held_now(rank: int) -> int:
    since = time.time()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        row = mg.memory()[rank]
        if row["time"] > since:
            return int(row["failure_held_bytes"])
        time.sleep(0.05)
    raise AssertionError(f"no fresh memory sample from rank {rank}")


def test_a_kept_failure_s_memory_is_said_released_and_taken_back_when_needed(s2, capsys):
    """On the shared session: what the kept frames hold is said and measured as they go (the session's other
    tensors may come and go meanwhile, as an earlier test's handles are collected)."""
    from ipshell import shell

    from jupyter_mgpu.engine.execution import rank_debugger

    s2.run(rank_debugger.release_failure)  # what an earlier test's failure kept goes first
    with pytest.raises(RankError) as info:
        s2.run(hold_and_fail, 64 * MiB, targets=[1])
    assert str(info.value).endswith(
        "; rank 1 keeps 64.0 MiB in the failed call's frames for %mgpu_debug; %mgpu_debug --release frees them"
    ), str(info.value)
    assert held_now(1) == 64 * MiB and held_now(0) == 0

    ip = shell()
    capsys.readouterr()
    result = ip.run_cell("%mgpu_debug --release")
    assert result.success, result.error_in_exec
    assert "mgpu: released the failed call's frames: 64.0 MiB on rank 1" in capsys.readouterr().out
    assert held_now(1) == 0
    assert ip.run_cell("%mgpu_debug --release --rank 1").success
    assert "no failure's frames held memory on rank 1" in capsys.readouterr().out

    # kept again; an allocation that fits only without those frames lets them go and succeeds
    with pytest.raises(RankError, match="keeps 64.0 MiB"):
        s2.run(hold_and_fail, 64 * MiB, targets=[1])
    space = s2.run(room, targets=[1])[0]
    s2.run(take, space + 32 * MiB, targets=[1])  # would be refused with the frames kept
    assert held_now(1) == 0
    with pytest.raises(MgpuError, match="cannot be debugged: its frames were released"):
        ip.run_cell("%mgpu_debug --rank 1", store_history=False).raise_error()


HOLD_THEN = """def hold():
    kept = torch.empty({n}, dtype=torch.uint8)
    {then}
hold()"""


@pytest.mark.slow
def test_an_interrupted_call_s_kept_memory_is_said_with_the_interrupt(s2):
    """The stop button's error is built on the kernel side (the ranks' reports never come): it still says
    what the interrupted call's frames keep, and the rank measures it for mg.memory()."""
    import os
    import signal
    import threading

    from jupyter_mgpu.engine.execution import rank_debugger

    s2.run(rank_debugger.release_failure)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt) as info:
        s2.run_cell(HOLD_THEN.format(n=64 * MiB, then="import time; time.sleep(60)"), targets=[0], stream=False)
    timer.cancel()
    assert str(info.value).endswith(
        "; rank 0 keeps 64.0 MiB in the interrupted call's frames for %mgpu_debug; %mgpu_debug --release frees them"
    ), str(info.value)
    assert held_now(0) == 64 * MiB
    assert s2.run(rank_debugger.release_failure, targets=[0]) == [64 * MiB]


@pytest.mark.slow
def test_a_rank_released_from_a_stuck_collective_says_what_its_frames_keep(s2):
    """The guard thread's release ends the call with an error in the collective: those frames are kept and
    said like any other failure's, and let go with the next failure's."""
    from jupyter_mgpu.engine.execution import rank_debugger

    s2.run(rank_debugger.release_failure)
    skip = "if rank == 0:\n        dist.all_reduce(torch.ones(1))"
    with pytest.raises(RankError) as info:
        s2.run_cell(HOLD_THEN.format(n=64 * MiB, then=skip), stream=False)
    assert "all_reduce" in str(info.value)
    assert "rank 0 keeps 64.0 MiB in the failed call's frames" in str(info.value), str(info.value)
    assert "rank 1 keeps" not in str(info.value)
    with pytest.raises(RankError):  # the next failure lets them go
        s2.run_cell("1 / 0", targets=[0], stream=False)
    assert held_now(0) == 0
