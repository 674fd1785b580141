"""Debugging all ranks at once, step by step, at 4, 8 and 16 CPU virtual devices (issue 45: each step under
2 s on the 2-core machine). One real ipykernel per rank count, driven over ZMQ as a notebook drives it, the
prompts answered through stdin: every rank reaching one ``breakpoint()`` in three functions, then at the
prompts ``:all``, ``:where`` (every rank's stack as one tree), ``p value`` (one reply, the odd rank apart),
``n`` (the group steps), ``c`` (the cell finishes). Each figure is the median of ``--repeat`` cells, from
the line sent (the cell, for ``stop``) to the next prompt (the reply, for ``c``), in milliseconds; ``start``
is ``%mgpu_init`` once.

    python benchmarks/debug_scale.py [--ranks 4 8 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

CELL = """%%mgpu
def check(v):
    breakpoint()
    w = v * 2
    return w
def forward(v):
    return check(v)
def backward(v):
    return check(v)
def step(v):
    return check(v)
value = float('nan') if rank == 7 % world_size else 1.0
fn = forward if rank < world_size // 2 else backward if rank < world_size - 1 else step
out = fn(value)
"""
STEPS = [("stop", None), ("all", ":all"), ("tree", ":where"), ("p", "p value"), ("n", "n"), ("c", "c")]


def one_cell(kc: Any) -> dict[str, float]:
    """Run the cell once, answering its prompts; each step's milliseconds."""
    answers = [line for _, line in STEPS[1:]]
    marks = [time.perf_counter()]

    def on_stdin(msg: dict[str, Any]) -> None:
        marks.append(time.perf_counter())
        kc.input(answers.pop(0) if answers else "c")
        marks.append(time.perf_counter())

    reply = kc.execute_interactive(CELL, timeout=300, allow_stdin=True, stdin_hook=on_stdin, output_hook=lambda m: None)
    marks.append(time.perf_counter())
    if reply["content"]["status"] != "ok":
        raise SystemExit(f"the cell failed: {reply['content'].get('evalue')}")
    spans = [1000 * (marks[i + 1] - marks[i]) for i in range(0, len(marks) - 1, 2)]
    return {name: spans[i] for i, (name, _) in enumerate(STEPS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from jupyter_client.manager import KernelManager

    rows = []
    for n in args.ranks:
        km = KernelManager(kernel_name="python3")
        km.kernel_spec.argv[0] = sys.executable
        km.start_kernel(env={**os.environ, "JUPYTER_MGPU_FORCE_CPU": "1"})
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            t = time.perf_counter()
            init = f"%load_ext jupyter_mgpu\n%mgpu_init {n} --no-dashboard"
            reply = kc.execute_interactive(init, timeout=300, output_hook=lambda m: None)
            start = 1000 * (time.perf_counter() - t)
            if reply["content"]["status"] != "ok":
                raise SystemExit(f"%mgpu_init {n} failed: {reply['content'].get('evalue')}")
            runs = [one_cell(kc) for _ in range(args.repeat)]
            rows.append((n, start, {name: statistics.median(r[name] for r in runs) for name, _ in STEPS}))
        finally:
            kc.execute_interactive("%mgpu_shutdown", timeout=60, output_hook=lambda m: None)
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    print(f"\none breakpoint() on every rank, answered through stdin; median of {args.repeat}, ms")
    print(f"{'ranks':>5} {'start':>7} " + " ".join(f"{name:>7}" for name, _ in STEPS) + f" {'slowest':>8}")
    for n, start, ms in rows:
        print(
            f"{n:>5} {start:>7.0f} " + " ".join(f"{ms[name]:>7.0f}" for name, _ in STEPS) + f" {max(ms.values()):>8.0f}"
        )


if __name__ == "__main__":
    main()
