"""Process checks shared by the tests: which pids a cluster has, waiting until they are gone, and a
machine loaded on purpose."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil


def cluster_pids(session) -> list[int]:
    """Every process of a session's cluster: controller, supervisor, engines and their helpers."""
    c = session.cluster
    pids = [c.controller.pid, c.supervisor.pid, *c.engine_pids.values()]
    for pid in (c.controller.pid, c.supervisor.pid):
        try:
            pids.extend(p.pid for p in psutil.Process(pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return list(dict.fromkeys(pids))


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    """Wait until none of ``pids`` runs; returns those still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.05)
    return alive


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, or a process that ends while it is asked, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextmanager
def busy_machine(per_core: int = 4) -> Iterator[list[int]]:
    """Keep every core busy (``per_core`` spinning processes each, at the tests' own priority) for the block,
    as a shared GPU node is: a load average of 8 on this 2-core machine. All of them are gone afterwards."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(per_core * (os.cpu_count() or 1))
    ]
    try:
        yield [p.pid for p in spinners]
    finally:
        for p in spinners:
            p.kill()
        for p in spinners:
            p.wait(timeout=10)
