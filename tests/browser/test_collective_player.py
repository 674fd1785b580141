"""Real-browser test of the logical-schedule player: %mgpu_collective in JupyterLab, then its buttons.

Uses the shared ``lab`` fixture (tests/lab_server.py) (a real ``jupyter lab`` on a free loopback port) and Debian's
Chromium through playwright-core. Screenshots go to test-artifacts/browser-player/.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from lab_server import CHROMIUM, REPO
from nbformat.v4 import new_code_cell, new_notebook

ARTIFACTS = REPO / "test-artifacts" / "browser-player"
SCRIPT = Path(__file__).with_name("collective_player.mjs")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def played(lab):
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    root = lab["tmp"] / "root"
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext jupyter_mgpu\n%mgpu_init 3 --no-dashboard"),
            new_code_cell("%mgpu_collective all_reduce --op max --shape 6x6"),
            new_code_cell("%mgpu_shutdown"),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, root / "player_check.ipynb")
    cfg = {
        "url": lab["url"],
        "token": lab["token"],
        "notebook": "player_check.ipynb",
        "artifacts": str(ARTIFACTS),
        "chromium": CHROMIUM,
        "profile": str(lab["tmp"] / "chromium-profile-player"),
    }
    run = subprocess.run(["node", str(SCRIPT), json.dumps(cfg)], capture_output=True, text=True, timeout=360, cwd=REPO)
    steps = {json.loads(x)["step"]: json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")}
    assert "error" not in steps, f"{steps['error']['message']}\nlab log:\n{lab['log'].read_text()[-3000:]}"
    assert run.returncode == 0 and "done" in steps, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return steps


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
