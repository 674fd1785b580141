"""The user's own distributed code, unchanged, on the session's ranks: torchrun's environment, a
script's own init_process_group / destroy_process_group, and whole scripts run with %mgpu_run."""

from __future__ import annotations

import os
import textwrap

import pytest
import torch
from ipshell import shell
from IPython.core.error import UsageError

from jupyter_mgpu.errors import MgpuError, RankError

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def ip():
    return shell()


TORCHRUN_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)

# a torchrun-style DDP script as people write it: init with no arguments, env read by hand, destroy at the end
DDP_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main(steps, out):
        dist.init_process_group("gloo")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)
        mine = slice(rank * 64 // world, (rank + 1) * 64 // world)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
            loss.backward()
            opt.step()
            seen = loss.detach().clone()
            dist.all_reduce(seen)
            losses.append(seen.item() / world)
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"losses": losses, "local_rank": local_rank, "argv": sys.argv}, f)
        print(f"rank {rank} done")
        dist.destroy_process_group()

    if __name__ == "__main__":
        main(int(sys.argv[1]), sys.argv[2])
    """
)


def _single_process_losses(steps: int) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _env() -> dict[str, str]:
    import os

    return {k: os.environ.get(k) for k in TORCHRUN_VARS}


def _all_reduce_of_ranks() -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return t.item()


def test_every_rank_has_torchruns_environment(s2):
    envs = s2.run(_env)
    port = envs[0]["MASTER_PORT"]
    for rank, env in enumerate(envs):
        assert env["RANK"] == env["ROLE_RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "2"
        assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"]) == ("0", "1")
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == port
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def _store_roundtrip() -> str:
    import os
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=10)
    )
    store.set(f"hello{os.environ['RANK']}", os.environ["RANK"])
    return store.get(f"hello{1 - int(os.environ['RANK'])}").decode()


def test_master_addr_and_port_are_a_real_store(s2):
    assert s2.run(_store_roundtrip) == ["1", "0"]


def _init_again(**kwargs) -> bool:
    import torch.distributed as dist

    dist.init_process_group(**kwargs)
    return dist.is_initialized()


def _destroy_then_reduce() -> float:
    import torch.distributed as dist

    dist.destroy_process_group()
    return _all_reduce_of_ranks()


def test_init_process_group_joins_the_sessions_group_or_says_why_not(s2):
    assert s2.run(_init_again, backend="gloo") == [True, True]
    assert s2.run(_init_again) == [True, True]  # env://, as torchrun scripts call it
    with pytest.raises(RankError, match=r"backend 'nccl' but this session's process group uses 'gloo' \(rank 0\)"):
        s2.run(_init_again, backend="nccl")
    with pytest.raises(RankError, match=r"world_size=4 but this session has 2 ranks"):
        s2.run(_init_again, backend="gloo", world_size=4)


def test_destroy_process_group_leaves_the_session_usable(s2):
    assert s2.run(_destroy_then_reduce, targets=None, label="destroy") == [3.0, 3.0]
    assert s2.run(_all_reduce_of_ranks) == [3.0, 3.0]  # the next call, and a collective is right


def test_a_torchrun_ddp_script_gives_the_single_process_losses(s2, tmp_path):
    import json

    script = tmp_path / "train_ddp.py"
    script.write_text(DDP_SCRIPT)
    out = tmp_path / "losses.json"
    s2.run_script(str(script), ["5", str(out)])
    got = json.loads(out.read_text())
    assert got["argv"] == [str(script), "5", str(out)]
    assert got["local_rank"] == 0
    assert got["losses"] == pytest.approx(_single_process_losses(5), rel=1e-5, abs=1e-6)
    assert s2.run(_all_reduce_of_ranks) == [3.0, 3.0]  # the session is intact afterwards


def _names() -> list[str]:
    return sorted(k for k in globals() if not k.startswith("_"))


def test_run_script_leaves_the_rank_namespace_and_reports_the_scripts_line(s2, tmp_path, capfd):
    script = tmp_path / "tool.py"
    script.write_text(
        "import sys\nleaked = 1\nprint('name', __name__, 'args', sys.argv[1:])\nif sys.argv[1] == 'fail':\n"
        "    raise ValueError('bad input ' + sys.argv[1])\n"
    )
    before = s2.run_cell("sorted(k for k in globals() if not k.startswith('_'))", stream=False)
    s2.run_script(str(script), ["ok", "--x"])
    printed = capfd.readouterr().out
    assert "[rank 0] name __main__ args ['ok', '--x']" in printed
    assert "[rank 1] name __main__ args ['ok', '--x']" in printed
    assert s2.run_cell("sorted(k for k in globals() if not k.startswith('_'))", stream=False) == before
    with pytest.raises(RankError, match=r"ValueError on ranks 0, 1: bad input fail") as err:
        s2.run_script(str(script), ["fail"])
    assert "tool.py" in str(err.value) and "line 5" in str(err.value)


def test_run_script_module_mode_and_bad_input(s2, tmp_path, monkeypatch):
    pkg = tmp_path / "mgpu_user_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text("import sys\nif __name__ == '__main__':\n    sys.exit(int(sys.argv[1]))\n")
    s2.run(_add_path, str(tmp_path))
    s2.run_script("mgpu_user_pkg.job", ["0"], module=True)
    with pytest.raises(RankError, match=r"mgpu_user_pkg.job exited with status 3"):
        s2.run_script("mgpu_user_pkg.job", ["3"], module=True)
    with pytest.raises(MgpuError, match=r"^nope\.py is not a file \(working directory "):
        s2.run_script("nope.py")
    with pytest.raises(MgpuError, match=r"^run_script takes its arguments as a list, got the string 'a b'$"):
        s2.run_script(__file__, "a b")


def _add_path(path: str) -> None:
    import sys

    if path not in sys.path:
        sys.path.append(path)


def test_mgpu_run_magic(s2, tmp_path, ip, capfd):
    script = tmp_path / "hello.py"
    script.write_text("import os, sys\nprint('hello from', os.environ['RANK'], sys.argv[1:])\n")
    ip.run_line_magic("mgpu_run", f"{script} --flag value")
    out = capfd.readouterr().out
    assert "hello from 0 ['--flag', 'value']" in out and "hello from 1 ['--flag', 'value']" in out
    ip.run_line_magic("mgpu_run", f"--targets 1 {script} only")
    out = capfd.readouterr().out
    assert "hello from 1 ['only']" in out and "hello from 0" not in out
    assert os.path.exists(script)


def test_push_and_pull_by_name(s2, ip, capfd):
    ip.user_ns["lr"] = 3e-4
    ip.user_ns["cfg"] = {"layers": 2}
    ip.run_line_magic("mgpu_push", "lr cfg")
    assert s2.run_cell("(lr, cfg['layers'])", stream=False) == ["(0.0003, 2)", "(0.0003, 2)"]
    s2.run_cell("lr = lr * (rank + 1)", stream=False)
    ip.run_line_magic("mgpu_pull", "lr --rank 1")
    assert ip.user_ns["lr"] == pytest.approx(6e-4)
    ip.run_line_magic("mgpu_pull", "lr")
    assert ip.user_ns["lr"] == pytest.approx([3e-4, 6e-4])
    capfd.readouterr()
    ip.user_ns["lr"] = 1.0
    ip.run_line_magic("mgpu_push", "lr")
    assert "lr replaced the ranks' own value" in capfd.readouterr().out
    with pytest.raises(UsageError, match=r"^%mgpu_push: the notebook has no name 'nope'$"):
        ip.run_line_magic("mgpu_push", "nope")
    with pytest.raises(RankError, match=r"name 'nope' is not defined on rank 0"):
        ip.run_line_magic("mgpu_pull", "nope --rank 0")
    with pytest.raises(UsageError, match=r"^--rank takes one rank, got '0,1'"):
        ip.run_line_magic("mgpu_pull", "lr --rank 0,1")


def test_compare_values_groups_equal_values_and_finds_where_a_tensor_differs(s4):
    """mg.compare_values: a tensor that differs on one rank at one element (found from chunk hashes, only
    that chunk sent), a plain value in two groups, a name one rank lacks, and bad input."""
    import jupyter_mgpu as mg
    from jupyter_mgpu.engine.execution import value_digest
    from jupyter_mgpu.session.value_compare import ValueComparison

    s4.run_cell(
        "x = torch.arange(2048.).reshape(64, 32)\nif rank == 3:\n    x[40, 5] = -1.0\n"
        "parity = rank % 2\nif rank != 1:\n    only_some = 1",
        stream=False,
    )
    found = mg.compare_values("x", s4)
    assert isinstance(found, ValueComparison) and not found.same
    assert len(s4.run(value_digest.digest, "x", targets=[0])[0]["chunks"]) == value_digest.CHUNKS and [
        r["ranks"] for r in found.rows
    ] == [[0, 1, 2], [3]]
    assert found.rows[0]["value"].startswith("float32[64, 32] on cpu, norm ")
    assert found.rows[1]["note"] == "first differs at [40, 5]: -1.0 here, 1285.0 on rank 0", found.rows
    assert repr(found).splitlines()[0] == "x: 2 different values" and "<table" in found._repr_html_()
    assert mg.compare_values("x * 0", s4).same
    parity = mg.compare_values("parity", s4)
    assert [(r["ranks"], r["value"]) for r in parity.rows] == [([0, 2], "int: 0"), ([1, 3], "int: 1")]
    lacking = mg.compare_values("only_some", s4)
    assert [(r["ranks"], r["value"]) for r in lacking.rows] == [
        ([0, 2, 3], "int: 1"),
        ([1], "NameError: name 'only_some' is not defined"),
    ]
    with pytest.raises(MgpuError, match=r"^compare_values takes a name or an expression as a string, got ''$"):
        mg.compare_values("", s4)
    s4.run_cell("del x, parity\nif rank != 1:\n    del only_some", stream=False)
