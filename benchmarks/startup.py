"""Time to a ready cluster: ``mg.init(4)`` vs. the naive ipyparallel recipe, side by side.

"mg.init after %load_ext" is the notebook path: loading the extension starts a spare supervisor that
imports torch in the background, so the timed ``mg.init`` only forks engines and starts the controller.
"mg.init (cold)" has no spare. Ready = engines up, torch imported on them, process group joined. Each trial runs in a fresh Python
process (as a fresh notebook kernel would), trials of the two recipes alternate, and the table shows
the median of ``--repeat`` trials (default 5).

    python benchmarks/startup.py [--ranks 4] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

MGPU = """
import time, jupyter_mgpu as mg
t = time.perf_counter()
s = mg.init({n}, cpu=True, timeout=30)
assert s.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()") == [repr(float({n}))] * {n}
took = time.perf_counter() - t
s.shutdown()
print("RESULT", took)
"""

PREWARMED = """
import time, jupyter_mgpu as mg
mg.prewarm()          # what %load_ext jupyter_mgpu does
time.sleep(4)         # the user reads the notebook, types %mgpu_init ...
t = time.perf_counter()
s = mg.init({n}, cpu=True, timeout=30)
assert s.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()") == [repr(float({n}))] * {n}
took = time.perf_counter() - t
s.shutdown()
print("RESULT", took)
"""

NAIVE = """
import socket, time, ipyparallel as ipp
t = time.perf_counter()
cluster = ipp.Cluster(n={n})
rc = cluster.start_and_connect_sync()
dv = rc[:]
dv.scatter("rank", list(range({n})), flatten=True, block=True)
with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]
dv.execute("import torch, torch.distributed as dist\\n"
           f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{{port}}', rank=rank, world_size={n})",
           block=True)
dv.execute("x = torch.ones(1); dist.all_reduce(x)", block=True)
assert dv.pull("x", block=True)[0].item() == {n}
took = time.perf_counter() - t
cluster.stop_cluster_sync()
print("RESULT", took)
"""


def trial(template: str, n: int) -> float:
    out = subprocess.run([sys.executable, "-c", template.format(n=n)], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "JUPYTER_MGPU_FORCE_CPU": "1"})
    for line in out.stdout.splitlines():
        if line.startswith("RESULT"):
            return float(line.split()[1])
    raise RuntimeError(f"trial failed:\n{out.stdout}\n{out.stderr}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    recipes = {"mg.init (cold)": MGPU, "mg.init after %load_ext": PREWARMED, "naive ipyparallel": NAIVE}
    times: dict[str, list[float]] = {k: [] for k in recipes}
    for _ in range(args.repeat):
        for name, template in recipes.items():
            times[name].append(trial(template, args.ranks))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"startup to ready, {args.ranks} ranks, median of {args.repeat} (fresh process per trial)")
    print(f"{'recipe':<26} {'median s':>9} {'min s':>7} {'max s':>7} {'vs naive':>9}")
    for k, v in times.items():
        print(f"{k:<26} {med[k]:>9.2f} {min(v):>7.2f} {max(v):>7.2f} {med['naive ipyparallel'] / med[k]:>8.1f}x")


if __name__ == "__main__":
    main()
