"""The latency a user feels per cell: an empty ``%%mgpu`` cell and ``%mgpu_run`` of an empty script on
every rank, next to the plain IPython equivalents (an empty cell, ``%run`` of the same script), each
the median of ``--repeat`` runs in one IPython shell (the kernel's messaging, the same for both, is not
in either figure). Tab and Shift-Tab in a ``%%mgpu`` cell, answered by rank 0
(``magics/rank_completion.py``), next to IPython's own answer for the same text in the notebook's
namespace (as ipykernel asks it: jedi on, IPython's default).

    python benchmarks/cell_latency.py [--ranks 4] [--repeat 50]
    python benchmarks/cell_latency.py --ranks 2,4,8,16,32 --repeat 15

With several rank counts it prints one row per count (a fresh session each): an empty plain cell,
ipyparallel's own ``%px pass``, ``%%mgpu pass`` through ipyparallel's queues (the path cells took
before) and through the direct channel (now), ``Session.run`` of a no-op, and the floor under any of
them: a byte echoed by as many forked processes, which on a 2-core machine grows with the ranks too.
Two more columns say where an ``%%mgpu`` cell's time goes: the CPU it costs in all processes (this one,
the controller, the engines) divided by the machine's cores — a cell can never take less wall time
than that — and what the idle cluster burns (heartbeats, telemetry) as a share of one core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any


def _times(fn: Callable[[], object], repeat: int) -> list[float]:
    fn()  # warm: the first call imports and connects
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _completion_rows(ip: Any) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """Tab on ``model.we`` and Shift-Tab on ``model``: the notebook's own model, and rank 0's in a ``%%mgpu`` cell."""
    from IPython.core.completer import provisionalcompleter, rectify_completions

    from jupyter_mgpu.magics.rank_completion import rank_reply

    ip.run_cell("import torch\nmodel = torch.nn.Linear(3, 4)")
    ip.run_cell_magic("mgpu", "", "model = torch.nn.Linear(3, 4)")

    def plain_tab() -> object:
        with provisionalcompleter():
            found = list(rectify_completions("model.we", ip.Completer.completions("model.we", 8)))
        assert any(c.text.endswith("weight") for c in found)
        return found

    def rank_tab() -> object:
        reply = rank_reply("complete", "%%mgpu\nmodel.we", 15)
        assert reply is not None and "weight" in reply["matches"], "rank 0 did not answer within the budget"
        return reply

    def rank_shift_tab() -> object:
        reply = rank_reply("inspect", "%%mgpu\nmodel", 12, detail_level=0)
        assert reply is not None and reply["found"], "rank 0 did not answer within the budget"
        return reply

    return [
        ("Tab completion", plain_tab, rank_tab),
        ("Shift-Tab", lambda: ip.object_inspect_mime("model", detail_level=0), rank_shift_tab),
    ]


def _empty_cell_rows(ip: Any, s: Any, repeat: int) -> dict[str, float]:
    """An empty cell each way on the session now running (ms, medians)."""

    def noop() -> None:
        return None

    view = s.cluster.client[:]
    view.block = True  # %px waits for the engines, as %%mgpu does
    view.activate()  # %px on every engine of this cluster

    def mgpu_via(channel: str) -> Callable[[], object]:
        def run() -> object:
            s.cell_channel = channel
            try:
                return ip.run_cell_magic("mgpu", "", "pass")
            finally:
                s.cell_channel = "direct"

        return run

    ways = {
        "plain cell": lambda: ip.run_cell("pass"),
        "%px pass": lambda: ip.run_cell_magic("px", "", "pass"),
        "%%mgpu via ipyparallel": mgpu_via("ipyparallel"),
        "%%mgpu": mgpu_via("direct"),
        "Session.run": lambda: s.run(noop),
    }
    return {name: statistics.median(_times(fn, repeat)) * 1e3 for name, fn in ways.items()}


def echo_floor(n: int, repeat: int) -> float:
    """The floor under any fan-out to ``n`` processes on this machine (ms, median): one byte to each of
    ``n`` forked processes and one back, over a socket pair each, with no work in between."""
    import os
    import selectors
    import socket

    socks, pids = [], []
    for _ in range(n):
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the child echoes until the parent closes its end
            for sock in [mine, *socks]:  # the other children's ends stay with the parent alone
                sock.close()
            while data := theirs.recv(64):
                theirs.send(data)
            os._exit(0)
        theirs.close()
        socks.append(mine)
        pids.append(pid)
    sel = selectors.DefaultSelector()
    for sock in socks:
        sel.register(sock, selectors.EVENT_READ)

    def round_trip() -> None:
        for sock in socks:
            sock.send(b"x")
        left = n
        while left:
            for key, _ in sel.select():
                left -= len(key.fileobj.recv(64))  # type: ignore[union-attr]

    try:
        return statistics.median(_times(round_trip, repeat * 10)) * 1e3
    finally:
        for sock in socks:
            sock.close()
        for pid in pids:
            os.waitpid(pid, 0)


def _cpu_seconds(procs: list[Any]) -> float:
    """User and system CPU of ``procs`` so far (processes that ended count as nothing more)."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except Exception:
            continue
        total += t.user + t.system
    return total


def cpu_rows(ip: Any, repeat: int) -> dict[str, float]:
    """Per empty ``%%mgpu`` cell: the CPU of every process over the cores (ms); at rest: the cluster's
    CPU as a percentage of one core."""
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    cells = max(repeat, 100)
    before, t = _cpu_seconds(procs), time.perf_counter()
    for _ in range(cells):
        ip.run_cell_magic("mgpu", "", "pass")
    used, wall = _cpu_seconds(procs) - before, time.perf_counter() - t
    time.sleep(4)  # past the controller's quick heartbeat (engine/startup/heart_pace.py)
    before = _cpu_seconds(procs[1:])
    time.sleep(3)
    rest = (_cpu_seconds(procs[1:]) - before) / 3
    cores = os.cpu_count() or 1
    return {
        "%%mgpu mean": wall / cells * 1e3,
        f"CPU/cell / {cores} cores": used / cells / cores * 1e3,
        "idle % of a core": rest * 100,
    }


def scaling(ip: Any, counts: list[int], repeat: int) -> None:
    """The empty-cell table: one row per number of ranks, a fresh session each."""
    import jupyter_mgpu as mg

    rows = []
    for n in counts:
        ip.run_line_magic("mgpu_init", f"{n} --cpu --no-dashboard")
        rows.append((n, _empty_cell_rows(ip, mg.current(), repeat)))
        rows[-1][1].update(cpu_rows(ip, repeat))
        ip.run_line_magic("mgpu_shutdown", "")
        rows[-1][1]["socket echo (floor)"] = echo_floor(n, repeat)
    names = list(rows[0][1])
    print(f"empty cell, CPU ranks (ms): medians of {repeat}; mean and CPU over 100 cells; idle over 3 s at rest")
    print(f"{'ranks':>6}" + "".join(f"{name:>24}" for name in names))
    for n, row in rows:
        print(f"{n:>6}" + "".join(f"{row[name]:>24.2f}" for name in names))
    base = dict(rows[0][1]) if rows[0][0] == 4 else next((r for c, r in rows if c == 4), None)
    if base:
        for name in ("%px pass", "%%mgpu", "socket echo (floor)", next(k for k in base if k.startswith("CPU/cell"))):
            print(f"{name} to 4 ranks: " + ", ".join(f"{n}: {row[name] / base[name]:.2f}x" for n, row in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="4", help="a number of ranks, or several: 2,4,8,16,32 (a table by ranks)")
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args()
    counts = [int(c) for c in a.ranks.split(",")]
    os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "jupyter_mgpu")
    if len(counts) > 1:
        scaling(ip, counts, a.repeat)
        return
    ip.run_line_magic("mgpu_init", f"{counts[0]} --cpu --no-dashboard")
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty.py")
        open(empty, "w").close()
        rows = [
            ("empty cell", lambda: ip.run_cell("pass"), lambda: ip.run_cell_magic("mgpu", "", "pass")),
            ("empty script", lambda: ip.run_line_magic("run", empty), lambda: ip.run_line_magic("mgpu_run", empty)),
            *_completion_rows(ip),
        ]
        print(f"per-cell latency, {counts[0]} CPU ranks, median of {a.repeat} (ms)")
        print(f"{'what':<14}{'plain IPython':>15}{'jupyter_mgpu':>15}{'ratio':>9}")
        for name, plain, ours in rows:
            p = statistics.median(_times(plain, a.repeat)) * 1e3
            m = statistics.median(_times(ours, a.repeat)) * 1e3
            print(f"{name:<14}{p:>15.2f}{m:>15.2f}{m / p:>8.3g}x")
    ip.run_line_magic("mgpu_shutdown", "")


if __name__ == "__main__":
    main()
