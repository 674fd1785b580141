"""Time to a ready cluster: ``mg.init(4)`` vs. the naive ipyparallel recipe, side by side, by phase.

"mg.init after %load_ext" is the notebook path: loading the extension starts a spare supervisor that
imports torch in the background, so the timed ``mg.init`` only forks engines and starts the controller.
"mg.init (cold)" has no spare. Ready = engines up, torch imported on them, process group joined, one
all_reduce answered. Each trial runs in a fresh Python process (as a fresh notebook kernel would),
trials of the recipes alternate, and the tables show medians of ``--repeat`` trials (default 5).

The phase table says when each phase began and ended, in seconds from the call (negative: before it,
in the spare supervisor at ``%load_ext``), from the marks every process of the start writes
(``jupyter_mgpu/engine/records/startup_marks.py``); the naive recipe's steps are timed in its script.

``--first-start`` adds "mg.init first start": a cold ``mg.init`` as right after ``pip install``, with
an empty shim cache (its own ``XDG_CACHE_HOME`` per trial, so other users of ~/.cache are untouched)
and the page cache dropped before each trial where this user may (root), else it says it could not.

    python benchmarks/startup.py [--ranks 4] [--repeat 5] [--first-start]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

MGPU = """
import json, time, jupyter_mgpu as mg
t0 = time.time(); t = time.perf_counter()
s = mg.init({n}, cpu=True, timeout=30)
ready = time.time()
assert s.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()") == [repr(float({n}))] * {n}
took = time.perf_counter() - t
time.sleep(0.3)  # let every rank's sampler write its first record (marked, not timed)
marks = s.cluster.startup_marks(); marks["kernel.ready"] = ready; marks["end"] = t0 + took
budget = s.run_cell("from jupyter_mgpu.engine.shards import budget as _b; _b.mode()", stream=False)
s.shutdown()
print("MARKS", json.dumps({{k: v - t0 for k, v in marks.items()}}))
print("BUDGET", json.dumps(budget))
print("RESULT", took)
"""

PREWARMED = MGPU.replace(
    "t0 = time.time()",
    "mg.prewarm()          # what %load_ext jupyter_mgpu does\n"
    "time.sleep(4)         # the user reads the notebook, types %mgpu_init ...\n"
    "t0 = time.time()",
)

NAIVE = """
import json, socket, time, ipyparallel as ipp
t0 = time.time(); t = time.perf_counter(); marks = {{}}
def mark(name): marks[name] = time.time() - t0
cluster = ipp.Cluster(n={n})   # what start_and_connect_sync does, step by step
cluster.start_controller_sync(); mark("controller.ready")
cluster.start_engines_sync({n}); mark("engines.launched")
rc = cluster.connect_client_sync(); mark("client.connected")
rc.wait_for_engines({n}, block=True); mark("engines.registered")
dv = rc[:]
dv.scatter("rank", list(range({n})), flatten=True, block=True)
with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]
dv.execute("import torch, torch.distributed as dist", block=True); mark("torch.imported")
dv.execute(f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{{port}}', rank=rank, world_size={n})",
           block=True); mark("pg.joined")
dv.execute("x = torch.ones(1); dist.all_reduce(x)", block=True)
assert dv.pull("x", block=True)[0].item() == {n}
took = time.perf_counter() - t; mark("end")
cluster.stop_cluster_sync()
print("MARKS", json.dumps(marks))
print("RESULT", took)
"""

COLD, WARM, FIRST, NAIVE_NAME = "mg.init (cold)", "mg.init after %load_ext", "mg.init first start", "naive ipyparallel"


def _ranks(marks: dict[str, float], prefix: str) -> list[float]:
    return [v for k, v in marks.items() if k.startswith(prefix) and k[len(prefix) :].isdigit()]


def phases(name: str, m: dict[str, float]) -> dict[str, tuple[float, float]]:
    """phase -> (began, ended), seconds from the call."""
    if name == NAIVE_NAME:
        return {
            "controller": (0.0, m["controller.ready"]),
            "engine launch + registration": (m["controller.ready"], m["engines.registered"]),
            "torch import": (m["engines.registered"], m["torch.imported"]),
            "process group": (m["torch.imported"], m["pg.joined"]),
            "first all_reduce": (m["pg.joined"], m["end"]),
            "ready": (0.0, m["end"]),
        }
    out = {"controller": (m["controller.spawned"], m["controller.ready"])}
    out["supervisor start/fork"] = (m.get("supervisor.spawned", m.get("supervisor.main", 0.0)), m["supervisor.forked"])
    if "torch.start" in m:
        out["torch import"] = (m["torch.start"], m["torch.imported"])
    if "shim.settle" in m:
        out["shim wait"] = (m["shim.settle"], m["shim.ready"])
    if "shim.build.start" in m:
        out["shim compile (background)"] = (m["shim.build.start"], m.get("shim.build.done", float("nan")))
    starts = _ranks(m, "ipengine.start.")
    out["engine registration"] = (min(starts), m["engines.registered"])
    out["process group"] = (min(_ranks(m, "pg.start.")), max(_ranks(m, "pg.joined.")))
    tele = _ranks(m, "telemetry.first.")
    if tele:
        out["telemetry ready"] = (m["supervisor.forked"], max(tele))
    out["first all_reduce"] = (m["kernel.ready"], m["end"])
    out["ready"] = (0.0, m["end"])
    return out


def drop_page_cache() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
        return True
    except OSError:
        return False


def trial(template: str, n: int, env_extra: dict | None = None) -> tuple[float, dict[str, float], object]:
    env = {**os.environ, "JUPYTER_MGPU_FORCE_CPU": "1", **(env_extra or {})}
    out = subprocess.run(
        [sys.executable, "-c", template.format(n=n)], capture_output=True, text=True, timeout=300, env=env
    )
    took, marks, budget = None, {}, None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT"):
            took = float(line.split()[1])
        elif line.startswith("MARKS"):
            marks = json.loads(line.split(" ", 1)[1])
        elif line.startswith("BUDGET"):
            budget = json.loads(line.split(" ", 1)[1])
    if took is None:
        raise RuntimeError(f"trial failed:\n{out.stdout}\n{out.stderr}")
    return took, marks, budget


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--first-start",
        action="store_true",
        help="add a first start after install (empty shim cache, page cache dropped where permitted)",
    )
    args = ap.parse_args()
    recipes = {COLD: MGPU, WARM: PREWARMED, NAIVE_NAME: NAIVE}
    if args.first_start:
        recipes = {FIRST: MGPU, **recipes}
    times: dict[str, list[float]] = {k: [] for k in recipes}
    spans: dict[str, dict[str, list[tuple[float, float]]]] = {k: {} for k in recipes}
    budgets: dict[str, set] = {k: set() for k in recipes}
    dropped = []
    for _ in range(args.repeat):
        for name, template in recipes.items():
            extra, cache = None, None
            if name == FIRST:
                cache = tempfile.mkdtemp(prefix="mgpu-first-start-")
                extra = {"XDG_CACHE_HOME": cache}
                dropped.append(drop_page_cache())
            try:
                took, marks, budget = trial(template, args.ranks, extra)
            finally:
                if cache:
                    shutil.rmtree(cache, ignore_errors=True)
            times[name].append(took)
            if budget is not None:
                budgets[name].add(",".join(map(str, budget)) if isinstance(budget, list) else str(budget))
            try:
                for phase, span in phases(name, marks).items():
                    spans[name].setdefault(phase, []).append(span)
            except (KeyError, ValueError) as exc:
                print(f"({name}: a trial lacks the mark {exc})", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"startup to ready, {args.ranks} ranks, median of {args.repeat} (fresh process per trial)")
    print(f"{'recipe':<26} {'median s':>9} {'min s':>7} {'max s':>7} {'vs naive':>9}")
    for k, v in times.items():
        print(f"{k:<26} {med[k]:>9.2f} {min(v):>7.2f} {max(v):>7.2f} {med[NAIVE_NAME] / med[k]:>8.1f}x")
    if args.first_start:
        n_dropped = sum(dropped)
        print(
            f"first start: own empty shim cache per trial; page cache dropped before {n_dropped} of "
            f"{len(dropped)} trials"
            + ("" if n_dropped == len(dropped) else " (could not write /proc/sys/vm/drop_caches: not root)")
        )
    print("\nphases: began → ended, s from the call (median over trials; negative = before it, at %load_ext)")
    for k in recipes:
        modes = "/".join(sorted(budgets[k])) if budgets[k] else ""
        print(f"  {k}" + (f"   (budget mode per rank: {modes})" if modes else ""))
        for phase, vals in spans[k].items():
            b = statistics.median(v[0] for v in vals)
            e = statistics.median(v[1] for v in vals)
            print(f"    {phase:<30} {b:>6.2f} → {e:>5.2f}  ({e - b:>5.2f} s)")


if __name__ == "__main__":
    main()
