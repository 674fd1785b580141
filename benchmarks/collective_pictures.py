"""What ``%mgpu_collective`` sends the browser at many ranks, and how long the notebook takes to draw it:
the before/after figure (rows the same as the rank above folded into one line, ``widgets/row_folding.py``)
next to the same figure unfolded, and the schedule player (first frame, then each step's changes, its
entries as short codes the browser draws: ``widgets/slot_codes.py``). Demo inputs, built in this
process: no ranks needed.

Each number is shown next to the same number measured, in this run, on the package as it was at
``--baseline`` (a git revision, taken from this repository with ``git archive`` into a temporary
directory and measured in a subprocess; default: before the player sent codes), as ``before → now``.
``--baseline none`` measures this tree alone.

    python benchmarks/collective_pictures.py [--ranks 16,32,64] [--baseline REV|none]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("all_gather", "all_reduce", "all_to_all", "reduce_scatter", "broadcast", "gather")
SPLITTING = ("all_to_all", "reduce_scatter")
ROOTED = ("broadcast", "gather")
BEFORE_CODES = "1cab501~1"  # the last revision whose player sent its entries as SVG pieces


def _result(name: str, n: int) -> Any:
    from jupyter_mgpu.collectives.collective_run import CollectiveResult, reference
    from jupyter_mgpu.ops import collective_schedule as sched
    from jupyter_mgpu.ops import demo_inputs as demo

    dims = demo.DEFAULT_SHAPE
    if name in SPLITTING:
        dims = (math.ceil(dims[0] / n) * n, dims[1])
    xs = [demo.demo_tensor(r, dims) for r in range(n)]
    before = [sched.before_entries(name, x, r, 0, n) for r, x in enumerate(xs)]
    op = "sum" if name in ("all_reduce", "reduce_scatter") else None
    src = 0 if name in ROOTED else None
    return CollectiveResult(name, op, src, xs, before, reference(name, xs, "sum", 0), 1e-4, "gloo", "demo")


def _figure(res: Any, fold: bool) -> tuple[str, float]:
    from jupyter_mgpu.widgets.collective_view import before_after_svg

    t = time.perf_counter()
    svg = before_after_svg(
        res.name, res.op, res.src, res.inputs, res.after, res.backend, res.seconds, res._tracked(), fold=fold
    )
    return svg, time.perf_counter() - t


def _height(svg: str) -> float:
    found = re.search(r"height='([\d.]+)'", svg)
    return float(found.group(1)) if found else math.nan


def measure(ranks: list[int]) -> list[dict[str, Any]]:
    """Every collective at every size: the figure's and the unfolded figure's size and height, the time
    to draw the figure, the player's widget state (JSON, as the notebook sends it less binary buffers),
    the time to build the player and the height of its frames."""
    _result("all_gather", 4).animation()  # the widget machinery imported and set up: not timed below
    rows = []
    for name in NAMES:
        for n in ranks:
            res = _result(name, n)
            res._tracked()  # the schedule, shared by both figures and the player, run once
            (flat, _), (svg, took) = _figure(res, False), _figure(res, True)
            t = time.perf_counter()
            player = res.animation()
            built = time.perf_counter() - t
            state = {k: v for k, v in player.get_state().items() if not isinstance(v, (bytes, memoryview))}
            rows.append(
                {
                    "name": name,
                    "n": n,
                    "figure": len(svg),
                    "unfolded": len(flat),
                    "height": _height(svg),
                    "unfolded_height": _height(flat),
                    "figure_s": took,
                    "player": len(json.dumps(state)),
                    "player_s": built,
                    "player_height": _height(player.frames[0]),
                }
            )
    return rows


def baseline(rev: str, ranks: list[int]) -> list[dict[str, Any]] | None:
    """:func:`measure` run on the package at git revision ``rev`` (None, said on stderr, if it cannot)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", rev, "jupyter_mgpu"], cwd=ROOT, capture_output=True)
        if archive.returncode:
            print(f"no baseline: git archive {rev}: {archive.stderr.decode().strip()}", file=sys.stderr)
            return None
        tar = Path(tmp) / "old.tar"
        tar.write_bytes(archive.stdout)
        with tarfile.open(tar) as t:
            t.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": tmp}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--ranks", ",".join(map(str, ranks)), "--json"]
        out = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
        if out.returncode:
            print(f"no baseline: measuring {rev} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
            return None
        return list(json.loads(out.stdout))


def _pair(before: float | None, now: float, fmt: str) -> str:
    return f"{before:{fmt}} → {now:{fmt}}" if before is not None else f"{now:{fmt}}"


def table(rows: list[dict[str, Any]], base: list[dict[str, Any]] | None) -> str:
    """The rows as a Markdown table, each number after the baseline's (``before → now``)."""
    old = {(r["name"], r["n"]): r for r in base or []}
    out = [
        "| collective | ranks | figure kB (unfolded) | figure height px (unfolded) | figure s | player kB | player s "
        "| player frame height px |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = old.get((r["name"], r["n"]))

        def was(key: str, b: dict[str, Any] | None = b) -> float | None:
            return b[key] if b else None

        kb = {k: r[k] / 1e3 for k in ("figure", "unfolded", "player")}
        old_kb = {k: (b[k] / 1e3 if b else None) for k in ("figure", "unfolded", "player")}
        out.append(
            f"| {r['name']} | {r['n']} | {_pair(old_kb['figure'], kb['figure'], '.0f')} "
            f"({_pair(old_kb['unfolded'], kb['unfolded'], '.0f')}) "
            f"| {_pair(was('height'), r['height'], '.0f')} ({_pair(was('unfolded_height'), r['unfolded_height'], '.0f')}) "
            f"| {_pair(was('figure_s'), r['figure_s'], '.2f')} | {_pair(old_kb['player'], kb['player'], '.0f')} "
            f"| {_pair(was('player_s'), r['player_s'], '.2f')} | {_pair(was('player_height'), r['player_height'], '.0f')} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--ranks", default="16,32,64")
    parser.add_argument("--baseline", default=BEFORE_CODES, help="git revision to compare with, or none")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the baseline's subprocess
    args = parser.parse_args()
    ranks = [int(n) for n in args.ranks.split(",")]
    if args.json:
        print(json.dumps(measure(ranks)))
        return
    base = baseline(args.baseline, ranks) if args.baseline != "none" else None
    rows = measure(ranks)
    if base is not None:
        print(f"before: {args.baseline} (git archive, measured now); now: this tree\n")
    print(table(rows, base))


if __name__ == "__main__":
    main()
