"""A ``%%mgpu`` cell feels like a notebook cell: rich last values per rank, ``--show``, notebook values
read by the cell, ``--local``, ``%%local`` and ``%mgpu_auto`` — through a real IPython shell, real engines."""

from __future__ import annotations

import pytest
from ipshell import shell

from jupyter_mgpu.magics.auto_mode import AUTO
from jupyter_mgpu.session.cell_values import RankValues

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def ip():
    return shell()


def cell(ip, source: str):
    r = ip.run_cell(source)
    assert r.success, r.error_in_exec or r.error_before_exec
    return r.result


def test_last_values_are_the_ranks_values_shown_once_when_equal(ip, s2, capsys):
    values = cell(ip, "%%mgpu\nrank * 10")
    assert isinstance(values, RankValues) and values == [0, 10] and ip.user_ns["_"] is values
    assert "Out[rank 0]: 0\nOut[rank 1]: 10" in capsys.readouterr().out
    values = cell(ip, "%%mgpu\nx = torch.ones(2); dist.all_reduce(x); x")
    assert [v.tolist() for v in values] == [[2.0, 2.0], [2.0, 2.0]]  # real tensors, copied back
    out = capsys.readouterr().out
    assert "Out[ranks 0–1]: tensor([2., 2.])" in out and "Out[rank 0]" not in out
    assert cell(ip, "%%mgpu\nx = 1") is None  # no last value: nothing shown, nothing in _


@pytest.fixture
def rich_shell(ip, monkeypatch):
    """This terminal shell formatting every mime type, as a notebook's kernel does."""
    formatter = ip.display_formatter
    monkeypatch.setattr(formatter, "active_types", list(formatter.formatters))
    return ip


def test_a_dataframe_renders_as_in_the_notebook_and_a_widget_from_its_bundle(rich_shell, s2):
    ip = rich_shell
    frames = cell(ip, "%%mgpu\nimport pandas as pd\npd.DataFrame({'rank': [rank], 'sq': [rank * rank]})")
    import pandas as pd

    assert all(isinstance(f, pd.DataFrame) for f in frames) and frames[1]["sq"].tolist() == [1]
    assert [ranks for ranks, _ in frames.groups()] == [[0], [1]]  # different frames: one per rank
    assert all("text/html" in frames._data(i) for i in (0, 1))  # formatted here, as a plain cell's value
    sliders = cell(ip, "%%mgpu\nimport ipywidgets\nipywidgets.IntSlider(value=7)")
    assert all(isinstance(v, str) and "IntSlider" in v for v in sliders)  # a widget cannot travel: its repr
    assert "application/vnd.jupyter.widget-view+json" in sliders.reports[0]["data"]


def test_an_equal_plotly_figure_shows_once_and_no_rank_formats_it(rich_shell, s2, monkeypatch):
    import plotly.io as pio

    ip = rich_shell

    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")  # as in a notebook (this shell has none)
    figures = cell(ip, "%%mgpu\nimport plotly.graph_objects as go\ngo.Figure(go.Bar(x=['a', 'b'], y=[3, 4]))")
    import plotly.graph_objects as go

    assert all(isinstance(f, go.Figure) for f in figures)
    assert [ranks for ranks, _ in figures.groups()] == [[0, 1]]  # one figure, "ranks 0–1"
    assert "application/vnd.plotly.v1+json" in figures._data(0)
    # the ranks never formatted it: nothing of nbformat's schema validation was imported there
    assert cell(ip, "%%mgpu\nimport sys\n'jsonschema' in sys.modules or 'nbformat' in sys.modules") == [False, False]
    different = cell(ip, "%%mgpu\ngo.Figure(go.Bar(x=['a'], y=[rank]))")
    assert [ranks for ranks, _ in different.groups()] == [[0], [1]]


def test_too_big_a_value_is_shown_not_copied(ip, s2):
    values = cell(ip, "%%mgpu\ntorch.zeros(5 << 20)")  # 20 MiB per rank
    assert all(isinstance(v, str) and v.startswith("tensor(") for v in values)


def test_show_keeps_other_ranks_output_one_click_away_and_errors_always_show(ip, s2, capsys):
    values = cell(ip, "%%mgpu --show 0\nprint('hello from', rank)\nrank + 5")
    out = capsys.readouterr().out
    assert "[rank 0] hello from 0" in out and "hello from 1" not in out
    assert "(rank 1: 1 line not shown (--show))" in out
    assert values == [5, 6] and "Out[rank 0]: 5" in out and "Out[rank 1]" not in out
    r = ip.run_cell("%%mgpu --show 0\nif rank == 1:\n    raise ValueError('only rank 1 fails')")
    assert not r.success and "rank 1" in str(r.error_in_exec) and "only rank 1 fails" in str(r.error_in_exec)
    r = ip.run_cell("%%mgpu --targets 0 --show 1\nrank")
    assert not r.success and "--show 1 names none of the ranks" in str(r.error_in_exec)


def test_notebook_values_travel_with_the_cell_and_leave_with_it(ip, s2, capsys):
    ip.run_cell("lr_xyz = 0.25\ndef bump(v):\n    return v + rank")  # rank: the ranks' own name
    assert cell(ip, "%%mgpu\nlr_xyz * 4") == [1.0, 1.0]
    assert cell(ip, "%%mgpu\nbump(100)") == [100, 101]  # a notebook function runs in the ranks' namespace
    assert cell(ip, "%%mgpu\n'lr_xyz' in dir()") == [False, False]  # there only while the cell ran
    capsys.readouterr()
    cell(ip, "%%mgpu\nlr_xyz = 9")
    assert cell(ip, "%%mgpu\nlr_xyz") == [9, 9]  # defined on both sides: the ranks' value
    cell(ip, "%%mgpu\nlr_xyz")
    said = capsys.readouterr().err
    assert said.count("reads lr_xyz, defined both in the notebook and on the ranks") == 1
    cell(ip, "%%mgpu\ndel lr_xyz")
    ip.run_cell("import threading\nlock_xyz = threading.Lock()")
    r = ip.run_cell("%%mgpu\nlock_xyz")
    assert not r.success and "lock_xyz" in str(r.error_in_exec)
    assert "the notebook's 'lock_xyz' cannot travel to the ranks" in capsys.readouterr().err


def test_local_runs_the_cell_in_the_kernel_too(ip, s2):
    cell(ip, "%%mgpu --local\nimport math as math_xyz\ndef both_xyz():\n    return 3")
    assert ip.user_ns["both_xyz"]() == 3 and "math_xyz" in ip.user_ns
    assert cell(ip, "%%mgpu\nboth_xyz() + rank") == [3, 4]


def test_auto_mode_runs_code_cells_on_the_ranks_and_magics_in_the_kernel(ip, s2, capsys):
    try:
        assert ip.run_cell("%mgpu_auto on").success
        assert cell(ip, "rank + 1") == [1, 2]
        assert cell(ip, "%%local\n'world_size' in dir()") is None  # %%local: a plain cell in the kernel
        assert "False" in capsys.readouterr().out
        assert ip.run_cell("%mgpu_status").success  # magics stay in the kernel
    finally:
        ip.run_cell("%mgpu_auto off")
    assert not AUTO.on and ip.run_cell("auto_xyz = 1").success and ip.user_ns["auto_xyz"] == 1
    r = ip.run_cell("%mgpu_auto maybe")
    assert not r.success and "%mgpu_auto takes on or off" in str(r.error_in_exec)


def test_a_text_progress_bar_ends_as_one_line_per_rank(ip, s2, capsys):
    cell(ip, "%%mgpu\nfrom tqdm import tqdm\nimport time\nfor _ in tqdm(range(4), ascii=True):\n    time.sleep(0.05)")
    err = capsys.readouterr().err
    bars = [line for line in err.splitlines() if "4/4" in line]
    assert sorted(line.split("]")[0] for line in bars) == ["[rank 0", "[rank 1"] and "\r" not in err
