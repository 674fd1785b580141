"""notebooks/04_placement.ipynb runs top to bottom on a real kernel and shows what its text says."""

import os
import re

import pytest

from nbrun import NOTEBOOKS, by_source, execute_notebook

pytestmark = pytest.mark.notebook

WIDGET = "application/vnd.jupyter.widget-view+json"


def test_placement_notebook_runs_shows_views_and_traces():
    out = NOTEBOOKS / "ring_matmul.html"
    if out.exists():
        out.unlink()
    try:
        nb = execute_notebook("04_placement.ipynb")
        text = by_source(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        rich = next(c for c in code if c.source.startswith("A = mg.randn"))
        html = rich.outputs[0]["data"]["text/html"]
        assert "mgpu-tile" in html and "B(2x2)" in html  # the diagram and the text summary
        for prefix in ("mg.show(A)", "T = mg.randn", "from jupyter_mgpu.widgets.placement import side_by_side"):
            cell = next(c for c in code if c.source.startswith(prefix))
            data = cell.outputs[0]["data"]
            assert WIDGET in data and "<svg" in data.get("text/html", "") + data.get("image/svg+xml", "")
        counts = dict(re.findall(r"(\w+) +(\d+) events", text["from jupyter_mgpu.ops.matmul_plan"]))
        assert set(counts) == {"row", "ring", "summa"} and int(counts["ring"]) > int(counts["row"])
        assert text["from jupyter_mgpu import trace_replay"].count("real placement: True") == 3
        table = {m[0]: [float(x) for x in m[1:]] for m in
                 re.findall(r"^(\w+) +([\d.]+) MiB +([\d.]+) MiB +([\d.]+) MiB", text["MiB = 2**20"], re.M)}
        assert table["row"][0] > table["ring"][0] and table["row"][0] > table["summa"][0]
        assert table["row"][2] == 0 and table["ring"][2] > 0 and table["summa"][2] > 0
        assert out.exists() and os.path.getsize(out) > 5000
        live = next(c for c in code if c.source.startswith("from IPython.display import display"))
        assert any(WIDGET in o.get("data", {}) for o in live.outputs)
        assert int(re.search(r"(\d+) events", text["from IPython.display import display"]).group(1)) > 50
        assert "engines stopped" in text["mg.shutdown()"] or text["mg.shutdown()"] == ""
    finally:
        if out.exists():
            out.unlink()
