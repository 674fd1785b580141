"""A real ipykernel (jupyter_client) that the kernel tests drive: start, run cells, interrupt, stop."""

from __future__ import annotations

import json
import os
from typing import Any

from ipc_kernel import ipc_kernel_manager
from stop_button import run_and_interrupt

PIDS = (  # every process of the cluster, the controller's forked helpers included
    "import json, psutil, jupyter_mgpu as _mg; _c = _mg.current().cluster; "
    "_p = [_c.controller.pid, _c.supervisor.pid, *_c.engine_pids.values()]; "
    "_p += [q.pid for r in _p[:2] for q in psutil.Process(r).children(recursive=True)]; "
    "print('PIDS' + json.dumps(sorted(set(_p))))"
)


class Kernel:
    """A real ipykernel running this venv's Python, driven over ZMQ (Unix sockets: ``tests/ipc_kernel.py``)."""

    def __init__(self):
        self.km = ipc_kernel_manager()
        self.km.start_kernel(env={**os.environ, "JUPYTER_MGPU_FORCE_CPU": "1"})
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=60)
        except BaseException:
            self.close()  # a kernel that never answered is not left running
            raise

    def execute(self, code: str, timeout: float = 120) -> tuple[dict, str]:
        """Run ``code``; returns the reply content and what the cell shows at the end (everything printed
        since the last ``clear_output``: ``%%mgpu`` shows out-of-order rank output again in rank order)."""
        out = []

        def hook(m: dict) -> None:
            if m["msg_type"] == "clear_output":
                out.clear()
            else:
                out.append(m["content"].get("text", "") or "".join(m["content"].get("traceback", [])))

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        return reply["content"], "".join(out)

    def execute_after_an_error(self, code: str, timeout: float = 120) -> tuple[dict, str]:
        """``execute`` the moment after a cell failed: ipykernel aborts a request that comes in while it
        flushes its queue after an error, as a person's next cell never does; an aborted one is sent again."""
        reply, out = self.execute(code, timeout)
        return self.execute(code, timeout) if reply["status"] == "aborted" else (reply, out)

    def reply(self, msg_id: str, timeout: float = 60) -> dict:
        """The shell reply to the request ``msg_id`` (replies to other requests are passed over)."""
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def run_and_interrupt(self, code: str, after: float, **press: Any) -> tuple[dict, str, float]:
        """``stop_button.run_and_interrupt`` on this kernel: run ``code``, press stop ``after`` seconds on
        (``presses``, ``gap``, ``timeout`` and ``until`` as there)."""
        return run_and_interrupt(self.km, self.kc, code, after, **press)

    def start_cluster(self, n: int = 2, options: str = "--timeout 5") -> list[int]:
        reply, out = self.execute(f"%load_ext jupyter_mgpu\n%mgpu_init {n} {options} --no-dashboard")
        assert reply["status"] == "ok", out
        reply, out = self.execute(PIDS)
        line = next(x for x in out.splitlines() if x.startswith("PIDS"))
        return json.loads(line[4:])

    def close(self):
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=True)


def debug(k: Kernel, code: str, answers: list[str], timeout: float = 60) -> tuple[dict, list[str], str]:
    """Run ``code`` answering each input request with the next of ``answers``; the reply, the prompts
    asked, and everything the cell printed (streams and errors) in order."""
    prompts: list[str] = []
    out: list[str] = []
    todo = list(answers)

    def on_stdin(msg: dict) -> None:
        prompts.append(msg["content"]["prompt"])
        assert todo, f"asked {msg['content']['prompt']!r} with no answer left; printed: {''.join(out)[-1500:]}"
        k.kc.input(todo.pop(0))

    def on_output(msg: dict) -> None:
        c = msg["content"]
        out.append(c.get("text", "") or "".join(c.get("traceback", [])))

    reply = k.kc.execute_interactive(
        code, timeout=timeout, allow_stdin=True, stdin_hook=on_stdin, output_hook=on_output
    )
    return reply["content"], prompts, "".join(out)
