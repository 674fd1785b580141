"""Real Jupyter kernels (jupyter_client): killed, shut down, restarted or interrupted, the engines follow."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
from jupyter_client.manager import KernelManager

from processes import wait_gone

pytestmark = pytest.mark.kernel

PIDS = (  # every process of the cluster, the controller's forked helpers included
    "import json, psutil, jupyter_mgpu as _mg; _c = _mg.current().cluster; "
    "_p = [_c.controller.pid, _c.supervisor.pid, *_c.engine_pids.values()]; "
    "_p += [q.pid for r in _p[:2] for q in psutil.Process(r).children(recursive=True)]; "
    "print('PIDS' + json.dumps(sorted(set(_p))))"
)


class Kernel:
    """A real ipykernel running this venv's Python, driven over ZMQ."""

    def __init__(self):
        self.km = KernelManager(kernel_name="python3")
        self.km.kernel_spec.argv[0] = sys.executable
        self.km.start_kernel(env={**os.environ, "JUPYTER_MGPU_FORCE_CPU": "1"})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def execute(self, code: str, timeout: float = 120) -> tuple[dict, str]:
        """Run ``code``; returns the reply content and everything printed."""
        out = []
        reply = self.kc.execute_interactive(
            code, timeout=timeout, output_hook=lambda m: out.append(m["content"].get("text", "") or
                                                                   "".join(m["content"].get("traceback", []))))
        return reply["content"], "".join(out)

    def start_cluster(self, n: int = 2) -> list[int]:
        reply, out = self.execute(f"%load_ext jupyter_mgpu\n%mgpu_init {n} --timeout 5 --no-dashboard")
        assert reply["status"] == "ok", out
        reply, out = self.execute(PIDS)
        line = next(x for x in out.splitlines() if x.startswith("PIDS"))
        return json.loads(line[4:])

    def close(self):
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=True)


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


def test_kernel_shutdown_and_restart_end_engines(kernel):
    pids = kernel.start_cluster(2)
    kernel.km.restart_kernel(now=False)
    assert wait_gone(pids, 10) == []
    kernel.kc.wait_for_ready(timeout=60)
    pids = kernel.start_cluster(2)
    kernel.km.shutdown_kernel(now=False)
    assert wait_gone(pids, 10) == []


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
    reply, out = kernel.execute("%%mgpu\nx = torch.ones(1) * (rank + 1)\ndist.all_reduce(x)\nprint(x.item())")
    assert reply["status"] == "ok", out
    assert "[rank 0] 3.0" in out and "[rank 1] 3.0" in out
