"""Shared fixtures: real clusters of CPU virtual devices, started once per world size and always stopped."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from lab_server import lab  # noqa: F401  (the one JupyterLab the browser tests share)
from processes import cluster_pids, wait_gone

os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under `-n` (addopts); None in a serial run (-n 0)

# tiers slow by nature, marked `slow` as a whole here (the one place): a browser and the shared JupyterLab,
# a JupyterHub, namespace hosts; a test elsewhere that is over 20 s, or too long for the quick tier's 3 minutes,
# carries `@pytest.mark.slow` itself (tests/README.md)
SLOW_TIERS = ("browser", "notebooks", "hub", "multihost")
HERE = Path(__file__).resolve().parent


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers on a 2-core machine (the suite waits on engines, kernels and browsers about
    half its time), up to four on bigger ones; ``PYTEST_XDIST_AUTO_NUM_WORKERS`` or ``-n N`` overrides,
    ``-n 0`` runs serially."""
    wanted = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(wanted) if wanted else max(2, min(4, (os.cpu_count() or 2) // 2))


def _tier(item: pytest.Item) -> str:
    path = Path(item.path).resolve()
    return path.relative_to(HERE).parts[0] if path.is_relative_to(HERE) else ""


@pytest.hookimpl(tryfirst=True)  # before xdist's own choice
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadscope`` (addopts): whole groups to a worker, longest tiers first (``worker_groups.py``)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from worker_groups import TierScheduling

    return TierScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under a slow tier's directory ``slow`` (``-m "not slow"`` is the quick tier); on a
    worker, put the longest tiers first (``worker_groups.FIRST``)."""
    for item in items:
        if _tier(item) in SLOW_TIERS:
            item.add_marker(pytest.mark.slow)
    if WORKER:
        from worker_groups import first

        items.sort(key=lambda i: first(_tier(i)))


@pytest.hookimpl(tryfirst=True)  # on the controller too, before the workers start
def pytest_sessionstart(session: pytest.Session) -> None:
    """Build the allocator shim before any cluster starts, as installing ahead of time would: a cluster
    started while it is still compiling uses the OS limit for all its ranks, and the shared clusters
    live for the whole run (the first-start test checks that path with a cache of its own).

    The test process stands in for a kernel, whose stop button raises KeyboardInterrupt: a suite started
    in the background by a shell without job control (``pytest &`` in a script) inherits SIGINT ignored,
    and the stop-button tests would wait for an interrupt that never comes."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _compile_the_package()
    if os.environ.get("JUPYTER_MGPU_BUDGET_SHIM", "1") == "0":
        return
    from jupyter_mgpu.engine.shards import allocator_budget

    try:
        allocator_budget.build()
    except allocator_budget.BuildError:
        pass  # no compiler: every cluster says it uses the OS limit, and the tests that need the shim say so


def _compile_the_package() -> None:
    """The package's bytecode, written once, as pip writes it for what it installs but not for an editable
    install: with PYTHONDONTWRITEBYTECODE set no process writes it, and every kernel, controller and supervisor
    the suite starts compiled the modules it imports from source again (~0.1-0.3 s of CPU each)."""
    import compileall

    import jupyter_mgpu

    compileall.compile_dir(Path(jupyter_mgpu.__file__).parent, quiet=1, workers=1)


@pytest.fixture(scope="session")
def cluster_pool():
    """``cluster_pool(n)``: a shared n-rank session (timeout 5 s), started on first use.

    Tests must leave pool sessions usable; a test that restarts or kills engines uses
    :func:`own_session` instead.
    """
    from jupyter_mgpu.session.lifecycle import start_session

    pool = {}

    def get(n: int):
        if n not in pool or _unusable(pool[n]) is not None:
            if n in pool and pool[n].alive:  # a test that failed left it so: that test's failure says why
                pool[n].shutdown()
            pool[n] = start_session(n, cpu=True, timeout=5)
        return pool[n]

    yield get
    pids = [p for s in pool.values() for p in cluster_pids(s)]
    for s in pool.values():
        s.shutdown()
    assert wait_gone(pids) == []


def _unusable(s) -> str | None:
    """Why a pool session can serve no more tests (shut down, broken, a rank dead), or None: a test that broke
    it fails itself, and the tests after it get a new one rather than failing one after another."""
    if not s.alive:
        return "shut down"
    failure = s.broken or s.cluster.infrastructure_failure()
    if failure:
        return f"broken ({failure})"
    dead = s.cluster.exits()
    return f"ranks {sorted(dead)} ended" if dead else None


def _make_current(s):
    import jupyter_mgpu.session.lifecycle as sm

    sm._current = s
    return s


@pytest.fixture
def s4(cluster_pool):
    """The shared 4-rank session, made current."""
    return _make_current(cluster_pool(4))


@pytest.fixture
def s2(cluster_pool):
    """The shared 2-rank session, made current."""
    return _make_current(cluster_pool(2))


@pytest.fixture
def session_of(cluster_pool):
    """``session_of(n)``: the shared n-rank session, made current."""
    return lambda n: _make_current(cluster_pool(n))


@contextmanager
def own_session_cm(n: int = 2, **kwargs):
    import jupyter_mgpu.session.lifecycle as sm

    saved = sm._current
    sm._current = None
    s = None
    try:
        s = sm.init(n, cpu=True, **{"timeout": 5, **kwargs})
        yield s
    finally:
        if s is not None:
            pids = cluster_pids(s)
            s.shutdown()
            assert wait_gone(pids) == []
        sm._current = saved


@pytest.fixture
def own_session():
    """``with own_session(n, **init_kwargs) as s:`` a private session, current inside the block."""
    return own_session_cm
