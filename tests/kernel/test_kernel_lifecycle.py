"""Real Jupyter kernels (jupyter_client): killed, shut down, restarted or interrupted, the engines follow."""

from __future__ import annotations

import os
import signal
import time

import pytest
from kernel_client import Kernel
from processes import wait_gone

pytestmark = pytest.mark.kernel


@pytest.fixture
def kernel():
    k = Kernel()
    yield k
    k.close()


def test_sigkill_of_the_kernel_ends_engines_and_controller_within_10s(kernel):
    pids = kernel.start_cluster(2)
    assert len(pids) >= 4
    os.kill(kernel.km.provisioner.process.pid, signal.SIGKILL)
    start = time.monotonic()
    assert wait_gone(pids, 10) == []
    print(f"engines gone {time.monotonic() - start:.2f} s after SIGKILL of the kernel")


@pytest.mark.slow
def test_kernel_shutdown_and_restart_end_engines(kernel):
    pids = kernel.start_cluster(2)
    kernel.km.restart_kernel(now=False)
    assert wait_gone(pids, 10) == []
    kernel.kc.wait_for_ready(timeout=60)
    pids = kernel.start_cluster(2)
    kernel.km.shutdown_kernel(now=False)
    assert wait_gone(pids, 10) == []


@pytest.mark.slow
def test_stop_button_interrupts_the_engines_and_session_stays_usable(kernel):
    kernel.start_cluster(2)
    msg_id = kernel.kc.execute("%%mgpu\nimport time\nwhile True:\n    time.sleep(0.01)")
    time.sleep(2.0)
    start = time.monotonic()
    kernel.km.interrupt_kernel()
    while True:
        msg = kernel.kc.get_shell_msg(timeout=20)
        if msg["parent_header"].get("msg_id") == msg_id:
            break
    assert msg["content"]["status"] == "error"
    assert msg["content"]["ename"] == "KeyboardInterrupt"
    assert time.monotonic() - start < 10
    reply, out = kernel.execute_after_an_error(
        "%%mgpu\nx = torch.ones(1) * (rank + 1)\ndist.all_reduce(x)\nprint(x.item())"
    )
    assert reply["status"] == "ok", out
    assert "[rank 0] 3.0" in out and "[rank 1] 3.0" in out
