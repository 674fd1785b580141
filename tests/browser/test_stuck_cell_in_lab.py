"""Real-browser test of "busy is not hung" (issue 34): while rank 0 computes and rank 1 waits in a
barrier, the running cell shows a live status line (after ``--status-after``: 2 s here, 10 by default) saying who runs which line and who waits
where, the Multi-GPU sidebar shows each rank's activity, and both go when the cell ends, which it does
without an error. stuck_cell.mjs drives it in the shared ``lab`` (tests/lab_server.py) with Debian's
Chromium; screenshots go to test-artifacts/browser-stuck/."""

from __future__ import annotations

import pytest
from lab_server import ARTIFACTS, run_script, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CELLS = {
    "init": "%load_ext jupyter_mgpu\n%mgpu_init 2 --no-dashboard --status-after 2",
    "slow": "%%mgpu\nimport time\nif rank == 0:\n    time.sleep(8)\ndist.barrier()\nprint('passed', rank)",
    "shutdown": "%mgpu_shutdown",
}


@pytest.fixture(scope="module")
def steps(lab):
    write_notebook(lab["root"] / "stuck_cell.ipynb", list(CELLS.values()))
    index = {name: i for i, name in enumerate(CELLS)}
    return run_script(lab, "stuck_cell.mjs", "browser-stuck", 240, notebook="stuck_cell.ipynb", cells=index)


def test_a_live_status_line_says_who_runs_and_who_waits(steps):
    s = steps["slow"]
    assert s["status"] is not None, s
    assert s["status"].startswith("mgpu: rank 0 running line 4 of the cell for "), s["status"]
    assert "rank 1 waiting in barrier #" in s["status"], s["status"]
    assert 1500 <= s["statusAfter"] <= 7000, s["statusAfter"]  # not before --status-after, and while rank 0 works


def test_the_sidebar_shows_each_ranks_activity(steps):
    rows = {r["rank"]: r for r in steps["slow"]["rows"]}
    assert rows[1]["activity"].startswith("waiting in barrier #"), rows
    assert rows[0]["activity"].startswith("running line 4 of the cell for "), rows
    assert rows[1]["label"].startswith("rank 1 · cpu:1 · pid ") and rows[1]["shown"] == rows[1]["activity"], rows


def test_the_cell_passes_and_the_status_line_and_activities_go(steps):
    s = steps["slow"]
    end = [t for t in s["end"] if t.strip()]
    assert any("[rank 0] passed 0" in t for t in end) and any("[rank 1] passed 1" in t for t in end), end
    assert not any(t.startswith("mgpu: rank") for t in end), end
    assert all(not r["activity"] for r in s["rowsAfter"]), s["rowsAfter"]


def test_nothing_past_the_cells_edge_and_no_console_errors(steps):
    layout = steps["slow"]["layoutWhile"]
    assert layout["overflow"] == [] and layout["wrapped"] == [], layout
    assert "engines stopped" in steps["done"]["shutdown"]
    assert steps["done"]["consoleErrors"] == []
    assert (ARTIFACTS / "browser-stuck" / "01_status_line.png").stat().st_size > 2000
