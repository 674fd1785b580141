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

CELLS = '''
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
'''


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
    ip.run_cell("def picky(rank):\n    if rank == 1:\n        raise ValueError('no odd ranks')\n"
                "    return torch.ones(2)")
    with pytest.raises(RankError, match=r"^ValueError on rank 1: no odd ranks at line 3 of picky\(\) .*"
                                        r"raise ValueError\('no odd ranks'\)"):
        s2.run(ip.user_ns["picky"], 1, targets=[1])
    with pytest.raises(MgpuError, match="rank 1"):
        mg.collective("all_reduce", ip.user_ns["picky"])
    assert s2.run_cell("y = torch.ones(1); dist.all_reduce(y); y.item()") == ["2.0", "2.0"]


def test_a_function_that_cannot_be_sent_says_what_it_references(ip, s2):
    ip.run_cell("import threading\nguard = threading.Lock()\ndef locked(rank):\n    with guard:\n"
                "        return torch.ones(1)")
    for send in (lambda f: s2.run(f, 0), lambda f: mg.collective("all_reduce", f),
                 lambda f: mg.map(f, mg.scatter(torch.ones(4, 1), mg.Shard(0)))):
        with pytest.raises(MgpuError, match=r"^locked cannot be sent to the ranks \(it references guard \(a lock\)"):
            send(ip.user_ns["locked"])
    assert s2.run_cell("rank") == ["0", "1"]
