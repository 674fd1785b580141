"""Cosine similarity of 1,000,000 embedding pairs (300-d, float32) on 4 ranks, three ways side by side.

- **single process**: ``numpy.load`` both arrays, ``F.cosine_similarity`` with 2 threads.
- **forum recipe**: ``torch.multiprocessing.spawn`` of 4 workers; every worker unpickles the whole
  pickled DataFrame (columns ``a``, ``b`` of per-row arrays), converts its rows one by one with
  ``torch.tensor``, computes, and ``dist.gather``s to rank 0. Unpickling the whole frame in 4 processes
  at 1M rows needs ~6 GB in each of 4 workers; on a small machine it runs on subsets instead, and its
  time is extrapolated only from a stated monotone fit (:func:`forum_estimate`): a least-squares line
  through the work at the subset sizes, used when the work grew with every larger subset; otherwise
  nothing is extrapolated and the comparison is made at the largest subset, where both were measured.
  The output says which, next to the figure.
- **mg.load + mg.map + gather**: each rank memory-maps only its rows of ``a.npy``/``b.npy``.

Each contender runs in its own process(es); peak memory is each process's peak resident set
(``ru_maxrss``, or ``VmHWM`` of the engines after a reset). Timings are the best of ``--repeat``.

    python benchmarks/cosine.py [--rows 1000000] [--dim 300] [--ranks 4] [--forum-rows 50000,100000,200000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

MiB = 2**20


def make_data(folder: str, rows: int, dim: int, seed: int = 0, chunk: int = 100_000) -> None:
    """``a.npy`` and ``b.npy`` of shape (rows, dim), float32, written in chunks (little memory)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for name in ("a", "b"):
        out = np.lib.format.open_memmap(
            os.path.join(folder, f"{name}.npy"), mode="w+", dtype=np.float32, shape=(rows, dim)
        )
        for start in range(0, rows, chunk):
            stop = min(rows, start + chunk)
            out[start:stop] = rng.standard_normal((stop - start, dim), dtype=np.float32)
        out.flush()
        del out


def make_forum_pickle(folder: str, rows: int) -> str:
    """The forum's input: a DataFrame whose cells are the rows' arrays, pickled (first ``rows`` pairs)."""
    import numpy as np
    import pandas as pd

    a = np.load(os.path.join(folder, "a.npy"), mmap_mode="r")[:rows]
    b = np.load(os.path.join(folder, "b.npy"), mmap_mode="r")[:rows]
    df = pd.DataFrame({"a": [np.array(r) for r in a], "b": [np.array(r) for r in b]})
    path = os.path.join(folder, f"pairs_{rows}.pkl")
    df.to_pickle(path)
    return path


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- single process -----------------------------------------------------------------------------
def single(folder: str, threads: int) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    a = torch.from_numpy(np.load(os.path.join(folder, "a.npy")))
    b = torch.from_numpy(np.load(os.path.join(folder, "b.npy")))
    t1 = time.perf_counter()
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        sims = F.cosine_similarity(a, b, dim=1)
        best = min(best, time.perf_counter() - t)
    total = t1 - t0 + best
    np.save(os.path.join(folder, "single.npy"), sims.numpy())
    return {"total": total, "compute": best, "peaks": [peak_rss()]}


# -- the forum recipe -----------------------------------------------------------------------------
def forum_worker(rank: int, world: int, pkl: str, port: int, out: str) -> None:
    import numpy as np
    import pandas as pd
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dist.barrier()
    t0 = time.perf_counter()
    df = pd.read_pickle(pkl)  # every rank reads the whole dataframe
    mine = df.iloc[np.array_split(np.arange(len(df)), world)[rank]]
    a = torch.stack([torch.tensor(row) for row in mine["a"]])  # converted row by row
    b = torch.stack([torch.tensor(row) for row in mine["b"]])
    sims = F.cosine_similarity(a, b, dim=1)
    sizes = [len(p) for p in np.array_split(np.arange(len(df)), world)]
    parts = [torch.empty(n) for n in sizes] if rank == 0 else None
    if rank == 0:
        parts[0] = sims
        for r in range(1, world):
            dist.recv(parts[r], r)
        np.save(out, torch.cat(parts).numpy())
    else:
        dist.send(sims, 0)
    dist.barrier()
    work = time.perf_counter() - t0  # read + convert + compute + gather
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump({"peak": peak_rss(), "work": work}, f)
    dist.destroy_process_group()


def forum(pkl: str, world: int, out: str) -> dict:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    t0 = time.perf_counter()
    mp.spawn(forum_worker, args=(world, pkl, port, out), nprocs=world, join=True)
    took = time.perf_counter() - t0
    peaks, work = [], 0.0
    for r in range(world):
        with open(f"{out}.rank{r}.json") as f:
            got = json.load(f)
        peaks.append(got["peak"])
        work = max(work, got["work"])
    return {"total": took, "work": work, "peaks": peaks}


# -- jupyter_mgpu ---------------------------------------------------------------------------------
def with_mgpu(folder: str, ranks: int, repeat: int, session: object = None) -> dict:
    import numpy as np
    import torch.nn.functional as F

    import jupyter_mgpu as mg
    from jupyter_mgpu.engine.records import telemetry
    from jupyter_mgpu.session.lifecycle import start_session

    s = session or mg.current(required=False)
    started = None
    if s is None or s.world_size != ranks:  # (a notebook's own session of another size is left alone)
        t = time.perf_counter()
        s = start_session(ranks, cpu=True, timeout=60)
        started = time.perf_counter() - t
    best_total = best_compute = float("inf")
    peaks = None
    for _ in range(repeat):
        s.run(telemetry.reset_peak)
        t0 = time.perf_counter()
        a = mg.load(os.path.join(folder, "a.npy"), placement=mg.Shard(0), session=s)
        b = mg.load(os.path.join(folder, "b.npy"), placement=mg.Shard(0), session=s)
        t1 = time.perf_counter()
        sims = mg.map(F.cosine_similarity, a, b, dim=1)
        t2 = time.perf_counter()
        result = sims.gather().clone()
        t3 = time.perf_counter()
        peaks = [st["VmHWM"] for st in s.run(telemetry._proc_status)]
        best_total = min(best_total, t3 - t0)
        best_compute = min(best_compute, t2 - t1)
        del a, b, sims
    np.save(os.path.join(folder, "mgpu.npy"), result.numpy())
    return {
        "total": best_total,
        "compute": best_compute,
        "peaks": peaks,
        "start": started,
        "controller_peak": peak_rss(),
        "session": s,
        "started_here": started is not None,
    }


def _subprocess(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True, check=False
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"{args[0]} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(lines[-1][7:])


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ``y = a + b·x`` through ``points`` (x, y)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def forum_estimate(fits: list[tuple[int, dict]], rows: int) -> dict:
    """The forum recipe at ``rows`` from its runs on subsets ``fits`` ([(rows, result)], sorted).

    Measured when a subset had every row. Otherwise extrapolated only from a stated monotone fit: a
    least-squares line through the work (unpickle, convert, compute, gather) against the rows, used
    when the work grew with every larger subset and the line slopes up, plus the start-up (spawn,
    imports, process group) measured once. Else ``method`` is "not extrapolated" and the comparison
    is made at the largest subset (``at``), where everything was measured.
    """
    n_max, r_max = fits[-1]
    sizes = ", ".join(f"{n:,}" for n, _ in fits)
    works = ", ".join(f"{r['work']:.1f}" for _, r in fits)
    if n_max >= rows:
        return {
            "method": "measured",
            "at": rows,
            "total": r_max["total"],
            "peaks": r_max["peaks"],
            "note": f"measured at {rows:,} rows",
        }
    grows = len(fits) >= 2 and all(b[1]["work"] > a[1]["work"] for a, b in zip(fits, fits[1:]))
    a, b = fit_line([(float(n), r["work"]) for n, r in fits]) if len(fits) >= 2 else (0.0, 0.0)
    if not grows or b <= 0:
        why = "only one size" if len(fits) < 2 else f"its work at {sizes} rows took {works} s, not growing with rows"
        return {
            "method": "not extrapolated",
            "at": n_max,
            "total": r_max["total"],
            "peaks": r_max["peaks"],
            "note": f"measured at {n_max:,} rows and not extrapolated ({why}); the comparison is made at "
            f"{n_max:,} rows",
        }
    start = min(r["total"] - r["work"] for _, r in fits)
    (n1, r1) = fits[0]
    peaks = [p2 + max(0.0, (p2 - p1) / (n_max - n1)) * (rows - n_max) for p1, p2 in zip(r1["peaks"], r_max["peaks"])]
    return {
        "method": "extrapolated",
        "at": rows,
        "total": start + a + b * rows,
        "peaks": peaks,
        "note": f"extrapolated to {rows:,} rows from a least-squares line through its work at {sizes} rows "
        f"({works} s; it grows with the rows): {a:.2f} s + {b * 1e6:.2f} s per million rows, "
        f"plus its start-up ({start:.1f} s); peak memory along the line through the two ends",
    }


def _subset(folder: str, rows: int) -> str:
    """A folder with the first ``rows`` pairs of ``folder``'s a.npy and b.npy."""
    import numpy as np

    sub = os.path.join(folder, f"first_{rows}")
    os.makedirs(sub, exist_ok=True)
    for name in ("a", "b"):
        np.save(os.path.join(sub, f"{name}.npy"), np.load(os.path.join(folder, f"{name}.npy"), mmap_mode="r")[:rows])
    return sub


def run(
    rows: int = 1_000_000,
    dim: int = 300,
    ranks: int = 4,
    forum_rows: tuple[int, ...] = (50_000, 100_000, 200_000),
    repeat: int = 2,
    folder: str | None = None,
    threads: int = 2,
) -> dict:
    """Measure all three; returns the table rows and the comparison (printed by :func:`print_table`)."""
    import numpy as np

    own = folder is None
    folder = folder or tempfile.mkdtemp(prefix="mgpu-cosine-")
    try:
        make_data(folder, rows, dim)
        single_res = min(
            (_subprocess(["--single", folder, str(threads)]) for _ in range(repeat)), key=lambda r: r["total"]
        )
        mg_res = with_mgpu(folder, ranks, repeat)
        ref = np.load(os.path.join(folder, "single.npy"))
        got = np.load(os.path.join(folder, "mgpu.npy"))
        mg_err = float(np.abs(ref - got).max())
        fits = []
        forum_err = 0.0
        for n in sorted(set(min(r, rows) for r in forum_rows)):
            pkl = make_forum_pickle(folder, n)
            out = os.path.join(folder, f"forum_{n}.npy")
            res = min((_subprocess(["--forum", pkl, str(ranks), out]) for _ in range(repeat)), key=lambda r: r["total"])
            forum_err = max(forum_err, float(np.abs(np.load(out) - ref[:n]).max()))
            fits.append((n, res))
            os.unlink(pkl)
        forum_res = forum_estimate(fits, rows)
        mg_at = mg_res
        if forum_res["at"] < rows:  # compare where the forum recipe really ran
            mg_at = with_mgpu(_subset(folder, forum_res["at"]), ranks, repeat, mg_res["session"])
        table = [
            {
                "name": "one process",
                "total": single_res["total"],
                "compute": single_res["compute"],
                "peaks": single_res["peaks"],
                "err": 0.0,
                "note": f"np.load + F.cosine_similarity, {threads} threads",
            },
            {
                "name": "forum recipe",
                "total": forum_res["total"],
                "compute": None,
                "peaks": forum_res["peaks"],
                "err": forum_err,
                "note": f"{ranks} spawned workers, each unpickles the whole dataframe and converts "
                f"its rows one by one; {forum_res['note']}",
            },
            {
                "name": "mg.load + mg.map + gather",
                "total": mg_res["total"],
                "compute": mg_res["compute"],
                "peaks": mg_res["peaks"],
                "err": mg_err,
                "note": f"{ranks} ranks, session running"
                + (f"; mg.init took {mg_res['start']:.1f} s" if mg_res["start"] else ""),
            },
        ]
        if mg_res["started_here"]:
            mg_res["session"].shutdown()
        return {
            "rows": table,
            "method": forum_res["method"],
            "at": forum_res["at"],
            "forum_total": forum_res["total"],
            "mg_total_at": mg_at["total"],
            "start": mg_res["start"],
        }
    finally:
        if own:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


def _times(ratio: float) -> str:
    """``ratio`` (forum time / mg time) as "N× faster" or "N× slower"."""
    return f"{ratio:.1f}× faster" if ratio >= 1 else f"{1 / ratio:.1f}× slower"


WIDTH = 100  # every line of the printed table fits a notebook cell without wrapping


def print_table(result: dict, rows: int, dim: int) -> str:
    """The result as text (also returned): the table, numbered notes, then the comparison and how it was made."""
    import textwrap

    single, forum_row, mgpu = result["rows"]
    lines = [
        f"cosine similarity of {rows:,} pairs × {dim} float32",
        f"{'recipe':<31} {'wall s':>7} {'compute s':>10}  {'peak MiB per process':<24} {'max |err|':>9}",
    ]
    for i, r in enumerate(result["rows"], 1):
        peaks = "/".join(f"{p / MiB:.0f}" for p in r["peaks"])
        comp = f"{r['compute']:.3f}" if r["compute"] is not None else "-"
        lines.append(f"{r['name'] + f' [{i}]':<31} {r['total']:>7.2f} {comp:>10}  {peaks:<24} {r['err']:>9.2e}")
    for i, r in enumerate(result["rows"], 1):
        lines += textwrap.wrap(f"[{i}] {r['note']}", WIDTH, subsequent_indent="    ")
    at, method = result["at"], result["method"]
    speedup = result["forum_total"] / result["mg_total_at"]
    how = {
        "measured": f"both measured at {at:,} rows",
        "extrapolated": "the forum recipe's time extrapolated, see [2]",
        "not extrapolated": f"both measured at {at:,} rows: the forum recipe's timings do not grow with the "
        "rows, so they are not extrapolated, see [2]",
    }[method]
    lines += textwrap.wrap(
        f"end to end: mg is {_times(speedup)} than the forum recipe ({how})", WIDTH, subsequent_indent="    "
    )
    if result.get("start") and method != "not extrapolated":
        lines.append(
            f"counting the cluster's start (mg.init {result['start']:.1f} s): "
            f"{_times(result['forum_total'] / (result['mg_total_at'] + result['start']))}"
        )
    lines.append(
        f"against one process: mg end to end {single['total'] / mgpu['total']:.2f}× its speed, "
        f"mg.map's compute {mgpu['compute'] / single['compute']:.2f}× its time"
    )
    lines.append(f"results equal within float32 tolerance: {max(forum_row['err'], mgpu['err']) < 1e-5}")
    text = "\n".join(lines)
    print(text)
    return text


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--single":
        res = single(argv[1], int(argv[2]))
        print("RESULT " + json.dumps(res))
        return
    if argv and argv[0] == "--forum":
        res = forum(argv[1], int(argv[2]), argv[3])
        print("RESULT " + json.dumps(res))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=300)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument(
        "--forum-rows",
        default="50000,100000,200000",
        help="sizes the forum recipe runs at (all rows: measured; fewer: extrapolated if its times grow)",
    )
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=2, help="threads of the single process (cores)")
    args = p.parse_args(argv)
    os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")
    result = run(
        args.rows,
        args.dim,
        args.ranks,
        tuple(int(x) for x in args.forum_rows.split(",")),
        args.repeat,
        threads=args.threads,
    )
    print_table(result, args.rows, args.dim)


if __name__ == "__main__":
    main()
