"""Rank side of ``mg.map``: call the user's function on this rank's aligned shards.

The function arrives as a ``ShippedFunction`` (by value for notebook functions, so what they use
travels with them, see ``engine/execution/shipped_function.py``); it is loaded here, called on the local shards, and its result is either stored as
this rank's shard of a new DistTensor or returned as a small Python value. A failure is returned
as data (which rank, which rows, the user's line) so the controller can say it in one sentence.

The other half: ``tensors/shard_map.py``, its controller side.
"""

from __future__ import annotations

import traceback
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.execution.shipped_function import ShippedFunction
from jupyter_mgpu.engine.shards import shard_store as store


def _user_line(tb: Any) -> str:
    frames = [f for f in traceback.extract_tb(tb) if "jupyter_mgpu" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    cell = f.filename.startswith("<") or "/ipykernel_" in f.filename  # a notebook cell (IPython's cell files)
    where = "a notebook cell" if cell else f.filename
    return f" at line {f.lineno} of {f.name} in {where}{': ' + f.line.strip() if f.line else ''}"


def describe(value: Any) -> dict[str, Any]:
    """What kind of result ``value`` is, in a few picklable words."""
    import torch

    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return {"kind": "tensor", "shape": tuple(value.shape), "dtype": str(value.dtype).replace("torch.", "")}
    return {"kind": "value"}


def apply(
    shipped: ShippedFunction, in_ids: list[str], out_id: str, keep: bool, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Run the function on this rank's shards.

    ``in_ids`` are shard handles (in argument order). The result tensor is stored under ``out_id``
    when ``keep`` (the controller decides after seeing every rank's description); otherwise the value
    itself is returned. Returns ``{"ok": True, "result": description, "value": ...}`` or
    ``{"ok": False, "ename", "message", "line"}``.
    """
    import torch

    try:
        running = shipped.running()
    except Exception as exc:  # the function's module is missing here, or its pickle is broken
        return {"ok": False, "stage": "unpickle", "ename": type(exc).__name__, "message": str(exc), "line": ""}
    args = [store.get(h) for h in in_ids]
    try:
        with torch.no_grad(), running as fn:
            value = fn(*args, **kwargs)
    except Exception as exc:
        return {
            "ok": False,
            "stage": "call",
            "ename": type(exc).__name__,
            "message": str(exc).strip(),
            "line": _user_line(exc.__traceback__),
        }
    finally:
        del args
    info = describe(value)
    if info["kind"] == "tensor" and keep:
        if value.device != rank_state.get().device:
            value = value.to(rank_state.get().device)
        store.put(out_id, value.contiguous())
        return {"ok": True, "result": info, "value": None}
    if isinstance(value, torch.Tensor):
        value = value.detach().to("cpu")
    return {"ok": True, "result": info, "value": value}


def take(out_id: str) -> Any:
    """This rank's stored result as a CPU tensor, freed here (results that did not form a DistTensor)."""
    t = store.get(out_id).detach().to("cpu", copy=True)
    store.free([out_id])
    return t
