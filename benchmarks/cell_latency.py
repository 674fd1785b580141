"""The latency a user feels per cell: an empty ``%%mgpu`` cell and ``%mgpu_run`` of an empty script on
every rank, next to the plain IPython equivalents (an empty cell, ``%run`` of the same script), each
the median of ``--repeat`` runs in one IPython shell (the kernel's messaging, the same for both, is not
in either figure). Tab and Shift-Tab in a ``%%mgpu`` cell, answered by rank 0
(``magics/rank_completion.py``), next to IPython's own answer for the same text in the notebook's
namespace (as ipykernel asks it: jedi on, IPython's default).

    python benchmarks/cell_latency.py [--ranks 4] [--repeat 50]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args()
    os.environ.setdefault("JUPYTER_MGPU_FORCE_CPU", "1")
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "jupyter_mgpu")
    ip.run_line_magic("mgpu_init", f"{a.ranks} --cpu --no-dashboard")
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty.py")
        open(empty, "w").close()
        rows = [
            ("empty cell", lambda: ip.run_cell("pass"), lambda: ip.run_cell_magic("mgpu", "", "pass")),
            ("empty script", lambda: ip.run_line_magic("run", empty), lambda: ip.run_line_magic("mgpu_run", empty)),
            *_completion_rows(ip),
        ]
        print(f"per-cell latency, {a.ranks} CPU ranks, median of {a.repeat} (ms)")
        print(f"{'what':<14}{'plain IPython':>15}{'jupyter_mgpu':>15}{'ratio':>9}")
        for name, plain, ours in rows:
            p = statistics.median(_times(plain, a.repeat)) * 1e3
            m = statistics.median(_times(ours, a.repeat)) * 1e3
            print(f"{name:<14}{p:>15.2f}{m:>15.2f}{m / p:>8.3g}x")
    ip.run_line_magic("mgpu_shutdown", "")


if __name__ == "__main__":
    main()
