"""single, DDP, FSDP, tensor and pipeline parallel on one MLP, measured per rank against the formulas.

The model is sized so that ``single`` (the whole model and its Adam state on one rank) needs about 4×
a rank's ``--mem-per-device`` budget: ``single`` and ``ddp`` (a whole replica per rank) run out of
memory under it, ``fsdp``, ``tp`` and ``pp`` (each holding about 1/P of the model) fit. For every rank
the table prints, per memory category, the measured peak (torch's MemTracker / FSDPMemTracker on the
rank), the formula's figure (``r.expected``) and their ratio, then the device-level peak (RSS above
the rank's baseline), the step time (slowest rank, median of the timed steps), the bytes handed to
collectives per step against the formula, the pipeline bubble (its share of computing + bubble, read
off the ranks' times: ``comparison/pipeline_idle.py``) against (p−1)/(m+p−1), each stage's wall time
split into computing / bubble / other (messages, overhead, waiting for a core), and the final loss's
difference from ``single`` (measured in a second, unbudgeted run of a model small enough for
``single``, since under the budget ``single`` cannot run). It ends with the checks the issue asks for.

    python benchmarks/parallelism.py [--model mlp:1024x64] [--ranks 4] [--mem-per-device 288MiB]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")

import jupyter_mgpu as mg
from jupyter_mgpu.units import format_bytes, parse_size

CATEGORIES = ("params", "grads", "optimizer", "activations", "comm_buffers")
TOLERANCE = 0.25


def mib(v: float | None) -> str:
    return "–" if v is None else f"{v / 2**20:.1f}"


def ratio(m: float | None, e: float | None) -> str:
    return "–" if m is None or not e else f"{m / e:.2f}"


def table(r: mg.CompareResult) -> tuple[list[str], list[str]]:
    """The printed table (markdown) and the list of failed checks."""
    exp = {(e["strategy"], e["rank"]): e for e in r.expected}
    head = (
        ["strategy", "rank", "status"]
        + [f"{c} MiB (exp, ×)" for c in CATEGORIES]
        + ["device peak MiB", "step s", "bytes/step MiB (exp, ×)", "bubble (exp)", "wall: computing/bubble/other"]
        + ["Δ loss vs single"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    bad = []
    for row in r.table:
        e = exp[(row["strategy"], row["rank"])]
        if row["status"] != "ok":
            lines.append(f"| {row['strategy']} | {row['rank']} | {row['note']} |" + " |" * (len(head) - 3))
            continue
        cells = [row["strategy"], str(row["rank"]), "ok"]
        for c in CATEGORIES:
            cells.append(f"{mib(row[c])} ({mib(e[c])}, {ratio(row[c], e[c])})")
            if e[c] and abs(row[c] / e[c] - 1) > TOLERANCE:
                bad.append(
                    f"{row['strategy']} rank {row['rank']} {c}: measured {mib(row[c])} MiB, expected {mib(e[c])} MiB"
                )
        bubble = "–" if row.get("bubble") is None else f"{100 * row['bubble']:.0f}% ({100 * e['bubble']:.0f}%)"
        split = r.schedules[row["strategy"]].split()[row["rank"]] if row["strategy"] in r.schedules else None
        parts = "–" if split is None else "/".join(f"{100 * split[k]:.0f}" for k in ("busy", "bubble", "other")) + "%"
        cells += [
            mib(row["device_peak"]),
            f"{row['step_time']:.2f}" if row["step_time"] else "–",
            f"{mib(row['bytes'])} ({mib(e['bytes'])}, {ratio(row['bytes'], e['bytes'])})",
            bubble,
            parts,
            "–" if row.get("loss_diff") is None else f"{row['loss_diff']:+.1e}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp:1024x64")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mem-per-device", default="288MiB")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--strategies", default="single,ddp,fsdp,tp,pp")
    ap.add_argument("--check-model", default="mlp:256x8", help="small model for the loss check against single")
    args = ap.parse_args()
    budget = parse_size(args.mem_per_device)
    print(
        f"# {args.model}, {args.ranks} ranks × {format_bytes(budget)} budget, batch {args.batch}, "
        f"{args.microbatches} micro-batches, {args.steps} steps, {args.optimizer}"
    )
    start = time.perf_counter()
    with mg.init(args.ranks, cpu=True, mem_per_device=args.mem_per_device, timeout=120) as s:
        r = mg.compare(
            args.model,
            batch=args.batch,
            steps=args.steps,
            strategies=args.strategies,
            microbatches=args.microbatches,
            optimizer=args.optimizer,
            live=False,
            session=s,
        )
        need = next(sum(e[c] for c in CATEGORIES) for e in r.expected if e["strategy"] == r.strategies[0])
        print(
            f"# {r.strategies[0]} needs {format_bytes(need)} by the formulas = {need / budget:.1f}× the budget; "
            f"comparison took {time.perf_counter() - start:.0f} s\n"
        )
    lines, bad = table(r)
    with mg.init(args.ranks, cpu=True, timeout=60) as s:  # loss check: the same maths at a size single can run
        small = mg.compare(
            args.check_model,
            batch=args.batch,
            steps=args.steps,
            strategies=args.strategies,
            microbatches=args.microbatches,
            optimizer=args.optimizer,
            live=False,
            session=s,
        )
    print("\n".join(lines))
    print(
        f"\n# loss after {args.steps} steps vs single on {args.check_model} (no budget): "
        + ", ".join(
            f"{st} {small.loss_diff(st):.1e}"
            for st in small.strategies
            if st != "single" and small.loss_diff(st) is not None
        )
    )
    fit = {st: r.ok(st) for st in r.strategies}
    want = {"single": False, "ddp": False, "fsdp": True, "tp": True, "pp": True}
    for st, ok in fit.items():
        if st in want and ok != want[st]:
            bad.append(f"{st} {'fit' if ok else 'did not fit'} under the budget")
    bad += [f"{st} loss differs from single" for st in small.strategies if st != "single" and not small.matches(st)]
    print("\n# checks: " + ("all passed" if not bad else "FAILED:\n#   " + "\n#   ".join(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
