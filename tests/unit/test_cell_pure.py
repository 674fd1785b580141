"""The pure parts of a %%mgpu cell: which notebook names it reads, how per-rank values are grouped
and labelled, and what auto mode does to a cell's lines."""

from __future__ import annotations

import pickle

from jupyter_mgpu.magics.auto_mode import AutoMode
from jupyter_mgpu.session.cell_names import free_names
from jupyter_mgpu.session.cell_values import RankValues, rank_label


def test_free_names_are_what_the_cell_reads_and_never_binds():
    source = (
        "import numpy as np\nfrom os import path\nlr2 = lr * 2\nfor i in range(n):\n    total += i\n"
        "def f(a):\n    return a + scale\nclass K: pass\nwith open(p) as fh: pass\n"
        "try:\n    pass\nexcept ValueError as err:\n    print(err, rank, torch, _hidden)\n"
    )
    assert free_names(source) == {"lr", "n", "total", "scale", "p"}
    assert free_names("def broken(:") == set()  # the ranks say what is wrong with it


def _report(value, data=None):
    return {
        "repr": repr(value),
        "data": data or {"text/plain": repr(value)},
        "metadata": {},
        "pickled": pickle.dumps(value),
    }


def test_equal_outputs_show_once_and_different_ones_per_rank():
    same = RankValues([0, 1, 2, 3], [_report(5)] * 4)
    assert same == [5, 5, 5, 5] and same.groups() == [([0, 1, 2, 3], 0)] and repr(same) == "Out[ranks 0–3]: 5"
    apart = RankValues([0, 2], [_report(1), _report(2)])
    assert apart.groups() == [([0], 0), ([2], 1)] and repr(apart) == "Out[rank 0]: 1\nOut[rank 2]: 2"
    shown = RankValues([0, 1, 2], [_report(1), None, _report(3)], show=[2])
    assert shown == [1, None, 3] and shown.groups() == [([2], 2)]
    lost = _report(7)
    lost["pickled"] = b"not a pickle"
    assert RankValues([0], [lost]) == ["7"]  # a value that cannot load here is its repr


def test_rank_labels():
    assert [rank_label(r) for r in ([3], [0, 1, 2, 3], [0, 2], [2, 1])] == [
        "rank 3",
        "ranks 0–3",
        "ranks 0, 2",
        "ranks 1–2",
    ]


def test_auto_mode_prefixes_code_cells_and_leaves_magics_and_local_cells():
    auto = AutoMode()
    assert auto(["x = 1\n"]) == ["x = 1\n"]  # off
    auto.on = True
    assert auto(["x = 1\n"]) == ["%%mgpu\n", "x = 1\n"]
    for magic in (["%%local\n", "x\n"], ["%mgpu_status\n"], ["  %time x\n"], ["%%mgpu --show 0\n", "x\n"]):
        assert auto(magic) == magic
    with auto.in_kernel():
        assert auto(["x = 1\n"]) == ["x = 1\n"]
    assert auto(["\n"]) == ["\n"]


def test_completion_asks_the_ranks_in_mgpu_bodies_and_in_auto_mode_cells(monkeypatch):
    from jupyter_mgpu.magics import auto_mode
    from jupyter_mgpu.magics.rank_completion import mgpu_body

    assert mgpu_body("%%mgpu --show 0\nmod", None) == (16, "%%mgpu --show 0")
    assert mgpu_body("%%mgpu\nmod", 3) is None  # on the magic's own line
    assert mgpu_body("mod", None) is None and mgpu_body("%%mgpu_x\nmod", None) is None
    auto = auto_mode.AutoMode()
    auto.on = True
    monkeypatch.setattr(auto_mode, "AUTO", auto)
    assert mgpu_body("mod", None) == (0, "%%mgpu")  # every code cell runs on the ranks
    assert mgpu_body("%%local\nmod", None) is None
