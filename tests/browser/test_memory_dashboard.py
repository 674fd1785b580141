"""Real-browser test of the memory dashboard: bars move while a cell runs, views stay in sync, pause works,
every badge reads "shut down" after ``%mgpu_shutdown``, and 64 ranks (synthetic samples) fit the cell.

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
    # rank 1 killed, then started again: the sidebar says restarting, then idle; the dashboard marks it
    "import os, signal, time\ns = mg.current()\nos.kill(s.cluster.engine_pids[1], signal.SIGKILL)\n"
    "t0 = time.monotonic()\nwhile 1 not in s.cluster.exits() and time.monotonic() - t0 < 10:\n    time.sleep(0.05)",
    "%mgpu_restart --rank 1",
    # the sidebar's stack view while rank 1 naps in a function and rank 0 is idle
    "%%mgpu --noblock\nimport time\ndef nap():\n    time.sleep(4 if rank == 1 else 0)\nnap()",
    "%mgpu_shutdown",
    # 64 ranks on 4 hosts, a minute of samples in the telemetry record's format: no cluster needed
    "import time\nfrom jupyter_mgpu.widgets.memory_dashboard import MemoryDashboard\n"
    "big = MemoryDashboard(detached=True)\nt0 = time.time() - 60\nfor i in range(121):\n"
    "    t = t0 + i / 2\n"
    "    big.update([{'rank': r, 'time': t, 'kind': 'cpu', 'device': f'cpu:{r % 16}', 'host': f'node{r // 16 + 1}',\n"
    "                 'state': 'busy' if r % 16 == 3 else 'idle', 'resident_bytes': 2**30 + r * 2**20 + i * 2**18,\n"
    "                 'peak_resident_bytes': 2**31, 'budget_bytes': 2**32, 'baseline_resident_bytes': 2**28}\n"
    "                for r in range(64)], now=t)\n"
    "big.title = '64 × cpu · synthetic'\nbig",
]


def mib(text: str) -> float:
    """The first size in a row's text (``443.5 MiB / 8.5 GiB · peak ...``), in MiB."""
    value, unit = re.match(r"([\d.]+) (B|KiB|MiB|GiB)", text).groups()
    return float(value) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 1024}[unit]


@pytest.fixture(scope="module")
def steps(lab):
    write_notebook(lab["root"] / "memory_check.ipynb", CELLS)
    # the sidebar's fastest refresh (0.2 s) for this page, so a restart of about a second is seen in it
    plugin = lab["tmp"] / "settings" / "jupyter-mgpu" / "plugin.jupyterlab-settings"
    plugin.parent.mkdir(parents=True, exist_ok=True)
    plugin.write_text('{"refreshRate": 0.2}')
    try:
        return run_script(lab, "memory_dashboard.mjs", "browser-memory", 360, notebook="memory_check.ipynb")
    finally:
        plugin.unlink()


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


def test_a_restarted_rank_reads_restarting_then_idle_and_its_timeline_marks_the_restart(steps):
    r = steps["restarted"]
    # every state the sidebar's and the dashboard's rank 1 showed, repeats dropped (the dashboard reads the
    # telemetry every 0.1 s and sees the death; the sidebar's 0.2 s snapshots may miss the moment between)
    sidebar = [x for i, x in enumerate(r["sidebarStates"]) if i == 0 or x != r["sidebarStates"][i - 1]]
    board = [x for i, x in enumerate(r["dashboardBadges"]) if i == 0 or x != r["dashboardBadges"][i - 1]]
    assert "restarting" in sidebar and sidebar[-1] == "idle", sidebar
    assert board.index("dead") < board.index("restarting") < len(board) - 1 and board[-1] == "idle", board
    assert [v["badge"] for v in r["after"]] == ["idle", "idle"]
    assert [len(v["marks"]) for v in r["after"]] == [1, 1]  # on rank 1's timeline, in both views
    assert all(m.startswith("rank 1 restarted at ") for v in r["after"] for m in v["marks"]), r["after"]
    assert r["noMarksOnRank0"] is True
    assert "rank 1 started again in " in r["output"], r["output"]


def test_the_sidebar_s_where_button_draws_every_rank_s_frames_as_one_tree(steps):
    w = steps["where"]
    assert w["caption"].startswith("where ranks 0, 1 are, at "), w
    lines = [(depth, frame, ranks) for depth, frame, ranks in w["lines"]]
    assert (0, "idle", "rank 0") in lines, lines
    assert any(depth >= 1 and "nap()" in frame and ranks == "rank 1" for depth, frame, ranks in lines), lines
    assert w["wide"] == 0, w  # nothing past the sidebar's edge


def test_freeing_and_shutdown_show(steps):
    base = mib(steps["started"]["before"][0]["text"])
    assert mib(steps["done"]["freed"][0]["text"]) - base < 32
    assert [v["badges"] for v in steps["done"]["freed"]] == [["idle", "idle"]] * 2
    stopped = steps["done"]["stopped"]
    assert all(v["status"] == "session shut down" for v in stopped)
    # no live-looking "idle" is left once the engines are gone
    assert [v["badges"] for v in stopped] == [["shut down", "shut down"]] * 2, stopped
    assert steps["done"]["consoleErrors"] == []


def test_64_ranks_fold_by_host_and_fit_the_cell(steps):
    big = steps["big"]
    folded, opened, narrow = big["folded"], big["opened"], big["narrow"]
    assert [g["host"] for g in folded["groups"]] == ["node1", "node2", "node3", "node4"]
    assert not any(g["open"] for g in folded["groups"])
    assert folded["groups"][0]["summary"].startswith("node1 · 16 ranks · 1 busy · 15 idle · ")
    assert folded["rows"] == 64 and folded["shownRows"] == 0  # each rank once, folded under its host
    assert folded["height"] < 250, folded  # four summary lines, not 64 rows
    # two hosts opened (and still open after redraws): 32 rows, in a list of bounded height that scrolls
    assert [g["open"] for g in opened["groups"]] == [True, True, False, False]
    assert opened["shownRows"] == 32 and opened["rowHeight"] <= 24, opened  # a line each
    assert opened["listHeight"] <= 421 and opened["listScroll"] > opened["listHeight"], opened
    for layout in (folded, opened, narrow):  # nothing wider than the cell, wide or narrow
        assert layout["wide"] == 0 and layout["scrollWidth"] <= layout["clientWidth"] + 1, layout
        assert layout["widgetWidth"] <= layout["outputWidth"] + 1, layout
    assert narrow["outputWidth"] < folded["outputWidth"]
