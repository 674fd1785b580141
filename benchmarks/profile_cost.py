"""What ``mg.profile()`` costs (issue 36), side by side in one run on the same ranks: a cell of small
matmuls and all_reduces run plainly and inside a profile (the profiled cell's own time, then the time to
stop the ranks' profilers and bring their traces into the notebook, then to merge them into one trace),
at 2, 4 and 16 CPU virtual devices. Profiling costs nothing when off: the ranks run no profiler then.
``first`` is the whole first profiled block of a fresh session (start, cell, collect) against ``later``, the
median of the same block afterwards: a first use should cost about what a later one does.

    python benchmarks/profile_cost.py [--ranks 2 4 16] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

CELL = "x = torch.ones(256)\nfor _ in range(20):\n    y = torch.randn(128, 128) @ torch.randn(128, 128)\n    dist.all_reduce(x)\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 16])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")
    import jupyter_mgpu as mg
    from jupyter_mgpu.profiling import profile_data

    rows = []
    for n in args.ranks:
        s = mg.init(n, cpu=True, restart=True)
        try:
            s.run_cell(CELL, stream=False)  # warm
            t = time.perf_counter()
            with mg.profile(s):
                s.run_cell(CELL, stream=False)
            first = time.perf_counter() - t
            blocks = []
            plain, profiled, collect, merge, events = [], [], [], [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                s.run_cell(CELL, stream=False)
                plain.append(time.perf_counter() - t)
                p = mg.profile(s)
                t_block = time.perf_counter()
                with p:
                    t = time.perf_counter()
                    s.run_cell(CELL, stream=False)
                    profiled.append(time.perf_counter() - t)
                    t_stop = time.perf_counter()
                collect.append(time.perf_counter() - t_stop)
                blocks.append(time.perf_counter() - t_block)
                t = time.perf_counter()
                trace = profile_data.merged_chrome_trace(p.ranks)
                profile_data.dumps(trace)
                merge.append(time.perf_counter() - t)
                events.append(len(trace["traceEvents"]))
        finally:
            s.shutdown()
        ms = {
            k: 1000 * statistics.median(v)
            for k, v in (
                ("plain", plain),
                ("profiled", profiled),
                ("collect", collect),
                ("merge", merge),
                ("later", blocks),
            )
        }
        ms["first"] = 1000 * first
        rows.append((n, ms, int(statistics.median(events))))
    print(f"\nCPU virtual devices (gloo), median of {args.repeat}; the cell: 20 × (128×128 matmul + all_reduce)")
    print(
        f"{'ranks':>5} {'cell ms':>9} {'profiled':>9} {'overhead':>9} {'collect ms':>11} {'merge ms':>9} {'events':>8}"
        f" {'first ms':>9} {'later ms':>9}"
    )
    for n, ms, ev in rows:
        over = 100 * (ms["profiled"] - ms["plain"]) / ms["plain"]
        print(
            f"{n:>5} {ms['plain']:>9.1f} {ms['profiled']:>9.1f} {over:>8.0f}% {ms['collect']:>11.1f} {ms['merge']:>9.1f} {ev:>8}"
            f" {ms['first']:>9.1f} {ms['later']:>9.1f}"
        )


if __name__ == "__main__":
    main()
