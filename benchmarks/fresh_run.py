"""What a fresh program costs: one small torchrun-style script (init_process_group, an all_reduce,
destroy_process_group) run

- with ``%mgpu_run`` on the session's ranks (each run starts as a fresh program: user modules, settings,
  seeds and library state reset around it), and the rank side's reset alone;
- with ``%mgpu_run --fresh`` on brand-new engine processes, started from the warm spare and, cold,
  with no spare;
- with ``torchrun --nproc-per-node N`` (the baseline: new worker processes, as a shell would start them),

side by side in one run, the median of ``--repeat`` runs each.

    python benchmarks/fresh_run.py [--ranks 2 4] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group()
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size()
dist.destroy_process_group()
"""


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return 1000 * statistics.median(out)


def _reset_alone() -> float:
    """Seconds the rank side spends entering and leaving a fresh program around nothing."""
    import time

    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.execution import namespace_transfer
    from jupyter_mgpu.engine.program import fresh_program

    st = rank_state.get()
    env = fresh_program.run_environment(False, st.rank, st.rundir)
    t = time.perf_counter()
    with fresh_program.FreshRun(env, namespace_transfer.user_ns()):
        pass
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")
    import jupyter_mgpu as mg
    from jupyter_mgpu.cluster.spare import discard_spare, prewarm

    folder = tempfile.mkdtemp()
    script = os.path.join(folder, "small.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows = []
    for n in args.ranks:
        s = mg.init(n, cpu=True, restart=True)
        try:
            s.run_script(script)  # warm: first imports
            in_session = _median_ms(lambda: s.run_script(script), max(args.repeat, 10))
            reset = 1000 * statistics.median(max(s.run(_reset_alone)) for _ in range(max(args.repeat, 10)))
            prewarm()
            time.sleep(3)  # the spare imports torch meanwhile, as while a user reads
            warm = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                s.run_script(script, fresh=True)  # leaves a new spare behind
                warm.append(time.perf_counter() - t)
                time.sleep(3)
            cold = []
            for _ in range(args.repeat):
                discard_spare()
                t = time.perf_counter()
                s.run_script(script, fresh=True)
                cold.append(time.perf_counter() - t)
            discard_spare()
        finally:
            s.shutdown()
        torchrun = _median_ms(
            lambda: subprocess.run(
                [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n), script],
                env=env,
                check=True,
                capture_output=True,
                cwd=folder,
            ),
            args.repeat,
        )
        rows += [
            (n, "%mgpu_run (session's ranks, fresh program)", in_session),
            (n, "  of which the reset on each rank", reset),
            (n, "%mgpu_run --fresh (new engines, warm spare)", 1000 * statistics.median(warm)),
            (n, "%mgpu_run --fresh (new engines, no spare)", 1000 * statistics.median(cold)),
            (n, "torchrun --nproc-per-node N (baseline)", torchrun),
        ]
    print(f"\n{'ranks':>5}  {'what':<46} {'median ms':>10}  {'vs torchrun':>11}")
    for n, what, ms in rows:
        base = next(m for r, w, m in rows if r == n and w.startswith("torchrun"))
        print(f"{n:>5}  {what:<46} {ms:>10.1f}  {ms / base:>10.2f}×")


if __name__ == "__main__":
    main()
