"""Controller <-> engine transfer: mg.scatter / DistTensor.gather vs ipyparallel push/pull vs memcpy.

Side by side in one run on the same machine, ``--size`` MiB (default 1024) of float32 over
``--ranks`` ranks (default 4), each measured ``--trials`` times (best and median reported):

- ``memcpy (warm)``: ``dst.copy_(src)`` in this process into an already-touched buffer;
- ``memcpy (fresh)``: ``torch.empty`` + ``copy_`` — the same bytes landing in new pages, which is
  what any transfer into new memory also pays; ``memcpy (fresh huge pages)``: the same into new
  memory advised as transparent huge pages (``transfer.new_tensor``), the cheapest new memory there is:
  the ceiling for a transfer into new memory on this machine (zeroing the pages + copying);
- ``mg.scatter``: S(0), the kernel copying each slice straight into the rank's shard block (by address,
  ``tensors/process_copy.py``): into new blocks (the ranks' block caches emptied first), then again after freeing
  the previous copy (its blocks are reused, warm, as in a loop); ``gather()`` (the kernel reads each
  shard into a new tensor: fresh pages) and ``gather(out=)`` (into a preallocated tensor);
- ``ipyparallel push`` / ``pull``: the ipyparallel default, one torch tensor slice per engine
  (pickled), pull followed by ``torch.cat``;
- with ``--two-hosts`` (root): the same scatter and gathers with the notebook on one namespace "host"
  and the ranks on another (``tests/multihost/netns_lab.py``: own network, PID, mount, IPC and UTS
  namespaces, a veth link, engines started over SSH), where no copy by address is possible and the
  bytes go over one authenticated TCP stream per rank (``tensors/sockets.py``).

    python benchmarks/transfer.py [--size 1024] [--ranks 4] [--trials 3] [--two-hosts]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")

import torch

import jupyter_mgpu as mg
from jupyter_mgpu.tensors import shared_blocks as transfer


def _timed(fn, trials):
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def _drop(name):
    globals().pop(name, None)


def _streamed_rows(x, trials: int) -> list[tuple[str, float, float]]:
    """Scatter and gathers of ``x`` in the current session (every rank on another host)."""
    from jupyter_mgpu.tensors import sockets as kernel_sockets

    s = mg.current()
    assert kernel_sockets.streamed_ranks(s) == set(range(s.world_size)), "a rank is on the notebook's host"
    handles = []

    def scatter():
        while handles:
            handles.pop().free()
        handles.append(mg.scatter(x, mg.Shard(0)))

    rows = [("2 hosts: mg.scatter S(0), TCP per rank", *_timed(scatter, trials))]
    X = handles[-1]
    assert torch.equal(X.gather(), x)
    rows.append(("2 hosts: DistTensor.gather()", *_timed(lambda: X.gather(), trials)))
    out = torch.empty_like(x)
    out.zero_()
    rows.append(("2 hosts: DistTensor.gather(out=)", *_timed(lambda: X.gather(out=out), trials)))
    X.free()
    return rows


def _inside(args) -> None:
    """Run on the notebook's namespace host: engines on the other one, print the rows as JSON."""
    x = torch.randn(args.size * 2**20 // 4 // 1024, 1024)
    mg.init(hosts=f"hostb:{args.ranks}", cpu=True, timeout=60)
    try:
        rows = _streamed_rows(x, args.trials)
    finally:
        mg.shutdown()
    print("ROWS " + json.dumps(rows))


def _two_hosts(args) -> list[tuple[str, float, float]]:
    """Build two namespace hosts (notebook on one, engines over SSH on the other) and measure there."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "multihost"))
    from netns_lab import Lab, ensure_packages

    ensure_packages({"/usr/sbin/sshd": "openssh-server", "ssh": "openssh-client"})
    lab = Lab(["hosta", "hostb"], ssh=True)
    try:
        cmd = lab.first.cmd(
            [
                "sh",
                "-c",
                f"cd {lab.workdir} && exec {sys.executable} {Path(__file__).resolve()} "
                f"--inside-two-hosts --size {args.size} --ranks {args.ranks} --trials {args.trials}",
            ]
        )
        run = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=1800,
            env={**os.environ, "HOME": "/root", "JUPYTER_MGPU_FORCE_CPU": "1"},
        )
        line = next((ln for ln in run.stdout.splitlines() if ln.startswith("ROWS ")), None)
        assert line, f"the two-host run failed:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
        return [tuple(r) for r in json.loads(line[5:])]
    finally:
        lab.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="MiB to move (default 1024)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--two-hosts", action="store_true", help="add rows with the ranks on another namespace host")
    ap.add_argument("--inside-two-hosts", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inside_two_hosts:
        return _inside(args)
    nbytes = args.size * 2**20
    x = torch.randn(nbytes // 4 // 1024, 1024)
    s = mg.init(args.ranks, cpu=True)
    rows = []
    try:
        warm = torch.empty_like(x)
        warm.copy_(x)
        rows.append(("memcpy (warm), Tensor.copy_", *_timed(lambda: warm.copy_(x), 3 * args.trials)))  # noqa: F821  (deleted after the timing)
        del warm
        rows.append(("memcpy (fresh pages), empty+copy_", *_timed(lambda: torch.empty_like(x).copy_(x), args.trials)))
        rows.append(
            ("memcpy (fresh huge pages)", *_timed(lambda: transfer.new_tensor(x.shape, x.dtype).copy_(x), args.trials))
        )

        handles = []

        def scatter_again():  # the previous copy is freed first: its blocks are reused, as in a loop
            while handles:
                handles.pop().free()
            handles.append(mg.scatter(x, mg.Shard(0)))

        def scatter_new():  # the previous copy and the cache are freed first: every block is new memory
            while handles:
                handles.pop().free()
            mg.empty_cache()
            t0 = time.perf_counter()
            handles.append(mg.scatter(x, mg.Shard(0)))
            return time.perf_counter() - t0

        first = [scatter_new() for _ in range(args.trials)]
        rows.append(("mg.scatter S(0), new blocks", min(first), statistics.median(first)))
        rows.append(("mg.scatter S(0), again (reused blocks)", *_timed(scatter_again, args.trials)))
        X = handles[-1]
        assert torch.equal(X.gather(), x)
        rows.append(("DistTensor.gather()", *_timed(lambda: X.gather(), args.trials)))
        out = torch.empty_like(x)
        out.zero_()
        rows.append(("DistTensor.gather(out=)", *_timed(lambda: X.gather(out=out), args.trials)))
        for h in handles:
            h.free()

        client, engines = s.cluster.client, [s.cluster.rank_to_engine[r] for r in range(args.ranks)]
        parts = [p.clone() for p in torch.tensor_split(x, args.ranks)]

        def push():
            ars = [client[e].push({"_bench_x": p}, block=False) for e, p in zip(engines, parts)]
            for ar in ars:
                ar.get()

        def pull():
            ars = [client[e].pull("_bench_x", block=False) for e in engines]
            return torch.cat([ar.get() for ar in ars])

        rows.append(("ipyparallel push (torch, pickled)", *_timed(push, args.trials)))
        assert torch.equal(pull(), x)
        rows.append(("ipyparallel pull + torch.cat", *_timed(pull, args.trials)))
        client[engines].execute("del _bench_x", block=True)
    finally:
        s.shutdown()
    assert transfer.open_buffers() == []
    if args.two_hosts:
        rows += _two_hosts(args)

    gbs = {name: nbytes / best / 1e9 for name, best, _ in rows}
    memcpy, fresh = gbs["memcpy (warm), Tensor.copy_"], gbs["memcpy (fresh pages), empty+copy_"]
    huge = gbs["memcpy (fresh huge pages)"]
    push_bw, pull_bw = gbs["ipyparallel push (torch, pickled)"], gbs["ipyparallel pull + torch.cat"]
    print(
        f"\n{args.size} MiB float32, {args.ranks} ranks, best of {args.trials} (median in brackets); "
        f"{os.cpu_count()} cores"
    )
    print(f"{'method':38} {'time s':>14} {'GB/s':>7} {'/memcpy':>8} {'/fresh':>7} {'/huge':>6} {'/ipp':>6}")
    for name, best, med in rows:
        ipp = (
            push_bw
            if "scatter" in name or "push" in name
            else pull_bw
            if ("gather" in name or "pull" in name)
            else None
        )
        if name.startswith("2 hosts"):
            ipp = None  # ipyparallel's pickles were measured on one host
        ratio_ipp = f"{gbs[name] / ipp:6.1f}" if ipp else "     -"
        print(
            f"{name:38} {best:7.3f} ({med:5.3f}) {gbs[name]:7.2f} {gbs[name] / memcpy:8.2f} "
            f"{gbs[name] / fresh:7.2f} {gbs[name] / huge:6.2f} {ratio_ipp}"
        )


if __name__ == "__main__":
    main()
