"""notebooks/12_many_ranks.ipynb: 32 real CPU ranks in real JupyterLab with Chromium (issue 37). The
dashboard, the sidebar, ``%mgpu_status``, a per-rank DataFrame, ``mg.show`` of a sharded tensor and
``%mgpu_collective all_gather`` stay legible — no console error, nothing past a cell's edge; the all-gather's
player steps to its end at one height — and light:
the all-gather cell sends the page under 10 MB (counted on the page's websockets by
``tests/browser/notebook_hooks/12_many_ranks.mjs``); how quick it and an empty cell are is for
``benchmarks/collective_pictures.py`` and ``benchmarks/cell_latency.py`` to say."""

import re

from labrun import assert_page_is_clean, notebook_module

SHOTS = {
    "01_dashboard": "%mgpu_init 32",
    "02_status": "%mgpu_status",
    "03_dataframes": "%%mgpu\nimport pandas",
    "04_placement": "A = mg.randn",
    "07_figures": "%%mgpu\nimport plotly",
    "05_all_gather": "%%time\n%mgpu_collective all_gather",
    "06_where": "%mgpu_where",
}

pytestmark, run = notebook_module("12_many_ranks.ipynb", SHOTS)


def _cell_start(run, prefix: str) -> int:
    return next(k for k, m in enumerate(run.steps["traffic"]["marks"]) if m.get("source", "").startswith(prefix))


def _cell_seconds(run, prefix: str) -> float:
    """Seconds the cell ran: from its start to the next cell's."""
    marks = run.steps["traffic"]["marks"]
    i = _cell_start(run, prefix)
    return (marks[i + 1]["t"] - marks[i]["t"]) / 1e3


def test_the_all_gather_picture_of_32_ranks_is_light(run):
    cell = "%%time\n%mgpu_collective all_gather"
    assert re.search(r"Wall time: ([\d.]+) (m?s)", run.text[cell])  # the cell ran and the notebook shows its time
    # the bytes the page received from the cell's start to the run's end: its 0.5 MB display can arrive after the
    # next cells started (the kernel's reply on the shell channel overtook it on iopub in run H, session 37: 0
    # bytes between the two starts), and the cells after it (%mgpu_where, %mgpu_shutdown) send a few kB
    marks = run.steps["traffic"]["marks"]
    sent = marks[-1]["bytes"] - marks[_cell_start(run, cell)]["bytes"]
    assert 0 < sent < 10e6, sent
    # how quick it is is benchmarks/collective_pictures.py's to say (drawing ~0.04 s), not this test's: a ratio to
    # the notebook's own empty cells (about 0.45 s against 20 ms on 2 cores) passed alone but not beside another
    # worker's Chromium, whose load comes and goes within the run


def test_the_all_gather_figure_is_legible_and_its_player_steps_to_the_end_at_one_height(run):
    # was tests/browser/test_collective_scale_in_lab.py, a 32-rank cluster and a page of its own for this cell
    seconds = _cell_seconds(run, "%%time\n%mgpu_collective all_gather")
    assert seconds < 20, seconds  # the figure and the player, from running the cell (was 24-33 s)
    m = run.steps["allGather"]
    assert m["look"]["title"] == "all_gather"
    assert m["look"]["width"] <= 860 and m["look"]["smallestText"] >= 8.5, m["look"]  # 9 px, at the shown size
    assert m["steps"] == 32 and m["counters"][-1] == "step 32 / 32", m["counters"]
    assert max(m["heights"]) - min(m["heights"]) <= 1, m["heights"]  # one height for every frame
    assert m["perStep"] < 2, m


def test_one_output_for_32_different_dataframes_every_rank_labelled(run):
    (out,) = [o for o in run.outputs("%%mgpu\nimport pandas") if o["output_type"] == "display_data"]
    page = out["data"]["text/html"]
    assert re.findall(r"mgpu-rank-label'>rank (\d+)<", page) == [str(r) for r in range(32)]


def test_status_counts_the_ranks_in_one_line(run):
    assert "32 ranks: 32 idle" in run.text["%mgpu_status"]


def test_an_empty_cell_stays_cheap_at_32_ranks(run):
    ms = float(re.search(r"32 ranks: ([\d.]+) ms", run.text["import statistics"]).group(1))
    # 40 ms is the goal on a quiet machine (benchmarks/cell_latency.py); this only catches a cell that takes seconds
    assert ms < 1000, ms


def test_the_sidebar_lists_each_rank_once_with_its_state_and_stop_in_view(run):
    side = run.steps["traffic"]["sidebar"]
    assert side, "the sidebar never showed a running 32-rank cluster"
    ids = [r["id"] for r in side["ranks"]]
    assert len(ids) == 32 and len(set(ids)) == 32, ids
    assert all(len(r["state"]) >= 4 and "…" not in r["state"] for r in side["ranks"]), side["ranks"]
    assert side["stopInView"] and side["overflow"] == [], side


def test_many_ranks_page_is_clean(run):
    assert_page_is_clean(run)


def test_32_different_figures_are_one_output_four_to_a_page_and_step_on(run):
    figures = run.steps["figures"]
    first, second = figures["first"], figures["second"]
    assert first["outputs"] == 1, figures  # not 64 outputs, most folded away by JupyterLab
    assert first["labels"] == ["rank 0", "rank 1", "rank 2", "rank 3"] and first["plots"] == 4, figures
    assert first["page"].startswith("1/8: rank 0, rank 1") and first["past"] == 0, figures
    assert second["labels"] == ["rank 4", "rank 5", "rank 6", "rank 7"] and second["plots"] == 4, figures
    assert second["page"].startswith("2/8: rank 4") and second["past"] == 0, figures
