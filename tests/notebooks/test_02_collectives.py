"""notebooks/02_collectives.ipynb runs top to bottom on a kernel of this venv and shows what it says."""

import re

from labrun import assert_page_is_clean, notebook_module


def _outputs(nb, prefix):
    exact = [c for c in nb.cells if c.cell_type == "code" and c.source == prefix]
    cells = exact or [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(prefix)]
    assert len(cells) == 1, prefix
    return [o for o in cells[0].outputs if o.get("data") != {"text/plain": ""}]  # less a wait's emptied line


def _mime(outputs, mime):
    return [
        o["data"][mime] for o in outputs if o["output_type"] in ("display_data", "execute_result") and mime in o["data"]
    ]


SHOTS = {
    "01_all_reduce": "%mgpu_collective all_reduce",
    "02_reduce": "%mgpu_collective reduce ",
    "03_broadcast": "%mgpu_collective broadcast",
    "04_all_gather": "%mgpu_collective all_gather",
    "05_reduce_scatter": "%mgpu_collective reduce_scatter --op sum --shape",
    "06_scatter": "%mgpu_collective scatter",
    "07_gather": "%mgpu_collective gather",
    "08_all_to_all": "%mgpu_collective all_to_all",
    "09_send_recv": "%mgpu_collective send_recv",
    "10_own_tensors": "A = mg.arange",
    "11_bench": "%mgpu_bench",
}

pytestmark, run = notebook_module("02_collectives.ipynb", SHOTS)


def test_collectives_notebook_runs_and_shows_every_collective(run):
    nb, text = run.nb, run.text
    assert "mgpu: 4 engines ready (4 × CPU virtual device, gloo" in text["%load_ext jupyter_mgpu"]
    titles = {
        "%mgpu_collective all_reduce": "all_reduce (op max)",
        "%mgpu_collective reduce ": "reduce (op sum), root rank 0",
        "%mgpu_collective broadcast": "broadcast, root rank 2",
        "%mgpu_collective all_gather": "all_gather",
        "%mgpu_collective reduce_scatter --op sum --shape": "reduce_scatter (op sum)",
        "%mgpu_collective scatter": "scatter, root rank 0",
        "%mgpu_collective gather": "gather, root rank 0",
        "%mgpu_collective all_to_all": "all_to_all",
        "%mgpu_collective barrier": "barrier",
        "%mgpu_collective send_recv": "send_recv",
    }
    for prefix, title in titles.items():
        outs = _outputs(nb, prefix)
        svgs = _mime(outs, "image/svg+xml")
        assert len(svgs) == 1 and f">{title}" in svgs[0], prefix  # the static image of the figure
        assert all(f">rank {r}<" in svgs[0] for r in range(4))
        players = _mime(outs, "application/vnd.jupyter.widget-view+json")
        animated = prefix.split()[1] in ("all_reduce", "broadcast", "reduce_scatter", "all_to_all", "send_recv")
        assert len(players) == (1 if animated else 0), prefix  # the logical-schedule player
        if animated:  # and its static fallback for exported notebooks
            assert any("logical schedule" in h for h in _mime(outs, "text/html") if "mgpu-player-static" in h)
    assert _mime(_outputs(nb, "%mgpu_collective reduce "), "image/svg+xml")[0].count("receives nothing") == 3
    out = text["import torch"]
    assert "before: [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 3.0]]" in out
    assert "after:  [[3.0, 3.0, 3.0], [3.0, 3.0, 3.0], [3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]" in out
    assert text["A = mg.arange"].startswith("True")
    err = [o for o in _outputs(nb, "%mgpu_collective reduce_scatter --op sum") if o["output_type"] == "error"]
    assert len(err) == 1 and err[0]["evalue"].startswith(
        "reduce_scatter splits dim 0 into 4 equal chunks (one per rank), but the demo shape 11x11 has 11 rows"
    )
    bench = _outputs(nb, "%mgpu_bench")
    table = text["%mgpu_bench"]
    rows = [line.split() for line in table.splitlines() if re.match(r"\s+\d+\s+\d+\s+float32", line)]
    assert len(rows) == 4 * 6 and all(r[-1] == "0" for r in rows)  # 4 collectives x 6 sizes, #wrong 0
    assert _mime(bench, "application/vnd.plotly.v1+json") and _mime(bench, "image/svg+xml")
    assert "engines stopped" in text["%mgpu_shutdown"]


def test_boxes_hold_their_text_and_split_collectives_are_readable(run):
    seen = run.steps["collectives"]
    assert len(seen["boxes"]) >= 6 and all(b["inside"] for b in seen["boxes"]), seen["boxes"]
    assert all(px >= 9 for px in seen["smallest"]), seen["smallest"]  # no thumbnails


def test_colours_stand_for_ranks_and_the_benchmark_names_no_root_minus_one(run):
    svg = _mime(run.outputs("%mgpu_collective reduce "), "image/svg+xml")[0]
    assert "url(#mgpu-mix-15)" in svg  # rank 0's sum holds every rank's data: stripes of the 4 colours
    assert all(c not in svg for c in ("#9467bd", "#8c564b", "#e377c2", "#17becf"))  # colours of ranks 4-9
    assert " -1 " not in run.text["%mgpu_bench"]


def test_page_is_clean(run):
    assert_page_is_clean(run)
