"""notebooks/04_placement.ipynb, run in real JupyterLab with Chromium, shows what its text says."""

import re

from labrun import assert_page_is_clean, notebook_module

WIDGET = "application/vnd.jupyter.widget-view+json"
SHOTS = {
    "01_block2d_view": "A = mg.randn",
    "02_show_widget": "mg.show(A)",
    "03_small_multiples": "T = mg.randn",
    "04_side_by_side": "from jupyter_mgpu.widgets.placement import side_by_side",
    "05_memory_plot": "import plotly",
    "06_live_player": "from IPython.display import display",
}

pytestmark, run = notebook_module("04_placement.ipynb", SHOTS)


def test_placement_notebook_runs_shows_views_and_traces(run, lab):
    text = run.text
    code = [c for c in run.nb.cells if c.cell_type == "code"]
    rich = next(c for c in code if c.source.startswith("A = mg.randn"))
    html = rich.outputs[0]["data"]["text/html"]
    assert "mgpu-tile" in html and "B(2x2)" in html  # the diagram and the text summary
    for prefix in ("mg.show(A)", "T = mg.randn", "from jupyter_mgpu.widgets.placement import side_by_side"):
        data = run.outputs(prefix)[0]["data"]
        assert WIDGET in data and "<svg" in data.get("text/html", "") + data.get("image/svg+xml", "")
    counts = dict(re.findall(r"(\w+) +(\d+) events", text["from jupyter_mgpu.ops.matmul_plan"]))
    assert set(counts) == {"row", "ring", "summa"} and int(counts["ring"]) > int(counts["row"])
    assert text["from jupyter_mgpu.tracing import replay"].count("real placement: True") == 3
    table = {
        m[0]: [float(x) for x in m[1:]]
        for m in re.findall(r"^(\w+) +([\d.]+) MiB +([\d.]+) MiB +([\d.]+) MiB", text["MiB = 2**20"], re.M)
    }
    assert table["row"][0] > table["ring"][0] and table["row"][0] > table["summa"][0]
    assert table["row"][2] == 0 and table["ring"][2] > 0 and table["summa"][2] > 0
    saved = lab["root"] / "notebooks" / "ring_matmul.html"
    assert saved.exists() and saved.stat().st_size > 5000
    assert any(WIDGET in o.get("data", {}) for o in run.outputs("from IPython.display import display"))
    assert int(re.search(r"(\d+) events", text["from IPython.display import display"]).group(1)) > 50
    assert "engines stopped" in text["mg.shutdown()"] or text["mg.shutdown()"] == ""


def test_live_player_ends_on_the_full_replay(run):
    live = run.steps["placement"]["live"]
    n = int(live["counter"].split("/ ")[1])
    assert n > 10 and live["counter"] == f"step {n} / {n}"  # the last step of the whole trace
    assert live["play"] == "▶"  # stopped, not still "playing" a finished trace
    assert live["title"] == "trace of matmul:ring" and live["badge"].startswith("replay of real events")


def test_side_by_side_players_fit_the_cell(run):
    row = run.steps["placement"]["row"]
    assert len(row["players"]) == 3
    assert all(0 <= left and right <= row["width"] + 1 for left, right in row["players"]), row


def test_placement_notebook_page_is_clean(run):
    assert_page_is_clean(run)
