"""Pressing a kernel's stop button mid-cell, as the interrupt tests (one host or several) do."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from jupyter_client import KernelClient, KernelManager

REPLY_AFTER_IDLE = 10.0  # the reply is sent before the idle status: generous for a loaded machine


def run_and_interrupt(
    km: KernelManager,
    kc: KernelClient,
    code: str,
    after: float,
    presses: int = 1,
    gap: float = 0.1,
    timeout: float = 60,
    until: Callable[[], bool] | None = None,
) -> tuple[dict, str, float]:
    """Run ``code``, press stop ``presses`` times from ``after`` seconds on (counted from when the kernel
    began the cell, or from when ``until()`` first holds after that, if given); returns the reply content
    (``{"status": "lost"}`` if the kernel went idle without one), everything printed, and the seconds from the
    first press to the reply.

    The count starts at the cell's ``execute_input``, as a person presses stop on a cell seen running:
    ipykernel ignores SIGINT between cells, so a press that came before the cell began (a busy machine
    can take seconds to start it) would be lost and the cell would run to its end."""
    msg_id = kc.execute(code)
    end = time.monotonic() + timeout
    early = []  # the cell's messages read while waiting for it to begin
    while not any(m["msg_type"] == "execute_input" for m in early):
        try:
            msg = kc.get_iopub_msg(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"the kernel did not begin the cell within {timeout:.0f} s") from None
        if msg["parent_header"].get("msg_id") == msg_id:
            early.append(msg)
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
        try:
            msg = early.pop(0) if early else kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"the kernel was not idle {time.monotonic() - pressed:.0f} s after the stop button; "
                f"ranks: {ranks_now()}; printed: {''.join(out)[-2000:]!r}"
            ) from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        out.append(content.get("text", "") or "\n".join(content.get("traceback", [])))
        if msg["msg_type"] == "status" and content["execution_state"] == "idle":
            break
    # ipykernel sends the reply before it goes idle, unless a press landed after the cell had ended, in its
    # own handler of the request: it then logs "KeyboardInterrupt caught in kernel" and sends no reply at all
    end = time.monotonic() + REPLY_AFTER_IDLE
    while True:
        try:
            reply = kc.get_shell_msg(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            return {"status": "lost"}, "".join(out), time.monotonic() - pressed
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"], "".join(out), time.monotonic() - pressed


def ranks_now() -> dict[str, list[tuple[int, str, str | None, float]]]:
    """What every cluster of this user reports (rank, state, op, age of the sample in s), read from its
    telemetry records: says where a kernel that did not come back from the stop button was waiting."""
    from jupyter_mgpu import rundir
    from jupyter_mgpu.engine.records import telemetry

    found = {}
    for path in sorted(rundir.base_dir().iterdir()):
        samples = telemetry.read_samples(path)
        found[path.name] = [
            (r, str(v.get("state")), v.get("op"), round(time.time() - (v.get("time") or 0), 1))
            for r, v in sorted(samples.items())
        ]
    return found
