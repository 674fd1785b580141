"""Running a hub browser script (tests/hub/*.mjs) under Node: its JSON-lines steps, read as they come.

A script prints one JSON object per line (``{"step": ...}``) and ends with ``done`` or ``error``; a
step handler may answer on the script's stdin (``hub_lab.mjs`` waits at its ``checkpoint``).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "hub"
CHROMIUM = os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium")


def browser_config(hub, keys: list[str], profiles: Path) -> dict:
    """The scripts' argument: the hub's URL, the users' names, password and Chromium profiles."""
    for need, how in (
        (CHROMIUM, "apt-get install -y chromium"),
        (shutil.which("node"), "install Node.js"),
        (REPO / "node_modules" / "playwright-core", "pip install -e . (runs jlpm install)"),
    ):
        assert need and Path(need).exists(), f"the hub browser tests need {need}: {how}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return {
        "hub": hub.url,
        "chromium": CHROMIUM,
        "artifacts": str(ARTIFACTS),
        "users": {k: {"name": hub.users[k].name, "password": hub.password, "profile": str(profiles / k)} for k in keys},
    }


def _forward(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_script(
    script: Path,
    cfg: dict,
    scratch: Path,
    log_tail: Callable[[], str],
    on_step: Callable[[dict, subprocess.Popen], None] | None = None,
    timeout: float = 540,
) -> dict:
    """Run ``script`` with ``cfg``; returns its steps by name. Fails on an ``error`` step, a non-zero exit or
    ``timeout`` seconds in all; ``on_step(step, process)`` sees every step as it arrives."""
    steps: dict = {}
    with open(scratch / f"{script.stem}.stderr", "w+") as stderr:
        proc = subprocess.Popen(
            ["node", str(script), json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=REPO,
        )
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_forward, args=(proc.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    raise AssertionError(
                        f"{script.name} ran past {timeout:.0f} s; steps so far: {list(steps)}"
                    ) from None
                if line is None:
                    break
                if line.startswith("{"):
                    rec = json.loads(line)
                    steps[rec["step"]] = rec
                    if on_step is not None:
                        on_step(rec, proc)
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            stderr.seek(0)
            errors = stderr.read()[-3000:]
    if "error" in steps:
        raise AssertionError(
            f"{steps['error']['message']}\nsteps: {json.dumps(steps)[-3000:]}\n{errors}\nhub log:\n{log_tail()}"
        )
    assert proc.returncode == 0 and "done" in steps, f"{script.name} exited {proc.returncode}:\n{errors}"
    return steps
