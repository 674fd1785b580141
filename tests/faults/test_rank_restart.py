"""A rank that dies comes back and the others keep everything (issue 46): ``mg.restart`` forks a new engine
for the dead rank on its device, the survivors rebuild their process group with it, and ``mg.heal`` copies
what it lost from a live peer, so that DDP training resumes with the same losses as a run never interrupted.
Real engines, real kills (SIGKILL, a segfault); each test owns its cluster (it kills engines)."""

from __future__ import annotations

import ast
import json
import os
import signal
import threading
import time

import pytest

import jupyter_mgpu as mg
from jupyter_mgpu.cluster import engine_restart
from jupyter_mgpu.errors import EngineDiedError, MgpuError
from jupyter_mgpu.monitoring.memory_monitor import monitor
from jupyter_mgpu.session import rank_heal, rank_restart

pytestmark = pytest.mark.cluster

TRAINING = """
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
losses = []
def step(i):
    x = torch.arange(8.0).reshape(2, 4) * (rank + 1) + i
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    losses.append(round(loss.item(), 5))
"""
STEPS = "import time\nfor i in range(len(losses), 10_000):\n    step(i)\n    time.sleep(0.05)"


def _values(out: list[str]) -> list:
    return [ast.literal_eval(v) for v in out]


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_a_rank_killed_while_ddp_trains_comes_back_healed_and_training_resumes_with_the_same_losses(own_session, n):
    with own_session(n) as s:
        s.run_cell(TRAINING + "for i in range(40):\n    step(i)", stream=False)
        reference = _values(s.run_cell("losses", stream=False))  # the run never interrupted
        s.run_cell(TRAINING + "kept = torch.full((3,), float(rank))", stream=False)
        threading.Timer(0.8, os.kill, (s.cluster.engine_pids[1], signal.SIGKILL)).start()
        with pytest.raises(EngineDiedError) as info:
            s.run_cell(STEPS, stream=False)
        assert "rank 1 died (killed by SIGKILL)" in str(info.value)
        assert "or %mgpu_restart --rank 1 (mg.restart([1])) to start this rank again" in str(info.value), info.value
        survivors = [r for r in range(n) if r != 1]

        states: list[tuple[str, str]] = []  # rank 1 in mg.where() and mg.memory() while it is started again
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                states.append((s.where()[1]["state"], s.memory()[1]["state"]))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            report = mg.restart([1])
        finally:
            done.set()
            watcher.join()
        assert ("restarting", "restarting") in states, states[-3:]
        assert not list((s.cluster.path / engine_restart.RESTART_DIR).glob("*.json"))  # the supervisor took it
        assert isinstance(report, rank_restart.Restarted) and report.ranks == [1] and report.pids[1] != 0
        assert str(report).startswith("rank 1 started again in "), report
        assert "rank 1 is new: DDP, i, kept, losses, model, opt, step are not defined there" in str(report), report
        # the survivors keep their values, by value; the new rank has none of them
        assert s.run_cell("kept.tolist()", targets=survivors, stream=False) == [str([float(r)] * 3) for r in survivors]
        assert s.run_cell("'kept' in globals()", targets=[1], stream=False) == ["False"]
        # the memory history keeps rank 1's samples from before, and marks the restart (the dashboard draws it)
        deadline = time.monotonic() + 5
        while "restarts" not in monitor(s).latest()[1] and time.monotonic() < deadline:
            time.sleep(0.05)
        history = [h for h in mg.memory_history(5, session=s) if h["rank"] == 1]
        marks = [h["time"] for h in history if h["state"] == "restarted"]
        assert len(marks) == 1 and min(h["time"] for h in history) < marks[0], history[-3:]
        assert [h["state"] for h in history if h["time"] < marks[0]][-1] == "dead"
        assert monitor(s).latest()[1]["restarts"] == marks
        # a rank that dies inside a collective can leave the survivors a step apart (gloo's ring may complete
        # on some of them): every other rank takes rank 0's replica, the new one and any survivor alike
        k = len(_values(s.run_cell("losses", targets=[0], stream=False))[0])
        assert 0 < k < 40, k
        others = list(range(1, n))
        said = mg.heal(others, ["model", "opt", "step", "losses"])
        assert said.startswith(
            f"{'rank 1' if n == 2 else 'ranks 1, 2, 3'} got model, opt, step, losses from rank 0 ("
        ), said
        assert "\nmodel made again with DistributedDataParallel on every rank" in said, said
        after = _values(
            s.run_cell("for i in range(len(losses), len(losses) + 5):\n    step(i)\nlosses[-5:]", stream=False)
        )
        assert after == [ref[k : k + 5] for ref in reference]  # each rank's losses, as if nothing had died
        total = float(n * (n + 1) // 2)
        out = s.run_cell("y = torch.ones(2) * (rank + 1)\ndist.all_reduce(y)\ny.tolist()", stream=False)
        assert out == [str([total, total])] * n


@pytest.mark.slow
def test_a_segfault_and_a_kill_at_once_both_restart_and_bad_requests_get_one_sentence(own_session):
    with own_session(4) as s:
        s.run_cell("kept = rank * 10", stream=False)
        t = mg.ones(8, 4)  # sharded over the 4 ranks: rank 3's rows die with it
        with pytest.raises(MgpuError, match=r"^no rank is dead: nothing to restart"):
            mg.restart()
        with pytest.raises(MgpuError, match=r"^rank 2 is alive: only a dead rank is restarted"):
            mg.restart([2])
        with pytest.raises(MgpuError, match=r"^rank 7 is out of range: this session has ranks 0-3$"):
            mg.restart([7])
        s.run_cell("x = torch.ones(2)", stream=False)
        with pytest.raises(MgpuError, match=r"^rank 1 cannot heal from itself"):
            mg.heal(1, ["x"], from_rank=1)
        with pytest.raises(MgpuError, match=r"^rank 0 has no name 'nope' to copy$"):
            mg.heal(1, ["nope"])
        with pytest.raises(MgpuError, match=r"^names must be a list of the names to copy, got 'x'$"):
            rank_heal.heal(s, 1, "x")

        os.kill(s.cluster.engine_pids[3], signal.SIGKILL)
        with pytest.raises(EngineDiedError):
            s.run_cell("import ctypes\nif rank == 2:\n    ctypes.string_at(0)", stream=False, targets=[2])
        deadline = time.monotonic() + 5
        while sorted(s.cluster.exits()) != [2, 3] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.cluster.exits()[2]["signal_name"] == "SIGSEGV"
        seen: list[list[int]] = []  # what the cluster's state file (the sidebar's source) says meanwhile
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                seen.append(json.loads((s.cluster.path / "cluster.json").read_text()).get("restarting", []))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            report = mg.restart()
        finally:
            done.set()
            watcher.join()
        assert [2, 3] in seen, seen[-3:]
        assert json.loads((s.cluster.path / "cluster.json").read_text())["restarting"] == []
        assert str(report).startswith("ranks 2, 3 started again in ") and "kept, x are not defined" in str(report)
        assert s.run_cell("kept", targets=[0, 1], stream=False) == ["0", "10"]
        assert "shard lost on ranks 2, 3 (restarted)" in repr(t)  # marked in its view, never read as zeros
        with pytest.raises(MgpuError, match=r"lost its shard on ranks 2, 3 when they were started again"):
            t.gather()
        out = s.run_cell("y = torch.ones(1) * (rank + 1)\ndist.all_reduce(y)\ny.item()", stream=False)
        assert out == ["10.0"] * 4
        # sharded state has no whole copy on any peer
        s.run_cell(
            "from torch.distributed.tensor import distribute_tensor, Shard\n"
            "from torch.distributed.device_mesh import init_device_mesh\n"
            "d = distribute_tensor(torch.ones(8, 4), init_device_mesh('cpu', (4,)), [Shard(0)])",
            stream=False,
        )
        with pytest.raises(MgpuError, match=r"^'d' is sharded \(a DTensor\): each rank holds its own shards"):
            mg.heal(2, ["d"])
