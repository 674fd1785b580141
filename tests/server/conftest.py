"""Fixtures for the server-extension tests: pytest-jupyter's server fixtures, a private runtime dir,
and fake-but-real clusters (a state file, telemetry, and real sleeper processes naming the dir)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (jp_fetch, jp_serverapp, async test hooks)
from server_fakes import FakeClusters


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"jupyter_mgpu": True}}}


@pytest.fixture
def mgpu_root(tmp_path, monkeypatch) -> Path:
    """This test's ``jupyter-mgpu`` runtime directory (mode 0700), used by rundir.base_dir()."""
    root = tmp_path / "runtime" / "jupyter-mgpu"
    root.mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("JUPYTER_MGPU_RUNTIME_DIR", str(root))
    return root


@pytest.fixture
def fake_clusters(mgpu_root):
    fc = FakeClusters(mgpu_root)
    yield fc
    fc.close()
