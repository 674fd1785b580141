"""The installed package ships the labextension and enables the server extension; versions agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jupyter_mgpu

REPO = Path(__file__).resolve().parents[2]


def test_python_and_labextension_versions_agree():
    package = json.loads((REPO / "package.json").read_text())
    assert jupyter_mgpu.__version__ == package["version"]
    from importlib.metadata import version

    assert version("jupyter_mgpu") == package["version"]


def _jupyter(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "jupyter", *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout + run.stderr


def test_labextension_is_installed_and_ok():
    out = _jupyter("labextension", "list")
    line = next((ln for ln in out.splitlines() if "jupyter-mgpu" in ln), "")
    assert "enabled" in line and "OK" in line, out


def test_server_extension_is_enabled_and_ok():
    out = _jupyter("server", "extension", "list")
    lines = [ln for ln in out.splitlines() if "jupyter_mgpu" in ln]
    assert any("enabled" in ln for ln in lines), out
    assert any("OK" in ln for ln in lines), out


def test_extension_entry_points():
    assert jupyter_mgpu._jupyter_server_extension_points() == [{"module": "jupyter_mgpu.server"}]
    from jupyter_mgpu import server

    assert callable(server._load_jupyter_server_extension)
    built = Path(jupyter_mgpu.__file__).parent / "labextension" / "package.json"
    assert json.loads(built.read_text())["name"] == "jupyter-mgpu"
