"""Rank side of ``mg.compare_values`` (the notebook's side is ``session/value_compare.py``): what a value in
this rank's namespace is, small enough to send from 64 ranks — its type, a tensor's shape, dtype, device and
norm, a hash of its bytes and one per chunk of them — so the notebook groups equal values and finds the
first element where two ranks differ by asking for one chunk of each, never the whole tensor.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

from jupyter_mgpu.engine.state import user_ns

CHUNKS = 256  # a tensor's bytes are hashed in this many pieces: the first that differs is all that is sent
MAX_REPR = 200


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _flat(value: Any) -> Any:
    """A tensor as one contiguous row of numbers on the CPU."""
    return value.detach().reshape(-1).contiguous().cpu()


def digest(expr: str) -> dict[str, Any]:
    """What ``expr`` is in this rank's namespace (see the module's docstring), or the error it raises."""
    try:
        value = eval(expr, user_ns())
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    import torch

    if not isinstance(value, torch.Tensor):
        try:
            key = _hash(pickle.dumps(value))
        except Exception:
            key = _hash(repr(value).encode())
        return {"kind": "value", "type": type(value).__name__, "hash": key, "repr": repr(value)[:MAX_REPR]}
    flat = _flat(value)
    if flat.is_floating_point() or flat.is_complex():
        flat = flat + 0  # -0.0 is 0.0: equal values, equal bytes
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    size = flat.element_size()
    per = max(1, -(-flat.numel() // CHUNKS))  # elements a chunk
    chunks = [_hash(raw[i * size : (i + per) * size]) for i in range(0, flat.numel(), per)]
    norm = float(flat.double().norm()) if not flat.is_complex() else float(flat.abs().double().norm())
    return {
        "kind": "tensor",
        "shape": list(value.shape),
        "dtype": str(value.dtype).replace("torch.", ""),
        "device": str(value.device),
        "hash": _hash(raw),
        "chunk": per,
        "chunks": chunks,
        "norm": norm,
    }


def elements(expr: str, start: int, stop: int) -> list[Any]:
    """The elements ``start`` to ``stop`` of ``expr``'s tensor, flattened, as Python numbers."""
    value = eval(expr, user_ns())
    return list(_flat(value)[start:stop].tolist())
