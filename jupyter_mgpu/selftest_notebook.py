"""The selftest's checks of what a notebook drives (``python -m jupyter_mgpu.selftest``): a ``%%mgpu`` cell
through IPython's magics, ``mg.matmul`` against ``torch.mm``, and the memory dashboard's bars. Each takes the
running session and returns its detail line when it passes, or raises."""

from __future__ import annotations

import time
from typing import Any


def mgpu_cell(s: Any) -> str:
    """A ``%%mgpu`` cell run through IPython's magics, as a notebook runs one: an all_reduce on every rank."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    ip = InteractiveShell.instance()
    with capture_output() as shown:  # the cell's outputs, kept off the table
        if "mgpu" not in ip.magics_manager.magics["cell"]:
            ip.run_line_magic("load_ext", "jupyter_mgpu")
        ip.run_cell_magic("mgpu", "", "x = torch.full((1024,), float(rank + 1), device=device)\ndist.all_reduce(x)")
    got = s.run_cell("float(x[0].item()), str(x.device)", stream=False)
    want = float(s.world_size * (s.world_size + 1) / 2)
    assert got == [repr((want, str(d))) for d in s.run(_device_name)], (
        f"%%mgpu all_reduce gave {got} ({shown.stdout!r})"
    )
    s.run_cell("del x", stream=False)
    return f"sum = {want:g} on every rank's {s.devices[0].kind} device"


def _device_name() -> str:
    from jupyter_mgpu.engine import state as rank_state

    return str(rank_state.get().device)


def mg_matmul(s: Any) -> str:
    """``mg.matmul`` on sharded inputs, checked against ``torch.mm`` of the gathered inputs."""
    import torch

    import jupyter_mgpu as mg

    n = 1024
    A = mg.randn(n, n, placement=mg.Shard(0), seed=1, session=s)
    B = mg.randn(n, n, placement=mg.Shard(1), seed=2, session=s)
    C = mg.matmul(A, B)
    try:
        a, b, c = A.gather(), B.gather(), C.gather()
        err = float((c - torch.mm(a, b)).abs().max() / torch.mm(a, b).abs().max())
    finally:
        for t in (A, B, C):
            t.free()
    assert err < 1e-4, f"relative error {err:.1e} against torch.mm"
    return f"{n}x{n} float32, {C.report.strategy}, relative error {err:.1e}"


def _held_on_each_rank(nbytes: int) -> None:
    import torch

    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.execution import namespace_transfer

    held = torch.ones(nbytes, dtype=torch.uint8, device=rank_state.get().device)
    namespace_transfer.put({"_selftest_held": held})


def dashboard(s: Any) -> str:
    """The memory dashboard's bars (what its widget sends the browser) follow 64 MiB held on every rank."""
    import jupyter_mgpu as mg
    from jupyter_mgpu.units import format_bytes

    board = mg.dashboard(session=s)
    try:

        def used() -> list[int]:
            rows = sorted(board.devices, key=lambda r: r["rank"])
            return [int(r["used"] or 0) for r in rows] if len(rows) == s.world_size else []

        deadline, before, since = time.monotonic() + 10, used(), time.monotonic()
        while time.monotonic() < deadline and (not before or time.monotonic() - since < 0.5):
            time.sleep(0.05)  # the bars settle first: memory the checks before gave back may still be arriving
            now = used()
            if now != before:
                before, since = now, time.monotonic()
        assert before, f"the dashboard shows {len(board.devices)} of {s.world_size} ranks after 10 s"
        s.run(_held_on_each_rank, 64 * 2**20)
        while time.monotonic() < deadline + 10:
            grew = [a - b for a, b in zip(used(), before)]
            if grew and min(grew) >= 60 * 2**20:
                break
            time.sleep(0.05)
        s.run_cell("del _selftest_held", stream=False)
        assert grew and min(grew) >= 60 * 2**20, f"the dashboard's bars grew by {grew} bytes, not by 64 MiB each"
    finally:
        board.close()
    return f"every rank's bar grew by {format_bytes(min(grew))} or more, live"
