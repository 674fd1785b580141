"""Real-browser test of the logical-schedule player: %mgpu_collective in JupyterLab, then its buttons.

collective_player.mjs plays it in Debian's Chromium on the shared ``lab`` (tests/lab_server.py); screenshots go
to test-artifacts/browser-player/.
"""

from __future__ import annotations

import pytest
from lab_server import run_script, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

CELLS = [
    "%load_ext jupyter_mgpu\n%mgpu_init 3 --no-dashboard",
    "%mgpu_collective all_reduce --op max --shape 6x6",
    "%mgpu_shutdown",
]


@pytest.fixture(scope="module")
def played(lab):
    write_notebook(lab["root"] / "player_check.ipynb", CELLS)
    return run_script(lab, "collective_player.mjs", "browser-player", 360, notebook="player_check.ipynb")


def test_player_steps_plays_to_the_end_and_steps_back(played):
    s = played["played"]
    assert s["figure"] == "all_reduce (op max)"
    # 3 ranks: ring all_reduce = 2 reduce-scatter + 2 all-gather steps after the inputs → frames 0..4
    assert s["first"]["counter"] == "step 0 / 4" and "logical schedule" in s["first"]["badge"]
    assert s["first"]["svgTitle"].startswith("all_reduce (op max) — logical schedule, step 0/4")
    assert s["stepped"]["counter"] == "step 1 / 4" and s["stepped"]["svgTitle"].endswith("step 1/4")
    assert s["stepped"]["caption"].startswith("reduce-scatter step 1/2")
    assert s["sawPause"] is True  # while playing the button reads pause
    assert s["end"]["counter"] == "step 4 / 4" and s["end"]["caption"].startswith("all-gather step 2/2")
    assert s["end"]["play"] == "▶"  # playing stops at the last frame
    assert s["back"]["counter"] == "step 3 / 4" and s["back"]["slider"] == "3"
    assert played["done"]["consoleErrors"] == []
