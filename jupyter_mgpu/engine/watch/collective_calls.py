"""What a collective call is, in words and as a fingerprint: the op, dtype, shape, reduce op and root that
must agree across a group for it to be one collective, the bytes it moves (as nccl-tests counts them), and
how a disagreement between ranks is said. Pure but for reading tensors' dtypes and shapes; used by
``engine/watch/collective_watch.py``, which wraps torch.distributed's collectives.
"""

from __future__ import annotations

from typing import Any

REDUCING = {"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"}
SHAPED = {  # the argument whose dtype and shape must agree across the group
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "reduce": "tensor",
    "all_gather": "tensor",
    "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "output",
    "reduce_scatter_tensor": "output",
    "scatter": "tensor",
    "gather": "tensor",
}
TYPED = {"all_to_all": "input_tensor_list", "all_to_all_single": "input"}  # dtype only: splits may differ
ROOTED = {"broadcast": "src", "scatter": "src", "broadcast_object_list": "src", "reduce": "dst", "gather": "dst"}
ROOTED.update({"gather_object": "dst", "scatter_object_list": "src"})
POINT_TO_POINT = {"send": "dst", "recv": "src"}
_fingerprints: dict[tuple[Any, ...], tuple[str, str]] = {}


def _dtype_shape(t: Any) -> str:
    shape = ",".join(str(d) for d in getattr(t, "shape", ()))
    return f"{str(getattr(t, 'dtype', '?')).replace('torch.', '')}[{shape}]"


def _op_name(op: Any) -> str:
    return str(getattr(op, "name", None) or op).split(".")[-1].lower()


def root(dist: Any, args: dict[str, Any], key: str, group: Any) -> Any:
    """The global rank of a ``src``/``dst`` given as a global rank or (``group_src``) within the group."""
    local = args.get(f"group_{key}")
    if local is not None and group is not None:
        try:
            return dist.get_global_rank(group, local)
        except Exception:
            return f"group rank {local}"
    return args.get(key)


def fingerprint(op: str, args: dict[str, Any], dist: Any = None) -> tuple[str, str]:
    """What must agree across the group for this call, and how a message says it."""
    t = args.get(SHAPED.get(op, ""))
    if t is not None and op not in ROOTED and op in SHAPED:  # the common case, cached: dtype, shape, reduce op
        key = (op, getattr(t, "dtype", None), tuple(getattr(t, "shape", ())), args.get("op"))
        found = _fingerprints.get(key)
        if found is None:
            if len(_fingerprints) > 4096:  # shapes that change every step (sequence lengths) never fill memory
                _fingerprints.clear()
            found = _fingerprints[key] = _fingerprint(op, args, dist)
        return found
    return _fingerprint(op, args, dist)


def _fingerprint(op: str, args: dict[str, Any], dist: Any) -> tuple[str, str]:
    words, parts = op, [op]
    if op in SHAPED and args.get(SHAPED[op]) is not None:
        words += " " + _dtype_shape(args[SHAPED[op]])
        parts.append(words)
    elif op in TYPED and args.get(TYPED[op]) is not None:
        first = args[TYPED[op]]
        first = first[0] if isinstance(first, (list, tuple)) and first else first
        dtype = str(getattr(first, "dtype", "?")).replace("torch.", "")
        words += f" {dtype}"
        parts.append(dtype)
    if op in REDUCING:
        name = _op_name(args.get("op"))
        parts.append(name)
        if name != "sum":
            words += f" ({name})"
    if op in ROOTED:
        where = root(dist, args, ROOTED[op], args.get("group"))
        parts.append(f"root {where}")
        words += f" {'from' if ROOTED[op] == 'src' else 'to'} rank {where}"
    return "|".join(parts), words


def mismatch_text(number: int, ranks: list[int], calls: dict[int, dict[str, Any]], world: int) -> str:
    """``the ranks called different collectives at #5: ranks 0, 1: all_reduce float32[4] at line 3 of the
    cell; rank 2: broadcast float32[4] from rank 0 at line 5 of the cell``."""
    which = "" if ranks == list(range(world)) else f" of group {ranks}"
    by_call: dict[str, list[int]] = {}
    for r, c in sorted(calls.items()):
        by_call.setdefault(f"{c.get('call', '?')} at {c.get('line', '?')}", []).append(r)
    said = "; ".join(
        f"{'rank' if len(rs) == 1 else 'ranks'} {', '.join(map(str, rs))}: {c}" for c, rs in by_call.items()
    )
    return f"the ranks called different collectives at #{number}{which}: {said}"


def message_bytes(op: str, args: dict[str, Any], group_size: int) -> int:
    """The bytes of the whole array, as nccl-tests counts a collective's size: the buffer of all_reduce,
    broadcast and reduce, the gathered output of all_gather and gather, the input of reduce_scatter,
    scatter and all_to_all."""

    def size(t: Any) -> int:
        if isinstance(t, (list, tuple)):
            return sum(size(x) for x in t)
        return int(t.numel() * t.element_size()) if hasattr(t, "element_size") else 0

    if op in ("all_gather", "gather", "scatter", "reduce_scatter") and args.get(SHAPED[op]) is not None:
        return size(args[SHAPED[op]]) * group_size  # one rank's piece, times the ranks
    if op == "reduce_scatter_tensor":
        return size(args.get("input"))
    if op in SHAPED:
        return size(args.get(SHAPED[op]))
    if op in TYPED:
        return size(args.get(TYPED[op]))
    if op in POINT_TO_POINT:
        return size(args.get("tensor"))
    return 0
