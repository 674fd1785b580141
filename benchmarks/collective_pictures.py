"""What ``%mgpu_collective`` sends the browser at many ranks, and how long the notebook takes to draw it:
the before/after figure (rows the same as the rank above folded into one line, ``widgets/row_folding.py``)
next to the same figure unfolded (the baseline, as drawn before), and the schedule player (first frame,
then each step's changes). Demo inputs, built in this process: no ranks needed.

    python benchmarks/collective_pictures.py [--ranks 16,32,64]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time

from jupyter_mgpu.collectives.collective_run import CollectiveResult, reference
from jupyter_mgpu.ops import collective_schedule as sched
from jupyter_mgpu.ops import demo_inputs as demo
from jupyter_mgpu.widgets.collective_view import before_after_svg

NAMES = ("all_gather", "all_reduce", "all_to_all", "reduce_scatter", "broadcast", "gather")
SPLITTING = ("all_to_all", "reduce_scatter")
ROOTED = ("broadcast", "gather")


def _result(name: str, n: int) -> CollectiveResult:
    dims = demo.DEFAULT_SHAPE
    if name in SPLITTING:
        dims = (math.ceil(dims[0] / n) * n, dims[1])
    xs = [demo.demo_tensor(r, dims) for r in range(n)]
    before = [sched.before_entries(name, x, r, 0, n) for r, x in enumerate(xs)]
    op = "sum" if name in ("all_reduce", "reduce_scatter") else None
    src = 0 if name in ROOTED else None
    return CollectiveResult(name, op, src, xs, before, reference(name, xs, "sum", 0), 1e-4, "gloo", "demo")


def _figure(res: CollectiveResult, fold: bool) -> tuple[str, float]:
    t = time.perf_counter()
    svg = before_after_svg(
        res.name, res.op, res.src, res.inputs, res.after, res.backend, res.seconds, res._tracked(), fold=fold
    )
    return svg, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="16,32,64")
    args = parser.parse_args()
    print(
        "| collective | ranks | figure kB (unfolded) | figure height px (unfolded) | figure s | player kB | player s |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in NAMES:
        for n in map(int, args.ranks.split(",")):
            res = _result(name, n)
            res._tracked()  # the schedule, shared by both figures and the player, run once
            (flat, _), (svg, took) = _figure(res, False), _figure(res, True)
            t = time.perf_counter()
            player = res.animation()
            built = time.perf_counter() - t
            state = {k: v for k, v in player.get_state().items() if not isinstance(v, (bytes, memoryview))}

            def height(s: str) -> str:
                return re.search(r"height='([\d.]+)'", s).group(1)

            print(
                f"| {name} | {n} | {len(svg) / 1e3:.0f} ({len(flat) / 1e3:.0f}) | {height(svg)} ({height(flat)}) "
                f"| {took:.2f} | {len(json.dumps(state)) / 1e3:.0f} | {built:.2f} |"
            )


if __name__ == "__main__":
    main()
