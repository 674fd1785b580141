"""The magics driven through a real IPython shell (globalipapp) with real engines."""

from __future__ import annotations

import pytest
import torch
from ipshell import shell
from processes import cluster_pids, wait_gone

import jupyter_mgpu.session.lifecycle as sm

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def ip():
    return shell()


@pytest.fixture
def no_session():
    saved = sm._current
    sm._current = None
    yield
    if sm._current is not None and sm._current is not saved:
        pids = cluster_pids(sm._current)
        sm._current.shutdown()
        assert wait_gone(pids) == []
    sm._current = saved


def run(ip, cell):
    return ip.run_cell(cell)


@pytest.mark.slow
def test_magics_tour(ip, no_session, capsys, tmp_path):
    r = run(ip, "%mgpu_init 2 --cpu --timeout 5 --no-dashboard")
    assert r.success, r.error_in_exec
    out = capsys.readouterr().out
    assert "mgpu: 2 engines ready (2 × CPU virtual device, gloo" in out

    r = run(
        ip,
        "%%mgpu\nx = torch.full((2,), float(rank), device=device)\ndist.all_reduce(x)\nprint(rank, world_size, device, x)",
    )
    assert r.success
    out = capsys.readouterr().out
    assert "[rank 0] 0 2 cpu tensor([1., 1.])" in out and "[rank 1] 1 2 cpu tensor([1., 1.])" in out

    r = run(ip, "%%mgpu --targets 1\nrank * 100")
    assert r.success and "Out[rank 1]: 100" in capsys.readouterr().out

    r = run(ip, "%%mgpu --noblock\nimport time; time.sleep(0.2); rank")
    assert r.success
    assert r.result.get() == [0, 1]  # the values, as a blocking cell's _ holds them, not their reprs
    # every kind of value keeps its type, blocking or not, on every rank or some
    cell = "class Point:\n    def __init__(self, x):\n        self.x = x\n{}"
    for last, check in [
        ("13.75 + rank", lambda v, r: type(v) is float and v == 13.75 + r),
        ("None", lambda v, r: v is None),
        ("torch.full((2,), rank)", lambda v, r: isinstance(v, torch.Tensor) and v.tolist() == [r, r]),
        ("Point(rank)", lambda v, r: type(v).__name__ == "Point" and v.x == r),
    ]:
        for line in ("%%mgpu", "%%mgpu --noblock", "%%mgpu --targets 1", "%%mgpu --noblock --targets 1"):
            r = run(ip, f"{line}\n" + cell.format(last))
            assert r.success, r.error_in_exec
            values = r.result.get() if "--noblock" in line else r.result
            ranks = [1] if "--targets" in line else [0, 1]
            if values is None and last == "None" and "--noblock" not in line:
                continue  # a blocking cell whose value is None shows nothing, as a plain cell
            assert len(values) == len(ranks) and all(check(v, k) for v, k in zip(values, ranks)), (line, values)
    assert run(ip, "%%mgpu\nsum([1, 2])").result == [3, 3]

    r = run(ip, "table = %mgpu_status")
    table = ip.user_ns["table"]
    text = repr(table)
    assert text.splitlines()[0].split() == ["rank", "engine_id", "pid", "device", "backend", "memory", "state"]
    assert len(text.splitlines()) == 3 and "cpu:1" in text and "<table" in table._repr_html_()

    r = run(ip, f"where = %mgpu_where --dump {tmp_path}/fr")  # what torchfrtrace reads, from every rank
    assert r.success and [row["state"] for row in ip.user_ns["where"].rows] == ["idle", "idle"]
    assert f"written to {tmp_path}/fr/rank_<r>: torchfrtrace {tmp_path}/fr" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "fr").iterdir()) == ["rank_0", "rank_1"]
    r = run(ip, "tree = %mgpu_where --tree")
    assert r.success and repr(ip.user_ns["tree"]).splitlines()[1].split() == ["idle", "ranks", "0,", "1"]
    r = run(ip, "%mgpu_where --dunp x")
    assert not r.success and "takes --tree and --dump DIR, got '--dunp x'" in str(r.error_in_exec)

    r = run(ip, "%mgpu_init 2 --cpu")
    assert not r.success
    assert "already running" in str(r.error_in_exec) and "--restart" in str(r.error_in_exec)

    pids = cluster_pids(sm._current)
    r = run(ip, "%mgpu_shutdown")
    assert r.success and "engines stopped" in capsys.readouterr().out
    assert wait_gone(pids) == []


@pytest.mark.slow
def test_errors_are_one_line_without_traceback(ip, no_session, capsys):
    assert run(ip, "%mgpu_init 2 --cpu --timeout 5 --no-dashboard").success
    capsys.readouterr()
    r = run(ip, "%%mgpu\nif rank == 1:\n    raise ValueError('bad value')")
    assert not r.success
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "RankError: ValueError on rank 1: bad value at line 3 of the cell" in text  # %%mgpu is line 1
    assert "Traceback" not in text and "site-packages" not in text


@pytest.mark.parametrize(
    "line,message",
    [
        ("%mgpu_init 0", "at least 1"),
        ("%mgpu_init 9 --devices 0,1", "asked for 9 devices but --devices lists 2"),
        ("%mgpu_init 2 --backend foo", "unknown backend 'foo'"),
        ("%mgpu_init 2 --backend nccl", "backend 'nccl' needs CUDA GPUs"),
        ("%mgpu_init 2 --mem-per-device lots", "malformed memory size 'lots'"),
        ("%mgpu_init two", "whole number"),
        ("%mgpu_init 2 --timeout soon", "--timeout takes seconds"),
        ("%mgpu_init 2 --bogus", "unrecognized arguments: --bogus"),
        ("%mgpu_init 2 'unclosed", "cannot read the arguments"),
        ("%%mgpu\nprint(1)", "no multi-GPU session is running"),
        ("%mgpu_status", "no multi-GPU session is running"),
    ],
)
def test_bad_input_is_one_sentence_and_starts_nothing(ip, no_session, capsys, line, message):
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    r = run(ip, line)
    assert not r.success
    captured = capsys.readouterr()
    assert message in str(r.error_in_exec) or message in captured.out + captured.err
    assert sm._current is None
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before
