"""Real-browser test of Tab in ``%%mgpu`` cells: JupyterLab's completer lists names only rank 0 has.

rank_completion.mjs drives it in the shared ``lab`` (tests/lab_server.py) with Debian's Chromium, saving
screenshots in test-artifacts/browser-completion/. The names are made without their text appearing in
the notebook, so no completer but the ranks' can know them.
"""

from __future__ import annotations

import pytest
from lab_server import run_script, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CELLS = [
    "%load_ext jupyter_mgpu\n%mgpu_init 2 --no-dashboard",
    "%%mgpu\nglobals()['only_on_' + 'ranks_xyz'] = 1\nglobals()['only_on_' + 'ranks_abc'] = 2\nprint('defined')",
    "",
    "%mgpu_shutdown",
]


@pytest.fixture(scope="module")
def steps(lab):
    write_notebook(lab["root"] / "rank_completion.ipynb", CELLS)
    return run_script(lab, "rank_completion.mjs", "browser-completion", 240, notebook="rank_completion.ipynb")


def test_the_ranks_defined_the_names(steps):
    assert "[rank 0] defined" in steps["started"]["defined"]


def test_tab_in_an_mgpu_cell_lists_names_only_rank_0_has(steps):
    s = steps["mgpu"]
    assert s["shown"] is True, s
    assert {"only_on_ranks_xyz", "only_on_ranks_abc"} <= set(s["items"]), s["items"]
    assert s["source"].startswith("%%mgpu\nonly_on_r")
    assert s["ms"] < 2000


def test_tab_in_a_plain_cell_does_not(steps):
    s = steps["plain"]
    assert not {"only_on_ranks_xyz", "only_on_ranks_abc"} & set(s["items"]), s["items"]
    assert s["source"] == "only_on_r"


def test_shut_down_without_console_errors(steps):
    assert "engines stopped" in steps["done"]["shutdown"]
    assert steps["done"]["consoleErrors"] == []
