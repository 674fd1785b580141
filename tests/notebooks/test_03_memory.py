"""notebooks/03_memory.ipynb runs top to bottom on a real kernel and shows what its text says."""

import re

from labrun import assert_page_is_clean, notebook_module

WIDGET = "application/vnd.jupyter.widget-view+json"


SHOTS = {
    "01_dashboard": "%mgpu_init",
    "02_allocated": "%%mgpu\nx = torch.ones",
    "03_second_view": "board = mg.dashboard()",
}

pytestmark, run = notebook_module("03_memory.ipynb", SHOTS)


def test_memory_notebook_runs_and_shows_live_memory(run):
    nb, text = run.nb, run.text
    init = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%mgpu_init"))
    assert "mgpu: 4 engines ready" in text["%mgpu_init"]
    assert any(WIDGET in o.get("data", {}) for o in init.outputs), "%mgpu_init showed no dashboard"
    keys = text["import time"]
    for key in ("'rank'", "'time'", "'state'", "'resident_bytes'", "'peak_resident_bytes'", "'budget_bytes'"):
        assert key in keys
    grew = [int(v) for v in re.search(r"grew by \(MiB\): \[([-\d, ]+)\]", text["after = fresh()"]).group(1).split(",")]
    for rank, mib in enumerate(grew):
        assert abs(mib - 64 * (rank + 1)) <= 0.05 * 64 * (rank + 1) + 4, (rank, mib)
    busy = re.search(r"(\d+) samples while rank 0 was busy; the largest showed \+(\d+) MiB", text["s = mg.current()"])
    # 256 MiB, plus the loop's 800 x 800 matrices and the first matmul's library pages
    assert busy and int(busy.group(1)) >= 5 and 250 <= int(busy.group(2)) <= 320
    after_reset = re.search(r"after reset_peak \(MiB\): +\[([-\d, ]+)\]", text["freed = fresh()"]).group(1)
    assert all(int(v) < 16 for v in after_reset.split(","))
    history = text["history = mg.memory_history"]
    assert len(re.findall(r"rank \d: \d+ samples in the last minute", history)) == 4
    board = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("board = mg.dashboard()"))
    assert any(WIDGET in o.get("data", {}) for o in board.outputs)
    assert "4 devices, 2.0 updates a second, states: ['idle', 'idle', 'idle', 'idle']" in text["board.refresh_rate = 2"]
    assert "engines stopped" in text["%mgpu_shutdown"]


def test_page_is_clean(run):
    assert_page_is_clean(run)
