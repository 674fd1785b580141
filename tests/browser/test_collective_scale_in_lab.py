"""Real-browser test of ``%mgpu_collective all_gather`` on 32 ranks in JupyterLab: shown quickly, legible,
and its schedule player keeps one height while it steps.

collective_scale.mjs runs it in Debian's Chromium on the shared ``lab`` (tests/lab_server.py); screenshots
go to test-artifacts/browser-collective-scale/. Before the player sent only differences, this cell sent
~250 MB to the browser and froze the tab for 10-19 s.
"""

from __future__ import annotations

import pytest
from lab_server import run_script, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

CELLS = [
    "%load_ext jupyter_mgpu\n%mgpu_init 32 --no-dashboard",
    "%mgpu_collective all_gather",
    "%mgpu_shutdown",
]


@pytest.fixture(scope="module")
def measured(lab):
    write_notebook(lab["root"] / "collective_scale.ipynb", CELLS)
    return run_script(lab, "collective_scale.mjs", "browser-collective-scale", 540, notebook="collective_scale.ipynb")


def test_all_gather_on_32_ranks_is_shown_quickly_legibly_and_plays_without_jumping(measured):
    m = measured["measured"]
    assert m["look"]["title"] == "all_gather"
    assert m["shownAfter"] < 20, m  # the figure and the player, from running the cell (was 24-33 s)
    assert m["look"]["width"] <= 860 and m["look"]["smallestText"] >= 8.5, m["look"]  # 9 px, at the shown size
    assert m["steps"] == 32 and m["counters"][-1] == "step 32 / 32"
    assert max(m["heights"]) - min(m["heights"]) <= 1, m["heights"]  # one height for every frame
    assert m["perStep"] < 2, m
    assert measured["done"]["consoleErrors"] == []
