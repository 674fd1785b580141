"""Logical schedules of the collectives: who sends which chunk to whom, step by step.

The algorithm a backend really runs (gloo's or NCCL's rings, trees, pipelining) is hidden from us, so
the animation shows a *logical schedule*: the textbook data movement — ring reduce-scatter then
all-gather for ``all_reduce``, binomial trees for ``broadcast``/``reduce``, a dissemination
``barrier``, pairwise shifts for ``all_to_all`` — simulated on the inputs captured on the ranks.
The final frame's holdings equal what the real collective produced (tests check this).

Pure torch, no distributed calls: the controller runs it on the captured ``before`` tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.layout.placement import split as _split


def chunks(x: Any, n: int) -> list[Any]:
    """``x`` split along dim 0 into ``n`` equal chunks (the caller checked divisibility)."""
    return list(x.chunk(n, dim=0)) if x.shape[0] else [x] * n


def before_entries(name: str, x: Any, rank: int, src: int, world_size: int) -> Any:
    """What a rank contributes, as drawn in the "before" column: a tensor, a list of chunks, or None."""
    if x is None:
        return None
    if name == "scatter":
        return chunks(x, world_size) if rank == src else None
    if name in ("reduce_scatter", "all_to_all"):
        return chunks(x, world_size)
    return x


@dataclass
class Frame:
    """One step: what every rank holds after it, the transfers that led there, what to highlight.

    ``holdings[r]`` is a tensor, a list of slots (tensor or None) or None (nothing meaningful).
    ``transfers`` are ``(src, dst, label)``; ``highlight[r]`` is a slot index (list holdings) or a
    ``(start, stop)`` range of flat element indices (tensor holdings) that changed.
    """

    caption: str
    holdings: list[Any]
    transfers: list[tuple[int, int, str]] = field(default_factory=list)
    highlight: dict[int, Any] = field(default_factory=dict)


def combine(op: str, a: Any, b: Any) -> Any:
    """``a`` op ``b`` elementwise (``avg`` accumulates a sum; :func:`finish` divides).

    Complex tensors are *tracked* values (``widgets/collective_colors.py``): the value in the real part,
    a bitmask of the ranks it came from in the imaginary part; the masks are ORed, except that min
    and max keep the mask of the value that wins (both on a tie).
    """
    import torch

    if a.is_complex():
        va, vb = a.real, b.real
        ma, mb = a.imag.long(), b.imag.long()
        v = combine(op, va, vb)
        m = ma | mb
        if op in ("min", "max"):
            m = torch.where(va == vb, m, torch.where(v == va, ma, mb))
        return torch.complex(v, m.double())
    if op in ("sum", "avg"):
        return a + b
    if op == "product":
        return a * b
    if op == "min":
        return torch.minimum(a, b)
    if op == "max":
        return torch.maximum(a, b)
    raise ValueError(f"unknown reduce op {op!r}")


def finish(op: str, x: Any, n: int) -> Any:
    if op != "avg":
        return x
    if x.is_complex():  # tracked: divide the value, keep the origin mask
        import torch

        return torch.complex(x.real / n, x.imag)
    return x / n if x.is_floating_point() else x // n


def _copy(h: Any) -> Any:
    if isinstance(h, list):
        return [None if s is None else s.clone() for s in h]
    return None if h is None else h.clone()


def _snapshot(holdings: list[Any]) -> list[Any]:
    """The holdings as they are now. The steps replace entries and never write into a tensor of
    ``holdings`` (``_all_reduce`` copies its own), so frames share the tensors a step did not change:
    an all_gather on N ranks makes N² tensors, not N³, and the drawing knows an unchanged entry by
    identity."""
    return [list(h) if isinstance(h, list) else h for h in holdings]


def _broadcast(xs: list[Any], src: int, n: int) -> list[Frame]:
    hold = [x.clone() for x in xs]
    frames, mask, k = [], 1, 1
    while mask < n:
        moves = []
        for v in range(mask):
            if v + mask < n:
                a, b = (v + src) % n, (v + mask + src) % n
                hold[b] = hold[a].clone()
                moves.append((a, b, "whole tensor"))
        frames.append(
            Frame(
                f"step {k}: ranks that have rank {src}'s tensor send it on (binomial tree)",
                _snapshot(hold),
                moves,
                {b: (0, xs[0].numel()) for _, b, _ in moves},
            )
        )
        mask, k = mask * 2, k + 1
    return frames


def _reduce(xs: list[Any], op: str, dst: int, n: int) -> list[Frame]:
    hold: list[Any] = [x.clone() for x in xs]
    frames, mask, k = [], 1, 1
    while mask < n:
        moves = []
        for v in range(n):
            if v % (2 * mask) == mask:
                a, b = (v + dst) % n, (v - mask + dst) % n
                hold[b] = combine(op, hold[b], hold[a])
                hold[a] = None  # sent its partial result; its buffer holds nothing meaningful now
                moves.append((a, b, "partial " + op))
        mask, k = mask * 2, k + 1
        if mask >= n:
            hold[dst] = finish(op, hold[dst], n)
        frames.append(
            Frame(
                f"step {k - 1}: ranks send partial results towards root {dst} (binomial tree)",
                _snapshot(hold),
                moves,
                {b: (0, xs[0].numel()) for _, b, _ in moves},
            )
        )
    for r in range(n):
        if r != dst:
            hold[r] = None
    if frames:
        frames[-1].holdings = _snapshot(hold)
    return frames


def _all_reduce(xs: list[Any], op: str, n: int) -> list[Frame]:
    shape = xs[0].shape
    flat = [x.reshape(-1).clone() for x in xs]
    ranges = _split(flat[0].numel(), n)
    frames = []

    def view() -> list[Any]:
        return [f.reshape(shape).clone() for f in flat]

    for s in range(n - 1):
        moves, hl = [], {}
        sent = [(r, (r - s - 1) % n) for r in range(n)]
        payload = {r: flat[r][slice(*ranges[c])].clone() for r, c in sent}
        for r, c in sent:
            dst = (r + 1) % n
            lo, hi = ranges[c]
            flat[dst][lo:hi] = combine(op, flat[dst][lo:hi], payload[r])
            moves.append((r, dst, f"chunk {c}"))
            hl[dst] = ranges[c]
        frames.append(
            Frame(
                f"reduce-scatter step {s + 1}/{n - 1}: each rank sends one chunk to the next "
                f"rank in the ring, which combines it ({op})",
                view(),
                moves,
                hl,
            )
        )
    if op == "avg":
        for r in range(n):
            lo, hi = ranges[r]
            flat[r][lo:hi] = finish(op, flat[r][lo:hi], n)
    for s in range(n - 1):
        moves, hl = [], {}
        sent = [(r, (r - s) % n) for r in range(n)]
        payload = {r: flat[r][slice(*ranges[c])].clone() for r, c in sent}
        for r, c in sent:
            dst = (r + 1) % n
            lo, hi = ranges[c]
            flat[dst][lo:hi] = payload[r]
            moves.append((r, dst, f"chunk {c} (final)"))
            hl[dst] = ranges[c]
        frames.append(
            Frame(
                f"all-gather step {s + 1}/{n - 1}: each rank passes a finished chunk to the next rank in the ring",
                view(),
                moves,
                hl,
            )
        )
    return frames


def _reduce_scatter(xs: list[Any], op: str, n: int) -> list[Frame]:
    hold = [[c.clone() for c in chunks(x, n)] for x in xs]
    frames = []
    for s in range(n - 1):
        moves, hl = [], {}
        payload = {r: hold[r][(r - s - 1) % n].clone() for r in range(n)}
        for r in range(n):
            c, dst = (r - s - 1) % n, (r + 1) % n
            hold[dst][c] = combine(op, hold[dst][c], payload[r])
            moves.append((r, dst, f"chunk {c}"))
            hl[dst] = c
        frames.append(
            Frame(
                f"ring step {s + 1}/{n - 1}: each rank sends one partial chunk to the next "
                f"rank, which combines it ({op})",
                _snapshot(hold),
                moves,
                hl,
            )
        )
    final = [finish(op, hold[r][r], n) for r in range(n)]
    frames.append(Frame("each rank keeps its own finished chunk (rank r: chunk r)", _snapshot(final)))
    return frames


def _all_gather(xs: list[Any], n: int) -> list[Frame]:
    hold: list[list[Any]] = [[x.clone() if j == r else None for j in range(n)] for r, x in enumerate(xs)]
    frames = [
        Frame(
            "each rank puts its own tensor in slot r of the output list", _snapshot(hold), [], {r: r for r in range(n)}
        )
    ]
    for s in range(n - 1):
        moves, hl = [], {}
        payload = {r: hold[r][(r - s) % n] for r in range(n)}  # shared: no step writes into a tensor
        for r in range(n):
            c, dst = (r - s) % n, (r + 1) % n
            hold[dst][c] = payload[r]
            moves.append((r, dst, f"rank {c}'s tensor"))
            hl[dst] = c
        frames.append(
            Frame(
                f"ring step {s + 1}/{n - 1}: each rank passes the newest entry to the next rank",
                _snapshot(hold),
                moves,
                hl,
            )
        )
    return frames


def _scatter(xs: list[Any], src: int, n: int) -> list[Frame]:
    parts = chunks(xs[src], n)
    hold = [parts[r].clone() for r in range(n)]
    moves = [(src, r, f"chunk {r}") for r in range(n) if r != src]
    return [
        Frame(
            f"rank {src} sends chunk r of its tensor to rank r (and keeps chunk {src})",
            hold,
            moves,
            {r: (0, parts[r].numel()) for r in range(n)},
        )
    ]


def _gather(xs: list[Any], dst: int, n: int) -> list[Frame]:
    hold: list[Any] = [None] * n
    hold[dst] = [x.clone() for x in xs]
    moves = [(r, dst, f"rank {r}'s tensor") for r in range(n) if r != dst]
    return [Frame(f"every rank sends its tensor to rank {dst}, which stores it in slot r", hold, moves, {dst: dst})]


def _all_to_all(xs: list[Any], n: int) -> list[Frame]:
    parts = [chunks(x, n) for x in xs]
    hold: list[list[Any]] = [[parts[r][r].clone() if j == r else None for j in range(n)] for r in range(n)]
    frames = [
        Frame(
            "each rank keeps chunk r of its own input in slot r of its output",
            _snapshot(hold),
            [],
            {r: r for r in range(n)},
        )
    ]
    for s in range(1, n):
        moves, hl = [], {}
        for r in range(n):
            dst = (r + s) % n
            hold[dst][r] = parts[r][dst].clone()
            moves.append((r, dst, f"chunk {dst}"))
            hl[dst] = r
        frames.append(
            Frame(f"shift {s}/{n - 1}: rank r sends chunk r+{s} of its input to rank r+{s}", _snapshot(hold), moves, hl)
        )
    return frames


def _barrier(xs: list[Any], n: int) -> list[Frame]:
    hold = [x.clone() for x in xs]
    frames, dist, k = [], 1, 1
    while dist < n:
        moves = [(r, (r + dist) % n, "arrived") for r in range(n)]
        frames.append(
            Frame(
                f"round {k}: rank r tells rank r+{dist} it has arrived (dissemination barrier); no data moves",
                _snapshot(hold),
                moves,
            )
        )
        dist, k = dist * 2, k + 1
    return frames


def _send_recv(xs: list[Any], n: int) -> list[Frame]:
    hold = [xs[(r - 1) % n].clone() for r in range(n)]
    moves = [(r, (r + 1) % n, "whole tensor") for r in range(n)] if n > 1 else []
    return [
        Frame(
            "ring shift: every rank sends its tensor to rank r+1 and receives from rank r-1",
            hold,
            moves,
            {r: (0, xs[0].numel()) for r in range(n)},
        )
    ]


def schedule(name: str, inputs: list[Any], op: str = "sum", src: int = 0) -> list[Frame]:
    """The frames of collective ``name`` on per-rank ``inputs`` (frame 0 is the inputs themselves)."""
    n = len(inputs)
    xs = [x.clone() for x in inputs]
    start_hold = [_copy(x) for x in xs]
    if name in ("reduce_scatter", "all_to_all"):
        start_hold = [chunks(x, n) for x in xs]
    elif name == "scatter":
        start_hold = [chunks(x, n) if r == src else None for r, x in enumerate(xs)]
    start = Frame("before: every rank's input", _snapshot(start_hold))
    steps = {
        "broadcast": lambda: _broadcast(xs, src, n),
        "reduce": lambda: _reduce(xs, op, src, n),
        "all_reduce": lambda: _all_reduce(xs, op, n),
        "reduce_scatter": lambda: _reduce_scatter(xs, op, n),
        "all_gather": lambda: _all_gather(xs, n),
        "scatter": lambda: _scatter(xs, src, n),
        "gather": lambda: _gather(xs, src, n),
        "all_to_all": lambda: _all_to_all(xs, n),
        "barrier": lambda: _barrier(xs, n),
        "send_recv": lambda: _send_recv(xs, n),
    }
    if name not in steps:
        raise ValueError(f"unknown collective {name!r}")
    return [start] + steps[name]()


def final_holdings(name: str, inputs: list[Any], op: str = "sum", src: int = 0) -> list[Any]:
    """What every rank holds at the end of the logical schedule (equals the real collective's result)."""
    return schedule(name, inputs, op, src)[-1].holdings
