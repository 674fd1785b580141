"""Real-browser test of JupyterLab's debugger panel across the ranks (issues 35 and 45): a gutter breakpoint
in a ``%%mgpu`` cell stops the ranks; the panel shows the stopped rank as the frame's thread, its frame in
the cell and that rank's own variables; continue shows the other rank; continue again finishes the cell.
On the same kernel: a breakpoint clicked in a ``.py`` file open in the file editor (a module a cell
imports) stops every rank there, the debug console evaluates on the shown rank, and the "Continue all
ranks" button finishes the cell; a condition ``rank == 1`` stops rank 1 alone; a breakpoint clicked in a
``%mgpu_run`` script's file stops each rank there. debug_panel.mjs drives it in the shared ``lab``
(tests/lab_server.py) with Debian's Chromium; screenshots go to test-artifacts/browser-debug-panel/."""

from __future__ import annotations

import pytest
from lab_server import ARTIFACTS, run_script, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(400)]

HELPER = "mgpu_dbg_helper.py"  # line 3 holds the breakpoint: ``out`` is 7 * (rank + 1) there
SCRIPT = "mgpu_dbg_script.py"  # line 4 holds the breakpoint: ``value`` is rank + 40 there
HELPER_TEXT = "def scaled(v):\n    out = v * 7\n    return out\n"
SCRIPT_TEXT = "import os\nrank = int(os.environ['RANK'])\nvalue = rank + 40\nprint('done', value)\n"


@pytest.fixture(scope="module")
def steps(lab):
    root = lab["root"]
    (root / HELPER).write_text(HELPER_TEXT)
    (root / SCRIPT).write_text(SCRIPT_TEXT)
    cells = {
        "init": "%load_ext jupyter_mgpu\n%mgpu_init 2 --no-dashboard",
        "cell": "%%mgpu\nsecret = rank * 10 + 3\ndoubled = secret * 2\ndoubled",
        # the barrier: both ranks reach the file's breakpoint together, so "Continue all" finds both stopped
        "helper": (
            f"%%mgpu\nimport sys\nimport torch.distributed as dist\nsys.path.insert(0, {str(root)!r})\n"
            "import mgpu_dbg_helper\ndist.barrier()\nmgpu_dbg_helper.scaled(rank + 1)"
        ),
        "script": f"%mgpu_run {root / SCRIPT}",
        "shutdown": "%mgpu_shutdown",
    }
    write_notebook(root / "debug_panel.ipynb", list(cells.values()))
    index = {name: i for i, name in enumerate(cells)}
    return run_script(
        lab,
        "debug_panel.mjs",
        "browser-debug-panel",
        360,
        notebook="debug_panel.ipynb",
        cells=index,
        files={"helper": HELPER, "script": SCRIPT},
        paths={"helper": str(root / HELPER), "script": str(root / SCRIPT)},
    )


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


def test_a_breakpoint_clicked_in_a_py_files_gutter_stops_the_ranks_in_that_file(steps):
    assert steps["file_breakpoint"]["breakpoints"][-1].endswith(f"/{HELPER}3")  # the file's path, its line
    stop = steps["file_stop"]
    rank = stop["rank"]
    assert stop["frames"][0]["name"] == f"rank {rank} · scaled", stop["frames"]
    assert stop["frames"][0]["location"].endswith(f"/{HELPER}:3")  # the panel shows the file's line
    assert _values(stop)["out"] == str(7 * (rank + 1)), stop["variables"]
    assert stop["highlight"] == "    return out"  # the file editor shows the stopped line


def test_the_debug_console_evaluates_on_the_shown_rank(steps):
    stop, script = steps["file_stop"], steps["script"]["stops"]
    assert stop["value"] == str(7 * (stop["rank"] + 1)), stop["value"]  # ``out`` of that rank's frame
    # the same expression, one value per rank
    assert {s["rank"]: s["value"] for s in script} == {0: "40", 1: "41"}


def test_continue_all_ranks_is_a_button_of_the_callstack_and_finishes_the_cell(steps):
    idle = steps["file_breakpoint"]["button"]
    assert idle is not None and idle["title"].startswith("Continue all ranks") and not idle["enabled"], idle
    assert idle["nextTo"] == "debugger:continue"  # right after JupyterLab's own Continue
    assert steps["file_stop"]["button"]["enabled"]
    done = steps["continued_all"]  # one click: both ranks went on, the cell ended with both values
    assert done["count"] is not None and "7" in done["text"] and "14" in done["text"], done
    assert not done["button"]["enabled"] and done["frames"] == []


def test_a_condition_rank_1_stops_rank_1_alone(steps):
    cond = steps["conditional"]
    assert cond["sent"] is True
    assert cond["rank"] == 1 and cond["frames"][0]["name"] == "rank 1 · scaled", cond["frames"]
    assert cond["value"] == "14"
    # one Continue ended the cell: rank 0 never stopped
    assert cond["count"] is not None and "14" in cond["text"], cond


def test_a_breakpoint_clicked_in_a_scripts_file_stops_each_rank_there(steps):
    script = steps["script"]
    assert script["breakpoints"][-1].endswith(f"/{SCRIPT}4")
    for stop in script["stops"]:
        assert stop["frames"][0]["location"].endswith(f"/{SCRIPT}:4"), stop["frames"]
        assert _values(stop)["value"] == str(stop["rank"] + 40)
    assert script["stops"][0]["highlight"] == "print('done', value)"
    assert "done 40" in script["text"] and "done 41" in script["text"], script


def test_no_console_errors_and_nothing_past_the_cells_edge(steps):
    assert steps["first"]["layout"]["overflow"] == [], steps["first"]["layout"]
    assert steps["layout"]["overflow"] == [], steps["layout"]
    assert "engines stopped" in steps["done"]["shutdown"]
    assert steps["done"]["consoleErrors"] == []
    for shot in ("01_stopped", "03_stopped_in_file", "04_conditional", "05_stopped_in_script"):
        assert (ARTIFACTS / "browser-debug-panel" / f"{shot}.png").stat().st_size > 2000
