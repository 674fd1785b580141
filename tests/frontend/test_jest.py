"""Runs the labextension's jest unit tests (formatting, payload parsing, sparkline scaling) from pytest."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_frontend_unit_tests_pass():
    jest = REPO / "node_modules" / "jest" / "bin" / "jest.js"
    node = shutil.which("node")
    assert node, "the frontend tests need Node.js"
    assert jest.exists(), "node_modules is missing: pip install -e . runs jlpm install (or run jlpm install)"
    run = subprocess.run(
        [node, str(jest), "--config", "labextension/jest.config.js", "--ci"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert "Tests:" in run.stderr and " failed" not in run.stderr
