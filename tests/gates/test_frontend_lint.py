"""Lint gate for the frontend code: ``jlpm lint:check`` (prettier, then eslint) must pass.

It covers the TypeScript labextension (``labextension/``), the anywidget front ends
(``jupyter_mgpu/widgets/static/*.js``: browser globals, and in the players the transport's globals, since
Python prepends ``transport.js`` to them) and the browser tests' Node scripts (``tests/browser/**/*.mjs``).
The config lives in package.json (``prettier``, ``eslintConfig`` with one override per file group,
``eslintIgnore``); ``jlpm lint`` fixes what the tools can fix. node_modules comes from
``pip install -e .``, which runs ``jlpm install``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _jlpm() -> str | None:
    """jlpm next to this Python (the venv need not be activated), else the one on PATH."""
    beside = Path(sys.executable).parent / "jlpm"
    return str(beside) if beside.exists() else shutil.which("jlpm")


def test_labextension_passes_prettier_and_eslint():
    assert shutil.which("node"), "the frontend lint needs Node.js"
    jlpm = _jlpm()
    assert jlpm, "jlpm is missing: it comes with jupyterlab (pip install -e '.[test]')"
    bins = REPO / "node_modules" / ".bin"
    missing = [tool for tool in ("eslint", "prettier") if not (bins / tool).exists()]
    assert not missing, (
        f"node_modules lacks {', '.join(missing)}: pip install -e . runs jlpm install (or run jlpm install)"
    )
    # lint:check calls jlpm again from its script: the folder holding jlpm must be on PATH
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(jlpm).parent), os.environ.get("PATH", "")]))
    run = subprocess.run(
        [jlpm, "lint:check"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
    )
    if run.returncode != 0:
        pytest.fail(
            f"jlpm lint:check failed (rc {run.returncode}); `jlpm lint` fixes the formatting and what "
            f"eslint can fix:\n{run.stdout.strip()[-6000:]}",
            pytrace=False,
        )
