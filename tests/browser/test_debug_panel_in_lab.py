"""Real-browser test of JupyterLab's debugger panel across the ranks (issue 35): a gutter breakpoint in a
``%%mgpu`` cell stops the ranks; the panel shows the stopped rank as the frame's thread, its frame in the
cell and that rank's own variables; continue shows the other rank; continue again finishes the cell.
debug_panel.mjs drives it in the shared ``lab`` (tests/lab_server.py) with Debian's Chromium; screenshots
go to test-artifacts/browser-debug-panel/."""

from __future__ import annotations

import pytest
from lab_server import ARTIFACTS, run_script, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CELLS = {
    "init": "%load_ext jupyter_mgpu\n%mgpu_init 2 --no-dashboard",
    "cell": "%%mgpu\nsecret = rank * 10 + 3\ndoubled = secret * 2\ndoubled",
    "shutdown": "%mgpu_shutdown",
}


@pytest.fixture(scope="module")
def steps(lab):
    write_notebook(lab["root"] / "debug_panel.ipynb", list(CELLS.values()))
    index = {name: i for i, name in enumerate(CELLS)}
    return run_script(lab, "debug_panel.mjs", "browser-debug-panel", 240, notebook="debug_panel.ipynb", cells=index)


def _values(view: dict) -> dict[str, str]:
    return {v["name"]: v["value"] for v in view["variables"]}


def test_a_gutter_breakpoint_stops_a_rank_and_the_panel_shows_its_frame_and_values(steps):
    assert steps["breakpoint"]["breakpoints"] == ["3"]
    first = steps["first"]
    assert first["frames"][0]["name"] == f"rank {first['rank']} · <module>", first
    values = _values(first)
    assert values["secret"] == str(first["rank"] * 10 + 3), values
    assert values["rank"] == str(first["rank"]) and "doubled" not in values


def test_continue_shows_the_other_rank_then_finishes_the_cell(steps):
    first, second = steps["first"], steps["second"]
    assert {first["rank"], second["rank"]} == {0, 1}
    assert _values(second)["secret"] == str(second["rank"] * 10 + 3)
    finished = steps["finished"]
    assert finished["count"] is not None
    assert "6" in finished["text"] and "26" in finished["text"], finished


def test_no_console_errors_and_nothing_past_the_cells_edge(steps):
    layout = steps["first"]["layout"]
    assert layout["overflow"] == [], layout
    assert "engines stopped" in steps["done"]["shutdown"]
    assert steps["done"]["consoleErrors"] == []
    assert (ARTIFACTS / "browser-debug-panel" / "01_stopped.png").stat().st_size > 2000
