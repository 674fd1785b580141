"""Real-browser test of the memory dashboard: bars move while a cell runs, views stay in sync, pause works.

memory_dashboard.mjs drives it in the shared ``lab`` (tests/lab_server.py) with Debian's Chromium, saving
screenshots in test-artifacts/browser-memory/.
"""

from __future__ import annotations

import re

import pytest
from lab_server import run_script, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

CELLS = [
    "%load_ext jupyter_mgpu\n%mgpu_init 2",
    "import jupyter_mgpu as mg\nmg.dashboard()",
    "%%mgpu\nimport time\nif rank == 1:\n    big = torch.ones(2**26)  # 256 MiB of float32\ntime.sleep(9)",
    "%%mgpu\nif rank == 1:\n    del big",
    "%mgpu_shutdown",
]


def mib(text: str) -> float:
    """The first size in a row's text (``443.5 MiB / 8.5 GiB · peak ...``), in MiB."""
    value, unit = re.match(r"([\d.]+) (B|KiB|MiB|GiB)", text).groups()
    return float(value) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 1024}[unit]


@pytest.fixture(scope="module")
def steps(lab):
    write_notebook(lab["root"] / "memory_check.ipynb", CELLS)
    return run_script(lab, "memory_dashboard.mjs", "browser-memory", 360, notebook="memory_check.ipynb")


def test_init_shows_the_dashboard_and_a_second_view(steps):
    before = steps["started"]["before"]
    assert [v["rows"] for v in before] == [2, 2]
    assert before[0]["text"] == before[1]["text"] and before[0]["badge"] == "idle"
    assert before[0]["pause"] == "pause"


def test_bars_move_while_the_cell_is_still_running(steps):
    base = mib(steps["started"]["before"][0]["text"])
    during = steps["during"]["during"]
    grown = [d for d in during if d["running"] and mib(d["views"][0]["text"]) - base > 240]
    assert grown, f"rank 1 never showed +256 MiB while the cell ran: {[d['views'][0]['text'] for d in during]}"
    first = grown[0]
    assert first["views"][0]["badge"] == "busy"
    # both views show the same model (each throttles its own redraws, so a snapshot can catch one a
    # sample ahead of the other; while the cell runs they agree on the grown bar)
    assert any(d["views"][0]["text"] == d["views"][1]["text"] for d in grown), [d["views"] for d in grown]
    assert len({d["views"][0]["line"] for d in during if d["running"]}) > 3  # the timeline scrolls


def test_pause_in_one_view_pauses_every_view(steps):
    p = steps["paused"]
    assert [v["pause"] for v in p["paused1"]] == ["resume", "resume"]
    assert [v["line"] for v in p["paused1"]] == [v["line"] for v in p["paused2"]]  # frozen while paused
    assert p["stillRunning"] is True
    assert [v["pause"] for v in p["resumed"]] == ["pause", "pause"]


def test_freeing_and_shutdown_show(steps):
    base = mib(steps["started"]["before"][0]["text"])
    assert mib(steps["done"]["freed"][0]["text"]) - base < 32
    assert all(v["status"] == "session shut down" for v in steps["done"]["stopped"])
    assert steps["done"]["consoleErrors"] == []
