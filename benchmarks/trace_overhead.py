"""Cost of tracing: mg.matmul with and without ``mg.trace()``, side by side, every strategy; and torch's
own DTensor redistribute, which ``mg.trace()`` records through a wrapper of torch's function.

The same matmul (benchmarks/matmul.py's setting: N×N float32 on ``--ranks`` CPU virtual devices,
inputs already in the strategy's layout) is run alternately untraced and inside ``with mg.trace()``,
``--repeat`` times each; the table shows the fastest time of each (``C.report.time``: slowest rank,
between barriers, which includes recording) and the overhead in percent. Target: ≤ 3 %.

The ``dtensor`` rows time ``--dtensor-loops`` rounds of ``[S(0)] → [R] → [S(0)]`` (``DTensor.redistribute``
on a 1-D mesh of all ranks, an all_gather then a local chunk) of an N×N float32 DTensor, untraced and
traced alternately; the time and the events are per round (slowest rank, between barriers).

    python benchmarks/trace_overhead.py [--sizes 2048,4096] [--ranks 4] [--repeat 5] [--dtensor-sizes 256,1024,2048]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")

import jupyter_mgpu as mg
from jupyter_mgpu.ops.matmul_costs import required_placements


def per_event_cost(n: int = 200_000) -> tuple[float, float]:
    """Seconds to record one event (the tuple append ops do) and to publish one (a JSON line), in this process."""
    from jupyter_mgpu.engine.records import trace as etrace

    etrace.start("bench", live=False)
    blk = [etrace.block("t1.1", ((0, 512), (0, 4096)), "slot1")]
    t0 = time.perf_counter()
    for i in range(n):
        etrace.record(i, "recv", blk, 8 << 20, 3)
    rec = time.perf_counter() - t0
    events = etrace._REC.events
    etrace._REC = None
    etrace.stop()  # takes the DTensor hook off again (start installed it)
    t0 = time.perf_counter()
    for e in events[:20_000]:
        json.dumps(
            {
                "rank": 0,
                "op": e[0],
                "label": e[1],
                "step": e[2],
                "action": e[3],
                "blocks": [{"tensor": b[0], "box": [list(r) for r in b[1]], "buf": b[2]} for b in e[4]],
                "bytes": e[5],
                "time": e[7],
                "seq": e[8],
                "peer": e[6],
            }
        )
    pub = (time.perf_counter() - t0) / 20_000
    return rec / n, pub


def dtensor_rounds(n: int, loops: int) -> float:
    """On every rank: seconds per round of ``[S(0)] → [R] → [S(0)]`` of an n×n DTensor (between barriers)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    x = distribute_tensor(torch.ones(n, n), mesh, [Shard(0)])
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(loops):
        x = x.redistribute(mesh, [Replicate()]).redistribute(mesh, [Shard(0)])
    dist.barrier()
    return (time.perf_counter() - t0) / loops


def dtensor_rows(s: mg.Session, sizes: list[int], loops: int, repeat: int) -> list[tuple]:
    """Rows ``(N, "dtensor", untraced s, traced s, events)`` for DTensor redistributes on the ranks."""
    rows = []
    for n in sizes:
        s.run(dtensor_rounds, n, 1, timeout=300)  # warm-up: torch's DTensor imported, its plans cached
        off, on, events = [], [], 0
        for _ in range(repeat):
            off.append(max(s.run(dtensor_rounds, n, loops, timeout=300)))
            with mg.trace() as t:
                on.append(max(s.run(dtensor_rounds, n, loops, timeout=300)))
            events = len(t.events) // loops  # per round, as the time
        rows.append((n, "dtensor", min(off), min(on), events))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2048,4096")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--strategies", default="row,col,inner,ring,summa")
    ap.add_argument("--dtensor-sizes", default="256,1024,2048", help="N of the DTensor rows ('' for none)")
    ap.add_argument("--dtensor-loops", type=int, default=5, help="[S(0)] → [R] → [S(0)] rounds per timing")
    args = ap.parse_args()
    s = mg.init(args.ranks, cpu=True, timeout=300)
    rows = []
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            for strategy in [x for x in args.strategies.split(",") if x]:
                a_pl, b_pl, _ = required_placements(strategy, args.ranks)
                A = mg.randn(n, n, placement=a_pl, seed=1)
                B = mg.randn(n, n, placement=b_pl, seed=2)
                mg.matmul(A, B, strategy).free()  # warm-up
                off, on, events = [], [], 0
                for _ in range(args.repeat):
                    C = mg.matmul(A, B, strategy)
                    off.append(C.report.time)
                    C.free()
                    with mg.trace() as t:
                        C = mg.matmul(A, B, strategy)
                    on.append(C.report.time)
                    events = len(t.events)
                    C.free()
                rows.append((n, strategy, min(off), min(on), events))
                A.free()
                B.free()
        sizes = [int(x) for x in args.dtensor_sizes.split(",") if x]
        rows += dtensor_rows(s, sizes, args.dtensor_loops, args.repeat)
    finally:
        s.shutdown()
    print(
        f"\nmg.matmul with and without mg.trace(): {args.ranks} ranks on {os.cpu_count()} cores, float32, "
        f"best of {args.repeat} (alternating); dtensor: one [S(0)] → [R] → [S(0)] round of "
        "DTensor.redistribute, recorded by mg.trace() through torch's redistribute_local_tensor"
    )
    print(f"{'N':>6} {'strategy':10} {'untraced s':>11} {'traced s':>9} {'overhead':>9} {'events':>7}")
    for n, strategy, t_off, t_on, events in rows:
        print(f"{n:>6} {strategy:10} {t_off:11.4f} {t_on:9.4f} {100 * (t_on / t_off - 1):8.1f}% {events:7d}")
    rec, pub = per_event_cost()
    print(
        f"\nper event: record {rec * 1e6:.2f} µs, publish (live JSON line) {pub * 1e6:.2f} µs; "
        "bound on the overhead = events × (record + publish) / untraced time:"
    )
    for n, strategy, t_off, _, events in rows:
        print(f"{n:>6} {strategy:10} {100 * events * (rec + pub) / t_off:8.3f}%")
    total_off = sum(r[2] for r in rows)
    total_on = sum(r[3] for r in rows)
    print(f"{'all':>6} {'':10} {total_off:11.4f} {total_on:9.4f} {100 * (total_on / total_off - 1):8.1f}%")


if __name__ == "__main__":
    main()
