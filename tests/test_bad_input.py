"""The bad-input sweep: every magic and public function, given wrong types, shapes, ranks, empty or
non-finite data, huge sizes or garbage, answers with one clear sentence — and the session stays usable,
nothing hangs, nothing is left behind."""

from __future__ import annotations

import re

import psutil
import pytest
import torch
from IPython.core.error import UsageError

import jupyter_mgpu as mg
import jupyter_mgpu.session.lifecycle as sm
from jupyter_mgpu.errors import MgpuError

pytestmark = pytest.mark.cluster


def _an_npy_file() -> str:
    import os
    import tempfile

    import numpy as np

    path = os.path.join(tempfile.mkdtemp(), "a.npy")
    np.save(path, np.zeros((4, 3), dtype=np.float32))
    return path


def _one_sentence(exc: BaseException, expected: str) -> None:
    text = str(exc)
    assert re.search(expected, text), f"{text!r} does not match {expected!r}"
    assert "\n" not in text.strip(), f"not one sentence: {text!r}"
    assert "Traceback" not in text


@pytest.fixture
def no_session():
    saved = sm._current
    sm._current = None
    yield
    sm._current = saved


@pytest.mark.parametrize(
    "call",
    [
        lambda: mg.randn(4, 4),
        lambda: mg.zeros(2),
        lambda: mg.scatter(torch.ones(4)),
        lambda: mg.memory(),
        lambda: mg.memory_history(),
        lambda: mg.reset_peak(),
        lambda: mg.dashboard(),
        lambda: mg.metrics(),
        lambda: mg.collective("all_reduce"),
        lambda: mg.bench(["all_reduce"]),
        lambda: mg.trace().__enter__(),
        lambda: mg.from_dtensor("x"),
        lambda: mg.load(_an_npy_file()),
        lambda: mg.current(),
    ],
    ids=[
        "randn",
        "zeros",
        "scatter",
        "memory",
        "memory_history",
        "reset_peak",
        "dashboard",
        "metrics",
        "collective",
        "bench",
        "trace",
        "from_dtensor",
        "load",
        "current",
    ],
)
def test_every_api_call_without_a_session(no_session, call):
    with pytest.raises(MgpuError) as info:
        call()
    _one_sentence(info.value, r"^no multi-GPU session is running[;,].*start one with %mgpu_init N or mg.init\(N\)")


def _boom(x):
    raise ValueError("no good")


CASES = [
    ("randn of strings", lambda s: mg.randn("a", 3), r"^shape must be whole numbers, got \('a', 3\)$"),
    ("negative shape", lambda s: mg.randn(-1, 4), r"^shape must be non-negative whole numbers, got \(-1, 4\)$"),
    (
        "placement dim out of range",
        lambda s: mg.randn(4, 4, placement=mg.Shard(2)),
        r"^Shard\(2\) is out of range for a 2-D tensor \(dims 0-1\)$",
    ),
    ("unknown dtype", lambda s: mg.randn(4, 4, dtype="float7"), r"^unsupported dtype 'float7': use one of float64"),
    (
        "huge tensor",
        lambda s: mg.randn(10**6, 10**6),
        r"^ranks 0, 1 ran out of device memory \(budget .* each\) while allocating 1\.8 TiB",
    ),
    (
        "from_dtensor of an unknown name",
        lambda s: mg.from_dtensor("no_such_dtensor"),
        r"^NameError on ranks 0, 1: name 'no_such_dtensor' is not defined on the ranks: bind a DTensor",
    ),
    (
        "to_dtensor with a mesh of other ranks",
        lambda s: mg.randn(4, 4).to_dtensor("x", mesh=(3,)),
        r"^the mesh \(3\) must hold every rank of this session once \(2 ranks\)$",
    ),
    ("scatter of a string", lambda s: mg.scatter("nope"), r"^scatter needs a torch tensor or an array, got str$"),
    (
        "inner dimensions",
        lambda s: mg.matmul(mg.randn(8, 6), mg.randn(8, 6)),
        r"^inner dimensions do not match: A is 8x6, B is 8x6$",
    ),
    (
        "matmul dtypes",
        lambda s: mg.matmul(mg.randn(8, 6), mg.randn(6, 4, dtype=torch.float64)),
        r"^dtypes differ: A is float32, B is float64; convert one first$",
    ),
    (
        "matmul strategy",
        lambda s: mg.matmul(mg.randn(8, 6), mg.randn(6, 4), strategy="fast"),
        r"^unknown matmul strategy 'fast': use one of auto, ring, summa, inner, row, col$",
    ),
    (
        "matmul of a plain tensor",
        lambda s: mg.matmul(mg.randn(8, 6), torch.ones(6, 4)),
        r"^expected a DistTensor, got Tensor; use mg.scatter\(tensor\) to distribute it$",
    ),
    (
        "unknown collective",
        lambda s: mg.collective("all_sum"),
        r"^unknown collective 'all_sum'; choose one of broadcast",
    ),
    (
        "unknown reduce op",
        lambda s: mg.collective("all_reduce", op="median"),
        r"^unknown reduce op 'median'; choose one of sum, product, min, max, avg$",
    ),
    (
        "src out of range",
        lambda s: mg.collective("broadcast", src=5),
        r"^src rank 5 is out of range: this session has ranks 0-1$",
    ),
    (
        "shape that does not split",
        lambda s: mg.collective("reduce_scatter", shape=(5, 5)),
        r"^reduce_scatter splits dim 0 into 2 equal chunks .* such as shape 6x5$",
    ),
    ("run on rank 9", lambda s: s.run(len, [1], targets=9), r"^rank 9 is out of range: this session has ranks 0-1$"),
    ("local of rank 7", lambda s: mg.randn(4, 4).local(7), r"^rank 7 is out of range: this session has ranks 0-1$"),
    (
        "redistribute out of range",
        lambda s: mg.randn(4, 4).redistribute(mg.Shard(5)),
        r"^Shard\(5\) is out of range for a 2-D tensor \(dims 0-1\)$",
    ),
    ("missing file", lambda s: mg.load("/nonexistent/x.npy"), r"^/nonexistent/x.npy does not exist$"),
    (
        "map of unequal lengths",
        lambda s: mg.map(torch.add, mg.randn(8, 6), mg.randn(7, 6)),
        r"^mg.map needs inputs of the same length along dim 0: argument 1 has 8 rows but argument 2 has 7$",
    ),
    (
        "map raising on the ranks",
        lambda s: mg.map(_boom, mg.randn(8, 6)),
        r"^_boom raised ValueError on rank 0 \(rows 0–3\): no good",
    ),
    (
        "history window",
        lambda s: mg.memory_history(minutes=-1),
        r"^minutes must be more than 0 and at most 10 \(the history kept\), got -1$",
    ),
    ("bench sizes", lambda s: mg.bench(["all_reduce"], sizes="abc"), r"^cannot read the size 'abc'"),
    (
        "compare_values of a number",
        lambda s: mg.compare_values(3),
        r"^compare_values takes a name or an expression as a string, got 3$",
    ),
    (
        "plan with wrong shapes",
        lambda s: mg.plan_matmul(((4, 5), (6, 7)), 2, "float32", 10**9),
        r"^inner dimensions do not match: A is 4x5, B is 6x7$",
    ),
    ("second init", lambda s: mg.init(2), r"^a cluster is already running \(2 × cpu\); use %mgpu_init --restart"),
    (
        "unpicklable function",
        lambda s: s.run(lambda: __import__("threading").Lock()),
        r"could not be sent between the notebook and the ranks",
    ),
]


@pytest.mark.parametrize("name,call,expected", CASES, ids=[c[0] for c in CASES])
def test_public_functions_give_one_clear_sentence(s2, name, call, expected):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(MgpuError) as info:
        call(s2)
    _one_sentence(info.value, expected)
    # the session is still usable, and nothing was started or left behind
    assert s2.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()") == ["2.0", "2.0"]
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_empty_and_non_finite_tensors_are_data_not_errors(s2):
    assert tuple(mg.zeros(0, 4).gather().shape) == (0, 4)
    t = torch.tensor([float("nan"), float("inf"), -float("inf"), 2.0])
    back = mg.scatter(t).gather()
    assert torch.equal(torch.isnan(back), torch.isnan(t)) and torch.equal(back[1:], t[1:])


def test_freed_handle(s2):
    F = mg.randn(4, 4)
    F.free()
    for use in (F.gather, lambda: mg.show(F), lambda: mg.matmul(F, F)):
        with pytest.raises(MgpuError) as info:
            use()
        _one_sentence(info.value, r"^tensor \S+ was freed; create it again$")


def test_empty_trace(s2, tmp_path):
    with mg.trace() as t:
        pass
    for use in (t.play, lambda: t.save_html(tmp_path / "x.html")):
        with pytest.raises(MgpuError) as info:
            use()
        _one_sentence(info.value, r"^this trace has no events to (play|save)")
    assert not (tmp_path / "x.html").exists()


@pytest.fixture(scope="module")
def ip():
    from ipshell import shell

    return shell()


MAGIC_CASES = [
    ("%mgpu_collective ünïcode", MgpuError, r"^unknown collective 'ünïcode'"),
    ("%mgpu_collective all_reduce --op ∑", MgpuError, r"^unknown reduce op '∑'"),
    ("%mgpu_collective", UsageError, r"the following arguments are required: name"),
    ("%mgpu_bench all_reduce --sizes 1K:huge", MgpuError, r"^cannot read the size 'huge'"),
    ("%mgpu_bench", UsageError, r"the following arguments are required: collectives"),
    ("%mgpu_bench all_reduce --iters many", UsageError, r"^--iters takes a number, got 'many'$"),
    ("%mgpu_matmul -5", UsageError, r"^give M \(square\) or M K N, each at least 1$"),
    ("%mgpu_matmul 8 --strategy x", MgpuError, r"^unknown matmul strategy 'x'"),
    ("%mgpu_matmul 10000000", MgpuError, r"^no matmul strategy fits: the leanest \(\w+\) needs .* on rank 0"),
    ("%%mgpu --targets 9\nrank", MgpuError, r"^rank 9 is out of range: this session has ranks 0-1$"),
    ("%%mgpu --targets ☃\nrank", MgpuError, r"^targets must be ranks such as 0,2 or 1:3, got '☃'$"),
    ("%mgpu_status now", UsageError, r"^%mgpu_status takes no arguments, got 'now'$"),
    ("%mgpu_init 2 --restart --mem-per-device 1e99GiB", MgpuError, r"^malformed memory size '1e99GiB'"),
    ("%mgpu_init 2 --restart --timeout -3", MgpuError, r"^timeout must be a number of seconds above 0, got -3.0$"),
    (
        "%mgpu_init 2 --restart --hang-after -1",
        MgpuError,
        r"^hang_after must be a number of seconds, 0 or more, got -1.0$",
    ),
    ("%mgpu_init 2 --restart --hang-after soon", UsageError, r"^--hang-after takes seconds, got 'soon'$"),
    (
        "%mgpu_init 2 --restart --status-after -1",
        MgpuError,
        r"^status_after must be a number of seconds, 0 or more, got -1.0$",
    ),
    ("%mgpu_where now", UsageError, r"^%mgpu_where takes --tree and --dump DIR, got 'now'$"),
    ("%mgpu_tb --rank x", UsageError, r"^--rank takes a rank number, got 'x'$"),
    ("%mgpu_debug --all --rank 1", UsageError, r"^%mgpu_debug takes --all or --rank, not both$"),
    ("%mgpu_run --fresh", UsageError, r"the following arguments are required: target"),
]


@pytest.mark.parametrize("line,etype,expected", MAGIC_CASES, ids=[c[0] for c in MAGIC_CASES])
def test_magics_with_garbage_give_one_clear_sentence(s2, ip, line, etype, expected):
    result = ip.run_cell(line)
    error = result.error_in_exec or result.error_before_exec
    assert isinstance(error, etype), f"{line!r} gave {error!r}"
    _one_sentence(error, expected)
    assert sm.current() is s2 and s2.alive  # a refused --restart leaves the running cluster alone
    assert s2.run_cell("rank") == ["0", "1"]
