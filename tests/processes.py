"""Process checks shared by the tests: which pids a cluster has, and waiting until they are gone."""

from __future__ import annotations

import time

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
