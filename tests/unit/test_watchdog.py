"""The kernel watchdog (``engine/startup/watchdog.py``): a process of the cluster ends when the kernel
does, whether it waits on a pidfd or polls, not before (a step of the wall clock included), and a watcher
started on a pid already gone ends at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from jupyter_mgpu import rundir
from jupyter_mgpu.engine.startup import watchdog

WATCHER = textwrap.dedent(
    """
    import sys, time
    from jupyter_mgpu.engine.startup import watchdog
    if sys.argv[3] == "poll":
        watchdog._open_pidfd = lambda pid: None
    if sys.argv[3] == "stepped":  # the wall clock stepped 1 s since the kernel's start was read
        import psutil
        booted = psutil._psplatform.boot_time
        psutil._psplatform.boot_time = psutil.boot_time = lambda: booted() + 1.0
    watchdog.start(int(sys.argv[1]), float(sys.argv[2]), on_gone=lambda: print("gone", flush=True), period=0.1)
    print("watching", flush=True)
    time.sleep(60)
    """
)


def _watch(pid: int, create_time: float, how: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WATCHER, str(pid), repr(create_time), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("how", ["pidfd", "poll", "stepped"])
def test_a_watched_process_ends_soon_after_the_kernel(how: str) -> None:
    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watcher = _watch(kernel.pid, rundir.process_start(kernel.pid), how)
    try:
        assert watcher.stdout is not None and watcher.stdout.readline().strip() == "watching"
        time.sleep(0.3)
        assert watcher.poll() is None  # the kernel runs: the watcher stays
        kernel.kill()
        kernel.wait()
        assert watcher.wait(timeout=5) == 3
        assert watcher.stdout.read().strip() == "gone"
    finally:
        for p in (kernel, watcher):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_reused_pid_counts_as_the_kernel_gone() -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # the same pid, but not the kernel's start time: not the kernel
        watcher = _watch(other.pid, rundir.process_start(other.pid) - 100, "pidfd")
        assert watcher.wait(timeout=5) == 3
        assert watcher.stderr is not None  # the last words a cluster ended while starting quotes
        said = watcher.stderr.read().strip().splitlines()[-1]
        assert said == f"jupyter_mgpu: the kernel this process serves (pid {other.pid}) has ended"
    finally:
        other.kill()
        other.wait()


def test_linux_gives_a_pidfd_so_the_watch_costs_nothing_at_rest() -> None:
    fd = watchdog._open_pidfd(psutil.Process().pid)
    assert fd is not None and fd >= 0
    import os

    os.close(fd)
