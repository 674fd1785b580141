"""The first ``%%mgpu`` cell that returns a plotly figure, in a real ipykernel (jupyter_client), from the
moment it is sent until the kernel is idle: the figure travels and the notebook formats it once
(``engine/execution/cell_value.py``), against the baseline of every rank formatting it first, as it did
before (the same cell with ``cell_value.bundle(fig)`` run on each rank: a plotly figure's first bundle
imports nbformat and jsonschema there). Each row on a fresh kernel and fresh ranks; then the same cell
again (warm).

    python benchmarks/first_figure.py [--ranks 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from jupyter_client.manager import KernelManager

FIGURE = "import plotly.graph_objects as go\nfig = go.Figure(go.Bar(x=['a', 'b'], y=[3, 4]))\n"
CELLS = {
    "the notebook formats it (now)": f"%%mgpu\n{FIGURE}fig",
    "every rank formats it (before)": (
        f"%%mgpu\n{FIGURE}from jupyter_mgpu.engine.execution import cell_value\n_ = cell_value.bundle(fig)\nfig"
    ),
}


def _run(kc: object, code: str) -> float:
    t = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=300, output_hook=lambda m: None)  # type: ignore[attr-defined]
    assert reply["content"]["status"] == "ok", reply["content"]
    return time.perf_counter() - t


def measure(ranks: int, code: str) -> tuple[float, float]:
    km = KernelManager(kernel_name="python3")
    km.kernel_spec.argv[0] = sys.executable
    km.start_kernel(env={**os.environ, "JUPYTER_MGPU_FORCE_CPU": "1"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        _run(kc, f"%load_ext jupyter_mgpu\n%mgpu_init {ranks} --no-dashboard")
        return _run(kc, code), _run(kc, code)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    args = parser.parse_args()
    print(
        f"first %%mgpu cell returning a plotly figure, {args.ranks} ranks, CPU virtual devices, {os.cpu_count()} cores"
    )
    print(f"| {'path':<32} | first cell (s) | same cell again (s) |")
    print(f"|{'-' * 34}|{'-' * 16}|{'-' * 21}|")
    for name, code in CELLS.items():
        first, again = measure(args.ranks, code)
        print(f"| {name:<32} | {first:>14.2f} | {again:>19.2f} |")


if __name__ == "__main__":
    main()
