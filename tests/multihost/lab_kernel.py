"""A real IPython kernel running inside one lab host, driven from the test over ZMQ ``ipc`` sockets.

The host's loopback is its own, so the kernel's channels are Unix sockets in the lab's directory
(the one path the test and the host share); the stop button is a message (``interrupt_mode``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import stop_button
from jupyter_client.manager import KernelManager
from netns_lab import Host


class LabKernel:
    """``execute(code)`` -> (reply content, everything printed), like tests/kernel/kernel_client.py."""

    def __init__(self, host: Host, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.host = host
        conn = workdir / f"kernel-{host.name}.json"
        self.km = KernelManager(
            kernel_name="python3", transport="ipc", ip=str(workdir / f"k-{host.name}"), connection_file=str(conn)
        )
        spec = self.km.kernel_spec
        spec.interrupt_mode = "message"
        inner = " ".join([sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
        spec.argv = host.cmd(["sh", "-c", f"cd {workdir} && exec {inner}"])
        environment = {"JUPYTER_MGPU_FORCE_CPU": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
        self.km.start_kernel(env={**os.environ, "HOME": "/root", **environment})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def execute(self, code: str, timeout: float = 240) -> tuple[dict, str]:
        out: list[str] = []

        def hook(msg: dict) -> None:
            c = msg["content"]
            if msg["msg_type"] == "clear_output":  # a %%mgpu cell shows out-of-order lines again in rank order
                out.clear()
            elif msg["msg_type"] == "stream":
                out.append(c.get("text", ""))
            elif msg["msg_type"] == "error":
                out.append("\n".join(c.get("traceback", [])) or f"{c.get('ename')}: {c.get('evalue')}")
            elif msg["msg_type"] in ("execute_result", "display_data"):
                out.append(c.get("data", {}).get("text/plain", ""))

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        return reply["content"], "".join(out)

    def ok(self, code: str, timeout: float = 240) -> str:
        """Run ``code``, assert it succeeded; what it printed."""
        reply, out = self.execute(code, timeout)
        assert reply["status"] == "ok", f"{code!r} failed on {self.host.name}:\n{out}"
        return out

    def value(self, expr: str, timeout: float = 240) -> object:
        """The value of a Python expression in the kernel (through ``repr``/``eval``)."""
        import ast

        out = self.ok(f"print('VALUE=' + repr({expr}))", timeout)
        line = next(ln for ln in out.splitlines() if ln.startswith("VALUE="))
        return ast.literal_eval(line[6:])

    def close(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            if self.km.is_alive():
                try:
                    self.km.shutdown_kernel(now=False)
                except Exception:
                    self.km.shutdown_kernel(now=True)
            deadline = time.monotonic() + 10
            while self.km.is_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            self.km.cleanup_resources()


def run_and_interrupt(kernel: LabKernel, code: str, after: float, timeout: float = 120) -> tuple[dict, str, float]:
    """Run ``code``, press the stop button ``after`` seconds later (an interrupt message); returns the
    reply content, everything printed, and the seconds from the press to the reply."""
    return stop_button.run_and_interrupt(kernel.km, kernel.kc, code, after, timeout=timeout)
