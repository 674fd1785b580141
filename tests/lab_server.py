"""One real JupyterLab for every browser test of a pytest run (the ``lab`` fixture, session scope).

It listens on a free loopback port with a token, serves a temporary root holding copies of
``notebooks/`` and ``benchmarks/`` (05 runs ``%run ../benchmarks/cosine.py``), and keeps its runtime
directory, settings and workspaces private. When the run ends it is stopped, and nothing it started
(kernels, controllers, engines) may outlive it. ``run_script`` runs a browser script (``tests/browser/*.mjs``)
against it, in a page of the worker's one Chromium (:class:`SharedChromium`); ``write_notebook`` puts a notebook
of given cells in its root.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
from held_port import HeldPort
from nbformat.v4 import new_code_cell, new_notebook
from processes import wait_gone

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"  # screenshots for a reviewer; gitignored
BROWSER = REPO / "tests" / "browser"  # the browser scripts (*.mjs)


def procs_naming(text: str) -> list[int]:
    """Pids of the processes whose command line contains ``text``."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(text in a for a in (p.info["cmdline"] or [])):
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def check_browser_tools() -> None:
    """Fail with what to install when Chromium, Node.js or playwright-core is missing."""
    for need, how in (
        (CHROMIUM, "apt-get install -y chromium"),
        (shutil.which("node"), "install Node.js"),
        (REPO / "node_modules" / "playwright-core", "pip install -e . (runs jlpm install)"),
    ):
        assert need and Path(need).exists(), f"the browser tests need {need}: {how}"


class SharedChromium:
    """The worker's one Chromium (``tests/browser/browser_host.mjs``), started on first use and again if it died;
    each browser script connects to it for a page of its own instead of launching a browser and a profile."""

    def __init__(self, tmp: Path) -> None:
        self.profile, self.cache, self.log = tmp / "chromium", tmp / "chromium-cache", tmp / "chromium-host.log"
        self.proc: subprocess.Popen[str] | None = None
        self.cdp = ""

    def endpoint(self) -> str:
        """The running browser's DevTools address (``cfg.cdp`` of the scripts)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        return self.cdp

    def _start(self) -> None:
        arg = {"chromium": CHROMIUM, "profile": str(self.profile), "diskCache": str(self.cache)}
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                ["node", str(BROWSER / "browser_host.mjs"), json.dumps(arg)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=REPO,
            )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("{"):
            self.stop()
            raise AssertionError(f"the shared Chromium did not start: {self.log.read_text()[-3000:]}")
        self.cdp = json.loads(line)["cdp"]

    def stop(self) -> None:
        """End the browser (closing the host's stdin ends it) and check that none of its processes is left."""
        if self.proc is None:
            return
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc.stdout.close()
        self.proc = None
        assert wait_gone(procs_naming(str(self.profile)), timeout=15) == []


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A real JupyterLab shared by the browser tests: ``{url, token, tmp, root, runtime, log}``."""
    check_browser_tools()
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    shutil.copytree(REPO / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(REPO / "benchmarks", root / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    # the kernels' channels are Unix sockets in here (``tests/ipc_kernel.py`` says why), named
    # ``kernel-<uuid>-ipc-<n>``: a short folder keeps them within a socket path's 107 bytes
    runtime = Path(tempfile.mkdtemp(prefix="mgpu-lab-"))
    held, token = HeldPort(), os.urandom(12).hex()  # held until the lab answers on it
    port = held.port
    env = dict(os.environ)
    env.update(
        JUPYTER_RUNTIME_DIR=str(runtime),
        JUPYTER_MGPU_RUNTIME_DIR=str(runtime / "jupyter-mgpu"),
        JUPYTER_MGPU_FORCE_CPU="1",
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        "--ServerApp.open_browser=False",
        "--LabApp.expose_app_in_browser=True",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.user_settings_dir={tmp / 'settings'}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        "--ServerApp.port_retries=0",
        "--KernelManager.transport=ipc",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    # no work on the server that no test looks at, on each of a run's 22 page loads (a notebook or browser script
    # each): JupyterLab's check that its build is current (a node process, about 0.7 s of CPU) and the list of
    # nbconvert's exporters for the export menu and the raw cell's format (each exporter's entry point loaded again,
    # about 0.5 s): the server's CPU per page load fell from 2.1-3.6 s to 1.1-1.4 s (its kernel's start included)
    labconfig = tmp / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(
        json.dumps(
            {
                "buildCheck": False,
                "buildAvailable": False,
                "disabledExtensions": {
                    "@jupyterlab/notebook-extension:export": True,
                    "@jupyterlab/notebook-extension:update-raw-mimetype": True,
                },
            }
        )
    )
    news = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    # every cell attached, so the tests can measure cells outside the viewport (the look is the same);
    # cells record when they ran (metadata.execution), to tell which cell was running when something failed
    tracker = tmp / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none", "recordTiming": true}')
    log = open(tmp / "lab.log", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    shutil.rmtree(runtime, ignore_errors=True)
                    raise AssertionError(
                        f"jupyter lab did not start: {(tmp / 'lab.log').read_text()[-3000:]}"
                    ) from None
                time.sleep(0.3)
    finally:
        held.release()
    browser = SharedChromium(tmp)
    try:
        yield {
            "url": url,
            "token": token,
            "tmp": tmp,
            "root": root,
            "runtime": runtime,
            "log": tmp / "lab.log",
            "chromium": browser,
        }
    finally:
        try:
            browser.stop()
        finally:  # the lab ends, and its folder goes, even when a browser process was left
            _stop_lab(proc, runtime)
            log.close()


def _stop_lab(proc: subprocess.Popen[bytes], runtime: Path) -> None:
    """End the lab and check that nothing it started (kernel, controller, supervisor, engines) outlives it."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    try:
        assert wait_gone(procs_naming(str(runtime)), timeout=15) == []
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def write_notebook(path: Path, cells: list[str]) -> None:
    """A notebook of ``cells`` (code cells) on the ``python3`` kernel at ``path`` (in the lab's root)."""
    nb = new_notebook(
        cells=[new_code_cell(c) for c in cells],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, path)


def run_script(lab: dict[str, Any], script: str, artifacts: str, timeout: float, **cfg: Any) -> dict[str, Any]:
    """Run the browser script ``tests/browser/<script>`` on ``lab`` under Node; returns its JSON-lines steps by name.

    ``test-artifacts/<artifacts>/`` (for its screenshots, and ``steps.json``) is emptied first. The script's JSON
    argument is ``cfg`` plus ``url``, ``token``, ``artifacts``, ``chromium`` and ``cdp``, the worker's running
    Chromium, whose profile keeps the HTTP and compiled-code cache warm for every run on this lab (JupyterLab's
    assets are immutable: a warm cache loads its page in about 1.5 s of the renderer's time instead of 2.1,
    measured). Fails on an ``error`` step (with its console errors and the
    lab's log), a non-zero exit or no ``done`` step; the run may take ``timeout`` seconds.
    """
    folder = ARTIFACTS / artifacts
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    arg = {
        "url": lab["url"],
        "token": lab["token"],
        "artifacts": str(folder),
        "chromium": CHROMIUM,
        "cdp": lab["chromium"].endpoint(),
        **cfg,
    }
    run = subprocess.run(
        ["node", str(BROWSER / script), json.dumps(arg)], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    steps: dict[str, Any] = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            steps[rec["step"]] = rec
    (folder / "steps.json").write_text(json.dumps(steps, indent=1))
    assert "error" not in steps, (
        f"{steps['error']['message']}\nconsole: {steps['error'].get('consoleErrors')}\n"
        f"lab log:\n{lab['log'].read_text()[-3000:]}"
    )
    assert run.returncode == 0 and "done" in steps, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return steps
