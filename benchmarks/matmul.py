"""Sharded matmul vs single-process torch.mm, the naive concat recipe and DTensor, side by side.

For each N (default 4096 and 6144, float32) on ``--ranks`` CPU virtual devices (default 4):

- ``torch.mm (1 process)``: this process, all cores (``torch.set_num_threads(cores)``), no engines busy;
- each strategy of ``mg.matmul`` on data already in its layout (``C.report``: time between barriers,
  measured peak per rank);
- ``naive concat``: A row blocks x replicated B on every rank, then rank 0 receives the blocks and
  ``torch.cat``s them;
- ``DTensor mm``: ``torch.distributed.tensor`` ``torch.mm`` of A Shard(0), B Shard(0) (ring's
  placements) on the same process group, default redistribution.

Peak per rank = bytes of the input shards held + growth of peak RSS during the op (VmHWM after
``clear_refs`` minus RSS before). It is compared with the 3N²/P·itemsize bound (A, B and C shards).

    python benchmarks/matmul.py [--sizes 4096,6144] [--ranks 4] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")

import torch

import jupyter_mgpu as mg
from jupyter_mgpu.engine.records import telemetry
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.ops import matmul_baselines as base
from jupyter_mgpu.ops.matmul_costs import required_placements

MiB = 2**20


def single_process(n: int, repeat: int) -> tuple[float, int]:
    torch.set_num_threads(os.cpu_count() or 1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    best, peak = float("inf"), 0
    torch.mm(a, b)  # warm-up: thread pool and BLAS buffers
    for _ in range(repeat):
        telemetry.reset_peak()
        before = telemetry._proc_status()["VmRSS"]
        start = time.perf_counter()
        c = torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
        peak = max(peak, telemetry._proc_status()["VmHWM"] - before + 2 * a.nbytes)
        del c
        store.trim()
    return best, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,6144")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2, help="runs per method; the fastest is shown")
    ap.add_argument("--strategies", default="row,col,inner,ring,summa")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    p = args.ranks
    s = mg.init(p, cpu=True, timeout=300)
    tables = []
    try:
        for n in sizes:
            rows = []
            t_mm, peak_mm = single_process(n, args.repeat)
            rows.append(("torch.mm (1 process, all cores)", t_mm, [peak_mm]))
            for strategy in args.strategies.split(","):
                a_pl, b_pl, _ = required_placements(strategy, p)
                A = mg.randn(n, n, placement=a_pl, seed=1)
                B = mg.randn(n, n, placement=b_pl, seed=2)
                best = None
                for _ in range(args.repeat):
                    C = mg.matmul(A, B, strategy)
                    if best is None or C.report.time < best.time:
                        best = C.report
                    del C
                rows.append((f"mg.matmul {strategy}", best.time, best.peak_bytes))
                del A, B
            A = mg.randn(n, n, placement=mg.Shard(0), seed=1)
            Br = mg.randn(n, n, placement=mg.Replicate(), seed=2)
            res = min(
                (s.run(base.naive_concat, A.handle_id, Br.handle_id, label="naive") for _ in range(args.repeat)),
                key=lambda r: max(x["time"] for x in r),
            )
            rows.append(
                ("naive: row blocks, repl. B, torch.cat", max(x["time"] for x in res), [x["peak_bytes"] for x in res])
            )
            del Br
            B = mg.randn(n, n, placement=mg.Shard(0), seed=2)
            res = min(
                (s.run(base.dtensor_mm, A.handle_id, B.handle_id, 0, 0, label="dtensor") for _ in range(args.repeat)),
                key=lambda r: max(x["time"] for x in r),
            )
            rows.append(("DTensor mm S(0)xS(0) -> S(0)", max(x["time"] for x in res), [x["peak_bytes"] for x in res]))
            del A, B
            tables.append((n, rows, t_mm))
    finally:
        s.shutdown()

    for n, rows, t_mm in tables:
        bound = 3 * n * n // p * 4
        flops = 2 * n**3
        print(
            f"\nN={n} float32, {p} ranks (1 thread each) on {os.cpu_count()} cores; "
            f"3N²/P bound = {bound / MiB:.1f} MiB; best of {args.repeat}"
        )
        print(
            f"{'method':44} {'time s':>8} {'GFLOP/s':>8} {'x torch.mm':>10} {'peak/rank MiB (max)':>20} {'/bound':>7}"
        )
        for name, t, peaks in rows:
            print(
                f"{name:44} {t:8.3f} {flops / t / 1e9:8.1f} {t / t_mm:10.2f} {max(peaks) / MiB:20.1f} "
                f"{max(peaks) / bound:7.2f}"
            )


if __name__ == "__main__":
    main()
