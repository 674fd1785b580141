"""What watching every collective costs (issue 34): each rank numbers, fingerprints and compares every
collective its code calls, and says which one it waits in (``engine/watch/collective_watch.py``). Measured
side by side on the same ranks, in one run: torch.distributed's own function (the baseline), the
watched one with the fingerprint comparison (the default), and the watched one with
``--no-collective-checks``; the goals are at most 3 % on a 1 MiB all_reduce and 50 µs a call.

The collectives torch issues from C++ (DDP's gradient buckets here) are watched through c10d's flight
recorder, on from the engines' start: the DDP-step row compares a training step on the session's ranks
(recorder on; with the fingerprint comparison, and without) against the same step on a second session
started with the recorder off (``TORCH_FR_BUFFER_SIZE=0``: torch as it runs without us), both sessions
measured in one run, their rounds interleaved; the goal is within 2 %.

Each figure is the per-call time of the slowest rank over ``--iters`` calls after a warm-up, the
best of ``--repeat`` rounds whose three variants run interleaved (on a machine with fewer cores than
ranks, a round's figures swing by more than the overhead; the best round of each is the steadiest).

    python benchmarks/collective_checks.py [--ranks 4] [--iters 500] [--repeat 11]
"""

from __future__ import annotations

import argparse
import os

CASES = [
    ("all_reduce", 262144, "1 MiB", False),
    ("all_reduce", 4, "16 B", False),
    ("broadcast", 262144, "1 MiB", False),
    ("barrier", 0, "-", False),
    # on a group where torch also issues collectives (a DDP model's): a call whose peers have not written
    # their record waits for them, asking them after 20 ms (engine/watch/peer_collectives.py); measured with
    # the check on for every call (in a program it stops after 8 calls in a row whose peers called through
    # Python, until torch runs collectives on the group again)
    ("all_reduce", 262144, "1 MiB", True),
    ("all_reduce", 4, "16 B", True),
]
VARIANTS = ("plain", "checked", "unchecked")


def _per_call(op: str, numel: int, iters: int, variant: str, mixed: bool = False) -> float:
    """Seconds a call of ``op`` takes on this rank, for one variant; ``mixed``: on a group where torch issued
    collectives the watch did not see."""
    import time

    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.watch import collective_numbers
    from jupyter_mgpu.engine.watch import collective_watch as watch

    key = (rank_state.get().pg_generation, str(getattr(dist.group.WORLD, "group_name", "0")))
    unseen = collective_numbers.unseen if mixed else set()  # mixed: the peers are asked on every call

    fn = watch._originals[op] if variant == "plain" else getattr(dist, op)
    watch.set_checks(variant != "unchecked")
    x = torch.ones(numel)
    args: tuple = {"all_reduce": (x,), "broadcast": (x, 0), "barrier": ()}[op]
    try:
        for _ in range(10):
            fn(*args)
        watch._originals["barrier"]()
        start = time.perf_counter()
        for _ in range(iters):
            unseen.add(key)
            fn(*args)
        return (time.perf_counter() - start) / iters
    finally:
        watch.set_checks(True)
        collective_numbers.unseen.discard(key)


def _watch_alone(iters: int, checks: bool) -> float:
    """Seconds the watch itself takes a call on this rank: the watched wrapper around a function that
    does nothing (numbering, fingerprint, the table, the line), without a collective's own noise."""
    import time

    import torch

    from jupyter_mgpu.engine.watch import collective_watch as watch

    def nothing(tensor, op=None, group=None, async_op=False):  # all_reduce's parameters
        return None

    wrapped = watch._wrap("all_reduce", nothing)
    watch.set_checks(checks)
    x = torch.ones(262144)
    try:
        start = time.perf_counter()
        for _ in range(iters):
            wrapped(x)
        return (time.perf_counter() - start) / iters
    finally:
        watch.set_checks(True)


def _ddp_steps(iters: int, checks: bool) -> float:
    """Seconds one DDP training step (4 linear layers of 512, a batch of 64, SGD) takes on this rank."""
    import time

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from jupyter_mgpu.engine.watch import collective_watch as watch

    global _ddp
    try:
        model, opt = _ddp  # type: ignore[name-defined]
    except NameError:
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        _ddp = (model, opt)
    watch.set_checks(checks)
    x = torch.randn(64, 512)
    try:
        for _ in range(3):
            model(x).sum().backward()
        start = time.perf_counter()
        for _ in range(iters):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        return (time.perf_counter() - start) / iters
    finally:
        watch.set_checks(True)


def _ddp_row(s, args) -> tuple[float, float, float]:
    """A DDP step's µs: recorder off (a second session), watched, watched without the comparison."""
    from jupyter_mgpu.session.lifecycle import start_session

    saved = os.environ.get("TORCH_FR_BUFFER_SIZE")
    os.environ["TORCH_FR_BUFFER_SIZE"] = "0"  # the engines keep a size that is set: the recorder off
    try:
        bare = start_session(args.ranks, cpu=True)
    finally:
        if saved is None:
            os.environ.pop("TORCH_FR_BUFFER_SIZE", None)
        else:
            os.environ["TORCH_FR_BUFFER_SIZE"] = saved
    times: dict[str, list[float]] = {"off": [], "watched": [], "unchecked": []}
    try:
        steps = max(5, args.iters // 25)
        for _ in range(args.repeat):
            times["off"].append(max(bare.run(_ddp_steps, steps, True)))
            times["watched"].append(max(s.run(_ddp_steps, steps, True)))
            times["unchecked"].append(max(s.run(_ddp_steps, steps, False)))
    finally:
        bare.shutdown()
    best = {k: 1e6 * min(v) for k, v in times.items()}
    return best["off"], best["watched"], best["unchecked"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args()
    os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")
    import jupyter_mgpu as mg

    s = mg.init(args.ranks, cpu=True)
    rows = []
    try:
        for op, numel, size, mixed in CASES:
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for _ in range(args.repeat):
                for variant in VARIANTS:
                    times[variant].append(max(s.run(_per_call, op, numel, args.iters, variant, mixed)))
            med = {v: 1e6 * min(t) for v, t in times.items()}
            rows.append((op + ("†" if mixed else ""), size, med["plain"], med["checked"], med["unchecked"]))
        alone = {c: 1e6 * min(max(s.run(_watch_alone, 5000, c)) for _ in range(5)) for c in (True, False)}
        off, watched, unchecked = _ddp_row(s, args)
        rows.append(("DDP step", "4×512", off, watched, unchecked))
    finally:
        s.shutdown()
    print(
        f"\n{args.ranks} ranks, CPU virtual devices (gloo), µs per call, best of {args.repeat} rounds of {args.iters} calls"
    )
    print(f"{'collective':<11} {'size':>6} {'torch':>9} {'watched':>9} {'overhead':>9} {'%':>6} {'unchecked':>10}")
    for op, size, plain, checked, unchecked in rows:
        extra = checked - plain
        print(
            f"{op:<11} {size:>6} {plain:>9.1f} {checked:>9.1f} {extra:>9.1f} {100 * extra / plain:>5.1f}% {unchecked:>10.1f}"
        )
    print("(the DDP step's torch column: a second session with c10d's flight recorder off)")
    print("(†: every call checked against its peers, as right after torch ran collectives on the group)")
    print(
        f"the watch alone, per call on each rank: {alone[True]:.1f} µs with the fingerprint comparison, "
        f"{alone[False]:.1f} µs without"
    )


if __name__ == "__main__":
    main()
