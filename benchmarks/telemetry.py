"""Live memory telemetry: its overhead on a matmul loop, its latency to the dashboard, its accuracy.

(a) overhead: a matmul loop on every rank, timed on the ranks between barriers, with the telemetry
    pipeline on (engine samplers at 10 Hz + the kernel's reader + a live dashboard) and off (samplers
    stopped, as ``mg.init(..., telemetry_period=0)`` has them, reader and dashboard paused). Trials of
    the two alternate in one session, so both see the same machine; target: <= 1 % slower. On a shared
    VM the trial-to-trial noise is several percent, so the benchmark also reads the CPU time of the
    telemetry threads themselves (``/proc/<pid>/task/<tid>/schedstat``) during the "on" loops: the share of
    the machine they take is what the loop can lose to them, measured without that noise.
(b) latency: from the moment an allocation returns on a rank (the rank's clock, the same host) to the
    moment the dashboard's model shows it (an observer on its ``devices`` trait), with the rank then
    idle and with it busy in a matmul loop; target: <= 250 ms at the default 10 Hz.
(c) accuracy: a 1 GiB tensor allocated (and touched) on rank 0 shows as 1 GiB +- 5 %.

    python benchmarks/telemetry.py [--ranks 4] [--trials 8] [--size 512] [--iters 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")

import psutil

import jupyter_mgpu as mg
from jupyter_mgpu.engine.records import memory_sampler
from jupyter_mgpu.monitoring.memory_monitor import monitor
from jupyter_mgpu.widgets.memory_dashboard import MemoryDashboard

MiB = 2**20

LOOP = """
import time as _time
_a = torch.randn({n}, {n}); _b = torch.randn({n}, {n})
dist.barrier()
_t0 = _time.perf_counter()
for _ in range({iters}):
    _c = _a @ _b
dist.barrier()
_time.perf_counter() - _t0
"""

ALLOC = """
import time as _time
_lat = torch.empty({nbytes}, dtype=torch.uint8).fill_(1)   # one tensor: full size only once the fill ends
_t_alloc = _time.time()
if {busy}:
    _m = torch.randn(900, 900)
    _end = _time.time() + 1.0
    while _time.time() < _end:
        _m = torch.tanh(_m @ _m)
_t_alloc
"""


def cpu_seconds(s: mg.Session) -> float:
    """CPU time used so far by every engine and by this (kernel) process."""
    procs = [psutil.Process(p) for p in s.cluster.engine_pids.values()] + [psutil.Process()]
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def _sampler_tid() -> int | None:
    from jupyter_mgpu.engine.records import memory_sampler

    sampler = memory_sampler._sampler
    return sampler.native_id if sampler is not None and sampler.is_alive() else None


def telemetry_threads(s: mg.Session, board: MemoryDashboard) -> list[tuple[int, int]]:
    """(pid, thread id) of every thread of the telemetry pipeline: samplers, reader, dashboard."""
    out = [(s.cluster.engine_pids[r], tid) for r, tid in enumerate(s.run(_sampler_tid)) if tid]
    for thread in (monitor(s)._thread, board._thread):
        if thread is not None and thread.native_id:
            out.append((os.getpid(), thread.native_id))
    return out


def thread_cpu(threads: list[tuple[int, int]]) -> float:
    """CPU seconds the given threads have run so far (``schedstat``: nanoseconds, not 10 ms ticks)."""
    total = 0
    for pid, tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


def idle_cost(s: mg.Session, board: MemoryDashboard, seconds: float) -> dict[str, float]:
    """CPU used per second by the idle cluster with telemetry on and off (% of one core)."""
    mon = monitor(s)
    out = {}
    for mode in ("on", "off", "on", "off"):
        s.run(memory_sampler.set_period, 0.1 if mode == "on" else 0)
        mon.paused = board.paused = mode == "off"
        time.sleep(0.3)
        c0 = cpu_seconds(s)
        time.sleep(seconds / 2)
        out[mode] = out.get(mode, 0.0) + 100 * (cpu_seconds(s) - c0) / seconds
    s.run(memory_sampler.set_period, 0.1)
    mon.paused = board.paused = False
    return out


def overhead(s: mg.Session, board: MemoryDashboard, trials: int, n: int, iters: int) -> dict[str, list[float]]:
    mon = monitor(s)
    out: dict[str, list[float]] = {"on": [], "off": [], "cpu on": [], "cpu off": [], "share": []}
    s.run_cell(LOOP.format(n=n, iters=max(2, iters // 10)))  # warm-up
    threads = telemetry_threads(s, board)
    cores = os.cpu_count() or 1
    for i in range(2 * trials):
        mode = ("on", "off")[(i + i // 2) % 2]  # on off off on on off ...: no order bias
        s.run(memory_sampler.set_period, 0.1 if mode == "on" else 0)
        mon.paused = board.paused = mode == "off"
        time.sleep(0.3)
        c0, t0, w0 = cpu_seconds(s), thread_cpu(threads), time.perf_counter()
        per_rank = [float(v) for v in s.run_cell(LOOP.format(n=n, iters=iters))]
        out["cpu " + mode].append((cpu_seconds(s) - c0) / (iters * s.world_size) * 1e3)
        if mode == "on":  # the machine's capacity the telemetry threads took while the loop ran
            out["share"].append(100 * (thread_cpu(threads) - t0) / ((time.perf_counter() - w0) * cores))
        out[mode].append(max(per_rank) / iters * 1e3)  # ms per matmul, slowest rank
    s.run(memory_sampler.set_period, 0.1)
    mon.paused = board.paused = False
    return out


def latency(s: mg.Session, board: MemoryDashboard, trials: int, busy: bool) -> list[float]:
    seen: list[tuple[float, int, int | None]] = []
    lock = threading.Lock()

    def on_devices(change: dict) -> None:
        now = time.time()
        with lock:
            seen.extend((now, d["rank"], d["used"]) for d in change["new"])

    board.observe(on_devices, "devices")
    out = []
    try:
        for i in range(trials):
            rank = i % s.world_size
            time.sleep(0.4)
            base = board.devices[rank]["used"]
            with lock:
                seen.clear()
            t_alloc = float(s.run_cell(ALLOC.format(nbytes=64 * MiB, busy=busy), targets=rank)[0])
            time.sleep(0.3)
            s.run_cell("del _lat", targets=rank)
            with lock:
                hits = [t for t, r, used in seen if r == rank and used is not None and used - base > 62 * MiB]
            out.append((min(hits) - t_alloc) * 1e3 if hits else float("inf"))
    finally:
        board.unobserve(on_devices, "devices")
    return out


def accuracy(s: mg.Session) -> tuple[int, int]:
    s.run_cell("import gc; gc.collect()", targets=0)
    time.sleep(0.4)
    before = mg.memory()[0]["resident_bytes"]
    s.run_cell("_gib = torch.ones(2**28, dtype=torch.float32)", targets=0)  # 1 GiB, written
    time.sleep(0.4)
    after = mg.memory()[0]["resident_bytes"]
    s.run_cell("del _gib", targets=0)
    return before, after


def stats(xs: list[float]) -> str:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return f"{statistics.median(xs):>9.1f} {p90:>9.1f} {xs[-1]:>9.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--iters", type=int, default=60)
    args = ap.parse_args()
    s = mg.init(args.ranks, cpu=True, timeout=60)
    try:
        board = MemoryDashboard(s)
        ov = overhead(s, board, args.trials, args.size, args.iters)
        idle = idle_cost(s, board, 10.0)
        lat_idle = latency(s, board, args.trials, busy=False)
        lat_busy = latency(s, board, max(4, args.trials // 2), busy=True)
        before, after = accuracy(s)
    finally:
        s.shutdown()

    on, off = statistics.median(ov["on"]), statistics.median(ov["off"])
    print(
        f"(a) overhead: {args.ranks} ranks, {args.iters} × matmul {args.size}², ms per matmul on the slowest rank, "
        f"{args.trials} alternating trials each"
    )
    print(f"{'telemetry':<34} {'median':>9} {'min':>9} {'max':>9}")
    print(f"{'off (samplers stopped)':<34} {off:>9.2f} {min(ov['off']):>9.2f} {max(ov['off']):>9.2f}")
    print(f"{'on (10 Hz + reader + dashboard)':<34} {on:>9.2f} {min(ov['on']):>9.2f} {max(ov['on']):>9.2f}")
    cpu_on, cpu_off = statistics.median(ov["cpu on"]), statistics.median(ov["cpu off"])
    print(
        f"slowdown: median {100 * (on / off - 1):+.2f} %, best-of {100 * (min(ov['on']) / min(ov['off']) - 1):+.2f} %"
        "  (target <= 1 %)"
    )
    print(
        f"CPU per matmul (engines + kernel, ms): off {cpu_off:.2f}, on {cpu_on:.2f} ({100 * (cpu_on / cpu_off - 1):+.2f} %)"
    )
    cores = os.cpu_count() or 1
    print(
        f"telemetry threads' CPU during the 'on' loops (samplers + reader + dashboard, by /proc schedstat): "
        f"median {statistics.median(ov['share']):.2f} %, max {max(ov['share']):.2f} % of this {cores}-core machine "
        "(the most the loop can lose to them)"
    )
    print(
        f"idle cluster CPU, % of one core: off {idle['off']:.2f}, on {idle['on']:.2f}; telemetry costs "
        f"{idle['on'] - idle['off']:.2f} % of one core = {(idle['on'] - idle['off']) / cores:.2f} % of this "
        f"{cores}-core machine"
    )
    print()
    print("(b) latency from an allocation on a rank to the dashboard's model, ms (target <= 250)")
    print(f"{'rank state':<34} {'median':>9} {'p90':>9} {'max':>9}")
    print(f"{'idle after the allocation':<34} {stats(lat_idle)}")
    print(f"{'busy in a matmul loop':<34} {stats(lat_busy)}")
    print()
    grown = after - before
    print("(c) accuracy: 1 GiB tensor on rank 0")
    print(f"resident grew by {grown / 2**30:.4f} GiB ({100 * (grown / 2**30 - 1):+.2f} %, target within 5 %)")


if __name__ == "__main__":
    main()
