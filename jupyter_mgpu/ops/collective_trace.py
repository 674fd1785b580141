"""Trace events of a collective on one rank, at the level of its contract (what each rank sends and gets).

A collective's data is drawn as two global tensors: ``inputs`` — every rank's input stacked along a
new dim 0 (row ``j`` is rank ``j``'s tensor) — and, for reducing collectives, ``result`` — the
reduction of all inputs. Rank ``r`` starts holding ``inputs[r]``; the collective's sends, receives and
reductions move boxes of these; at the end a rank holds exactly the blocks of its output (its input is
freed unless the output is it). The backend's internal algorithm (ring, tree) is not visible here;
the engine records the events around the real call, with real times.

Pure apart from :func:`record` (which calls the engine's recorder).
"""

from __future__ import annotations

from typing import Any

Box = tuple[tuple[int, int], ...]


def _xbox(j: int, shape: tuple[int, ...], rows: tuple[int, int] | None = None) -> Box:
    rest = [(0, s) for s in shape]
    if rows is not None:
        rest[0] = rows
    return ((j, j + 1), *rest)


def _ybox(shape: tuple[int, ...], rows: tuple[int, int] | None = None) -> Box:
    rest = [(0, s) for s in shape]
    if rows is not None:
        rest[0] = rows
    return tuple(rest)


def plan(name: str, rank: int, n: int, src: int, shape: tuple[int, ...]) -> dict[str, list[Any]]:
    """What rank ``rank`` does in collective ``name``: ``send``/``recv``/``reduce`` as ``(tensor, box, peer)``
    (tensor ``"x"`` inputs or ``"y"`` result) and ``out``: the ``(tensor, box)`` blocks it holds at the end."""
    shape = tuple(shape)
    rows = shape[0] if shape else 0
    chunk = [(j * rows // n, (j + 1) * rows // n) for j in range(n)] if shape else [None] * n
    others = [j for j in range(n) if j != rank]
    send: list[Any] = []
    recv: list[Any] = []
    red: list[Any] = []
    if name == "broadcast":
        if rank == src:
            send = [("x", _xbox(src, shape), j) for j in others]
        else:
            recv = [("x", _xbox(src, shape), src)]
        out = [("x", _xbox(src, shape))]
    elif name == "reduce":
        if rank != src:
            red = [("x", _xbox(rank, shape), src)]
        out = [("y", _ybox(shape))] if rank == src else []
    elif name == "all_reduce":
        red = [("x", _xbox(rank, shape), j) for j in others]
        out = [("y", _ybox(shape))]
    elif name == "all_gather":
        send = [("x", _xbox(rank, shape), j) for j in others]
        recv = [("x", _xbox(j, shape), j) for j in others]
        out = [("x", _xbox(j, shape)) for j in range(n)]
    elif name == "reduce_scatter":
        red = [("x", _xbox(rank, shape, chunk[j]), j) for j in others]
        out = [("y", _ybox(shape, chunk[rank]))]
    elif name == "scatter":
        if rank == src:
            send = [("x", _xbox(src, shape, chunk[j]), j) for j in others]
        else:
            recv = [("x", _xbox(src, shape, chunk[rank]), src)]
        out = [("x", _xbox(src, shape, chunk[rank]))]
    elif name == "gather":
        if rank != src:
            send = [("x", _xbox(rank, shape), src)]
        else:
            recv = [("x", _xbox(j, shape), j) for j in others]
        out = [("x", _xbox(j, shape)) for j in range(n)] if rank == src else []
    elif name == "all_to_all":
        send = [("x", _xbox(rank, shape, chunk[j]), j) for j in others]
        recv = [("x", _xbox(j, shape, chunk[rank]), j) for j in others]
        out = [("x", _xbox(j, shape, chunk[rank])) for j in range(n)]
    elif name == "barrier":
        out = [("x", _xbox(rank, shape))]
    elif name == "send_recv":
        if n > 1:
            send = [("x", _xbox(rank, shape), (rank + 1) % n)]
            recv = [("x", _xbox((rank - 1) % n, shape), (rank - 1) % n)]
        out = [("x", _xbox((rank - 1) % n, shape))]
    else:
        raise ValueError(f"unknown collective {name!r}")
    return {"send": send, "recv": recv, "reduce": red, "out": out}


def names(tag: str) -> dict[str, str]:
    """Global tensor names of one traced collective (unique per call)."""
    return {"x": f"{tag}:inputs", "y": f"{tag}:result"}


def begin(name: str, x: Any, tag: str, op: str) -> None:
    """Before the collective: name the tensors and record that this rank holds its input."""
    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.records import trace as etrace

    st = rank_state.get()
    shape, item = tuple(x.shape), x.element_size()
    nm = names(tag)
    etrace.begin_op(name)
    etrace.declare(nm["x"], (st.world_size, *shape), item, f"{name}: inputs (row j = rank j)")
    etrace.declare(nm["y"], shape, item, f"{name}: {op} of the inputs")
    etrace.record(0, "hold", [etrace.block(nm["x"], _xbox(st.rank, shape))], x.numel() * item)


def end(name: str, x: Any, tag: str, src: int) -> None:
    """After the collective returned: record its sends, receives, reductions and what this rank holds now."""
    import math

    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.records import trace as etrace

    st = rank_state.get()
    shape, item = tuple(x.shape), x.element_size()
    nm = names(tag)
    p = plan(name, st.rank, st.world_size, src, shape)
    itemsize: int = item

    def nbytes(box: Box) -> int:
        return math.prod(b - a for a, b in box) * itemsize

    for t, box, peer in p["send"]:
        etrace.record(1, "send", [etrace.block(nm[t], box)], nbytes(box), peer)
    for t, box, peer in p["reduce"]:
        etrace.record(1, "reduce", [etrace.block(nm[t], box)], nbytes(box), peer)
    for t, box, peer in p["recv"]:
        etrace.record(1, "recv", [etrace.block(nm[t], box)], nbytes(box), peer)
    outs = [etrace.block(nm[t], box) for t, box in p["out"]]
    made = [b for b in outs if b[0] == nm["y"]]
    if made:
        etrace.record(2, "compute", made, sum(nbytes(b[1]) for b in made))
    if outs:  # what the output buffer holds (already-held blocks included: holding is idempotent)
        etrace.record(2, "hold", outs, sum(nbytes(b[1]) for b in outs))
    mine = etrace.block(nm["x"], _xbox(st.rank, shape))
    if mine not in outs:
        etrace.record(2, "free", [mine], x.numel() * item)
    etrace.end_op()
