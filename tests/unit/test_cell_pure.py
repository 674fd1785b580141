"""The pure parts of a %%mgpu cell: which notebook names it reads, how per-rank values are grouped
and labelled, and what auto mode does to a cell's lines."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

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


class Figure:
    """A figure as plotly shows one: its JSON, and HTML with a fresh element id at each render."""

    def __init__(self, y: int, note: int = 0) -> None:
        self.y, self.note = y, note  # note: not shown, so equal figures can pickle apart

    def __repr__(self) -> str:
        return f"Figure(y={self.y})"

    def _repr_mimebundle_(self, include=None, exclude=None):
        import uuid

        return {
            "application/vnd.plotly.v1+json": {"data": [{"y": [self.y]}]},
            "text/html": f"<div id='{uuid.uuid4()}'></div>",
            "text/plain": repr(self),
        }


def test_equal_figures_show_once_and_are_formatted_in_the_notebook(monkeypatch):
    import IPython
    from IPython.core.formatters import DisplayFormatter

    monkeypatch.setattr(IPython, "get_ipython", lambda: SimpleNamespace(display_formatter=DisplayFormatter()))
    same = RankValues([0, 1, 2, 3], [_report(Figure(1, r), {"text/plain": "Figure(y=1)"}) for r in range(4)])
    assert len({r["pickled"] for r in same.reports}) == 4  # compared as shown, not by their bytes
    assert same.groups() == [([0, 1, 2, 3], 0)]  # the HTML's random ids do not make them differ
    assert "application/vnd.plotly.v1+json" in same._data(0) and not same._text_only(0)
    apart = RankValues([0, 1], [_report(Figure(1), {"text/plain": "x"}), _report(Figure(2), {"text/plain": "x"})])
    assert apart.groups() == [([0], 0), ([1], 1)]


def test_the_first_use_of_torch_and_plotly_is_paid_in_the_background_once():
    import sys

    from jupyter_mgpu.session import cell_values

    first = cell_values.warm_first_use()
    assert first is not None and cell_values.warm_first_use() is first  # one thread, however often asked
    first.join(60)
    assert not first.is_alive() and "plotly.io._renderers" in sys.modules and "torch" in sys.modules
