"""Engines' private folders on a home that several hosts may share: each host cleans only its own."""

from __future__ import annotations

import os
import subprocess
import sys

from jupyter_mgpu.engine.startup import launched_setup


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_host_removes_only_its_own_dead_engines_folders(tmp_path):
    mine, dead = launched_setup.host_key(), _dead_pid()
    ours_dead = tmp_path / f"c1-0-{mine}-{dead}"
    ours_alive = tmp_path / f"c1-1-{mine}-{os.getpid()}"
    other_host = tmp_path / f"c1-2-0123456789abcdef-{dead}"  # a live engine elsewhere, with a pid unknown here
    for d in (ours_dead, ours_alive, other_host):
        d.mkdir()
    launched_setup._clean_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([ours_alive.name, other_host.name])
