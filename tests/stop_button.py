"""Pressing a kernel's stop button mid-cell, as the interrupt tests (one host or several) do."""

from __future__ import annotations

import time
from typing import Callable

from jupyter_client import KernelClient, KernelManager


def run_and_interrupt(km: KernelManager, kc: KernelClient, code: str, after: float, presses: int = 1,
                      gap: float = 0.1, timeout: float = 60,
                      until: Callable[[], bool] | None = None) -> tuple[dict, str, float]:
    """Run ``code``, press stop ``presses`` times from ``after`` seconds on (counted from when
    ``until()`` first holds, if given); returns the reply content, everything printed, and the
    seconds from the first press to the reply."""
    msg_id = kc.execute(code)
    end = time.monotonic() + timeout
    while until is not None and not until() and time.monotonic() < end:
        time.sleep(0.005)
    time.sleep(after)
    pressed = time.monotonic()
    for i in range(presses):
        if i:
            time.sleep(gap)
        km.interrupt_kernel()
    out = []
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        out.append(content.get("text", "") or "\n".join(content.get("traceback", [])))
        if msg["msg_type"] == "status" and content["execution_state"] == "idle":
            break
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"], "".join(out), time.monotonic() - pressed
