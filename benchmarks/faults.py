"""Detection times of injected faults: how long from the fault to a clear error, and what it says.

Each fault runs on a fresh 2-rank (3 for collectives) cluster of CPU virtual devices with a 5 s
collective timeout; the table is what docs/reliability.md quotes.

    python benchmarks/faults.py
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import psutil

import jupyter_mgpu as mg


def _kill_later(pid: int, delay: float, sig: int = signal.SIGKILL) -> None:
    threading.Timer(delay, lambda: os.kill(pid, sig)).start()


CHECK = "x = torch.ones(2) * (rank + 1)\ndist.all_reduce(x)\nx.tolist()"


def _press_stop_later(delay: float) -> None:
    """The stop button: SIGINT to this process (the notebook kernel) after ``delay`` seconds."""
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT)).start()


def measure(name: str, n: int, inject: Callable, code: str, fault_at: float, **init) -> tuple[str, float, str, bool]:
    s = mg.init(n, cpu=True, restart=True, **{"timeout": 5, **init})
    pids = [s.cluster.controller.pid, s.cluster.supervisor.pid, *s.cluster.engine_pids.values()]
    inject(s)
    start = time.monotonic()
    try:
        s.run_cell(code)
        msg = "(no error)"
    except BaseException as exc:
        msg = f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - start - fault_at
    check_start = time.monotonic()
    try:  # the next ordinary collective: right, or refused; its time says what recovery cost it
        got = s.run_cell(CHECK)
        total = float(n * (n + 1) // 2)
        right = got == [repr([total, total])] * n
        msg += (
            f" | next all_reduce {'right' if right else 'WRONG: ' + str(got)} in {time.monotonic() - check_start:.2f} s"
        )
    except BaseException as exc:
        msg += f" | next all_reduce refused: {exc}"
    mg.shutdown()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.05)
    clean = not any(psutil.pid_exists(p) for p in pids)
    return name, took, msg, clean


def main() -> None:
    rows = [
        measure(
            "engine SIGKILL while idle",
            2,
            lambda s: (os.kill(s.cluster.engine_pids[1], signal.SIGKILL), time.sleep(0.3)),
            "rank",
            0.0,
        ),
        measure(
            "engine SIGKILL during a cell",
            2,
            lambda s: _kill_later(s.cluster.engine_pids[1], 1.0),
            "import time\nfor _ in range(300):\n    time.sleep(0.1)",
            1.0,
        ),
        measure(
            "engine SIGKILL during a collective",
            3,
            lambda s: _kill_later(s.cluster.engine_pids[2], 1.0),
            "x = torch.ones(1 << 20)\nfor _ in range(100000):\n    dist.all_reduce(x)",
            1.0,
        ),
        measure(
            "rank raises before a collective",
            3,
            lambda s: None,
            "if rank == 1:\n    raise ValueError('bad shard')\ndist.all_reduce(torch.ones(4))",
            0.0,
        ),
        measure(
            "rank never joins a collective", 3, lambda s: None, "if rank != 2:\n    dist.all_reduce(torch.ones(4))", 0.0
        ),
        measure(
            "rank out of its memory budget",
            2,
            lambda s: None,
            "b = torch.ones(1024, 1024, 64 * (1 + 2 * rank))\ndist.all_reduce(torch.ones(1))",
            0.0,
            mem_per_device="400MiB",
        ),
        measure(
            "stop button, rank 0 blocked in a collective",
            2,
            lambda s: _press_stop_later(1.0),
            "if rank == 0:\n    dist.all_reduce(torch.ones(3))",
            1.0,
            timeout=120,
        ),
        measure(
            "stop button, 4 ranks in a DDP loop",
            4,
            lambda s: _press_stop_later(1.5),
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "m = DDP(torch.nn.Linear(512, 512))\nfor _ in range(100000):\n    m(torch.randn(64, 512)).sum().backward()",
            1.5,
            timeout=120,
        ),
        measure(
            "segfault on one rank", 2, lambda s: None, "import ctypes\nif rank == 1:\n    ctypes.string_at(0)", 0.0
        ),
        measure(
            "controller SIGKILL",
            2,
            lambda s: (os.kill(s.cluster.controller.pid, signal.SIGKILL), time.sleep(0.1)),
            "rank",
            0.0,
        ),
    ]
    print(f"{'fault':<44} {'detected after':>14}  {'clean':<5}  error | what the next collective gives")
    for name, took, msg, clean in rows:
        print(f"{name:<44} {took:>12.2f} s  {'yes' if clean else 'NO':<5}  {msg[:260]}")


if __name__ == "__main__":
    main()
