"""Notebook functions reach the ranks the same way through every entry point (issue 14, part 1).

Functions are defined the way a notebook defines them (IPython cells, module ``__main__``), and one
calls another — like the collectives tutorial's ``image(rank)`` calling ``disk(...)``.
"""

from __future__ import annotations

import pytest
import torch
from ipshell import shell

import jupyter_mgpu as mg
from jupyter_mgpu.errors import MgpuError, RankError

pytestmark = pytest.mark.cluster

CELLS = """
import torch
RADIUS = 3

def disk(size, cx, value):
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    return ((yy - size // 2) ** 2 + (xx - cx) ** 2 <= RADIUS ** 2).float() * value

def image(rank):
    return disk(9, 2 + 2 * rank, float(rank + 1))

def doubled(rows):
    return image(0)[: len(rows), :1].sum() + 2 * rows

def peek():
    return on_the_rank * 10
"""


@pytest.fixture(scope="module")
def ip():
    ip = shell()
    result = ip.run_cell(CELLS)
    assert result.success, result.error_in_exec
    return ip


def _expected_image(n: int) -> torch.Tensor:
    ns: dict = {}
    exec(CELLS, ns)
    return torch.stack([ns["image"](r) for r in range(n)])


def test_every_entry_point_sends_a_function_that_calls_another(ip, s2):
    image = ip.user_ns["image"]
    want = _expected_image(2)
    # Session.run, both transports: the direct channel (blocking) and ipyparallel (non-blocking)
    assert torch.equal(s2.run(image, 1)[0], want[1])
    assert torch.equal(s2.run(image, 0, block=False).get()[1], want[0])
    # mg.collective and the magic's --inputs
    r = mg.collective("all_reduce", image, op="max")
    assert torch.equal(r.after[0], want.max(0).values) and torch.equal(r.after[1], want.max(0).values)
    result = ip.run_cell("%mgpu_collective all_reduce --inputs image --op max --no-animate")
    assert result.success, result.error_in_exec
    # mg.map
    A = mg.scatter(torch.arange(8.0).reshape(8, 1), mg.Shard(0))
    got = mg.map(ip.user_ns["doubled"], A).gather()
    assert torch.equal(got, want[0][:4, :1].sum() + 2 * torch.arange(8.0).reshape(8, 1))


def test_names_the_notebook_lacks_come_from_the_ranks(ip, s2):
    s2.run_cell("on_the_rank = rank + 1")
    assert s2.run(ip.user_ns["peek"]) == [10, 20]


def test_an_error_in_a_sent_function_names_the_rank_and_the_line(ip, s2):
    ip.run_cell(
        "def picky(rank):\n    if rank == 1:\n        raise ValueError('no odd ranks')\n    return torch.ones(2)"
    )
    with pytest.raises(
        RankError,
        match=r"^ValueError on rank 1: no odd ranks at line 3 of picky\(\) .*"
        r"raise ValueError\('no odd ranks'\)",
    ):
        s2.run(ip.user_ns["picky"], 1, targets=[1])
    with pytest.raises(MgpuError, match="rank 1"):
        mg.collective("all_reduce", ip.user_ns["picky"])
    assert s2.run_cell("y = torch.ones(1); dist.all_reduce(y); y.item()") == ["2.0", "2.0"]


def test_a_function_that_cannot_be_sent_says_what_it_references(ip, s2):
    ip.run_cell(
        "import threading\nguard = threading.Lock()\ndef locked(rank):\n    with guard:\n        return torch.ones(1)"
    )
    for send in (
        lambda f: s2.run(f, 0),
        lambda f: mg.collective("all_reduce", f),
        lambda f: mg.map(f, mg.scatter(torch.ones(4, 1), mg.Shard(0))),
    ):
        with pytest.raises(MgpuError, match=r"^locked cannot be sent to the ranks \(it references guard \(a lock\)"):
            send(ip.user_ns["locked"])
    assert s2.run_cell("rank") == ["0", "1"]


# -- issue 23: a sent function runs in the rank's namespace ------------------------------------------
NAMESPACE_CELLS = """
import torch
MiB = 2**20

def keep_tensor():
    global kept
    kept = torch.full((48 * MiB // 4,), float(rank + 1))  # 48 MiB on every rank
    return kept.numel()

def keep_int():
    global answer
    answer = 40 + rank

def build_model():
    return torch.nn.Linear(3, 2)

def setup():
    global model
    torch.manual_seed(0)
    model = build_model()

def bump(*_):
    global counter
    counter = counter + 1 if "counter" in globals() else 1
    return torch.tensor([float(counter)])

def forget(*_):
    global kept, answer
    del kept, answer

def scaled():
    return torch.full((2,), float(scale))
"""


@pytest.fixture
def ns(ip):
    result = ip.run_cell(NAMESPACE_CELLS)
    assert result.success, result.error_in_exec
    return ip.user_ns


def test_global_writes_land_on_the_rank_and_later_cells_see_them(ns, s2):
    s2.run(ns["keep_int"])
    assert s2.run_cell("answer") == ["40", "41"]
    s2.run(ns["setup"])
    assert s2.run_cell("type(model).__name__, tuple(model.weight.shape)") == ["('Linear', (2, 3))"] * 2
    # the helper it called came from the notebook for the call only: the rank's namespace is as it was
    assert s2.run_cell("'build_model' in globals(), 'setup' in globals()") == ["(False, False)"] * 2
    # a later sent function reads the rank's model (a name the notebook lacks)
    ns["weight_sum"] = eval("lambda: float(model.weight.detach().sum())", ns)
    torch.manual_seed(0)
    want = float(torch.nn.Linear(3, 2).weight.detach().sum())
    assert s2.run(ns["weight_sum"]) == pytest.approx([want, want])
    s2.run_cell("del model")


def test_a_global_tensor_stays_alive_and_shows_in_the_memory_views(ns, s2):
    from test_memory import settled

    s2.run_cell("import gc; gc.collect()")
    before = [settled(r)["resident_bytes"] for r in (0, 1)]
    assert s2.run(ns["keep_tensor"]) == [12 * 2**20] * 2
    try:
        assert s2.run_cell("float(kept[0]), kept.numel() * 4 // 2**20") == ["(1.0, 48)", "(2.0, 48)"]
        for r in (0, 1):
            grown = settled(r)["resident_bytes"] - before[r]
            assert grown > 44 * 2**20, (
                f"rank {r}: the kept 48 MiB tensor is not in the memory views ({grown / 2**20:.1f} MiB)"
            )
        board = mg.dashboard()
        assert all(d["used"] > 40 * 2**20 for d in board.devices)
    finally:
        s2.run(ns["forget"])  # del of a global works too
    assert s2.run_cell("'kept' in globals(), 'answer' in globals()") == ["(False, False)"] * 2
    assert all(settled(r)["resident_bytes"] - before[r] < 16 * 2**20 for r in (0, 1)), "del left the tensor alive"


def test_a_counter_bumped_by_three_calls_reads_three_through_every_entry_point(ns, s2):
    s2.run_cell("globals().pop('counter', None)")
    assert [t.item() for t in s2.run(ns["bump"])] == [1, 1]
    assert [t.item() for t in s2.run(ns["bump"], block=False).get()] == [2, 2]  # the ipyparallel path too
    mg.collective("all_reduce", ns["bump"], op="sum")
    assert s2.run_cell("counter") == ["3", "3"]
    A = mg.scatter(torch.arange(4.0).reshape(4, 1), mg.Shard(0))
    mg.map(ns["bump"], A, reduce="sum")
    assert s2.run_cell("counter") == ["4", "4"]
    s2.run_cell("del counter")


def test_a_name_on_both_sides_is_the_ranks_and_said_once(ns, s2, capsys):
    ns["scale"] = 2.0
    s2.run_cell("globals().pop('scale', None)")
    assert [t.tolist() for t in s2.run(ns["scaled"])] == [[2.0, 2.0]] * 2  # only the notebook has it
    assert "defined both" not in capsys.readouterr().err
    assert s2.run_cell("'scale' in globals()") == ["False", "False"]  # taken back after the call
    s2.run_cell("scale = 5.0 + rank")
    try:
        for _ in range(3):
            assert [t.tolist() for t in s2.run(ns["scaled"])] == [[5.0, 5.0], [6.0, 6.0]]
        err = capsys.readouterr().err
        line = "mgpu: scaled() reads scale, defined both in the notebook and on the ranks: the ranks' value is used"
        assert err.count(line) == 1, err
        s2.run_cell("scale = 2.0")  # the same value on both sides: nothing to say
        s2.run(ns["scaled"])
        assert "defined both" not in capsys.readouterr().err
    finally:
        s2.run_cell("del scale")


def test_an_error_in_a_helper_from_another_cell_quotes_its_line(ip, s2):
    ip.run_cell("def inner(x):\n    y = x + 1\n    return y / 0")
    ip.run_cell("def outer(rank):\n    return inner(rank)")
    with pytest.raises(RankError, match=r"ZeroDivisionError on rank 0: .* at line 3 of inner\(\) .*return y / 0"):
        s2.run(ip.user_ns["outer"], 0, targets=[0])
