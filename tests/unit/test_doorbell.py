"""The supervisor's doorbell (engine/startup/doorbell.py): an idle supervisor sleeps until the kernel rings or
a child ends, and a ring nobody hears is harmless."""

from __future__ import annotations

import os
import signal
import threading
import time

from jupyter_mgpu.engine.startup.doorbell import Doorbell, ring


def test_a_ring_wakes_the_sleeper_and_a_rung_out_bell_sleeps_again(tmp_path):
    ring(tmp_path)  # no bell yet: nothing happens, nothing is made
    assert list(tmp_path.iterdir()) == []
    bell = Doorbell(tmp_path)
    try:
        threading.Timer(0.05, ring, (tmp_path,)).start()
        t0 = time.monotonic()
        bell.wait(5.0)
        assert time.monotonic() - t0 < 2.0  # woken by the ring, not the timeout
        ring(tmp_path)
        ring(tmp_path)
        bell.wait(5.0)  # both rings taken at once
        t0 = time.monotonic()
        bell.wait(0.2)  # the ringers closed their ends: no end-of-file wakes it, it sleeps its time
        assert time.monotonic() - t0 >= 0.15
    finally:
        os.close(bell.fd)


def test_a_child_ending_rings_the_bell(tmp_path):
    bell = Doorbell(tmp_path)
    old = signal.getsignal(signal.SIGCHLD)
    try:
        bell.ring_when_a_child_ends()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        t0 = time.monotonic()
        bell.wait(5.0)
        assert time.monotonic() - t0 < 2.0
        os.waitpid(pid, 0)
    finally:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, old)
        os.close(bell.fd)
