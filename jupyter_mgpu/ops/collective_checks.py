"""The checks every rank runs on the gathered descriptions of a collective's inputs, before it starts.

Pure (no torch): each rank builds its input and the ranks agree on what they built — one small
all_reduce of (usable?, digest of shape and dtype) when all match, the full descriptions gathered
only when they differ (``ops.collective_run._exchange``) — and every rank runs :func:`problem` on the
same list, so they all decide alike whether to run the collective or to report the first problem:
one sentence, nothing started, the process group still usable. One round trip from the notebook.
"""

from __future__ import annotations

import math
from typing import Any

from jupyter_mgpu.errors import rank_list
from jupyter_mgpu.units import format_bytes

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
REDUCING = ("reduce", "all_reduce", "reduce_scatter")
SPLITTING = ("reduce_scatter", "scatter", "all_to_all")  # split dim 0 into world_size chunks


def split_hint(name: str, rows: int, n: int, what: str) -> str:
    """The sentence for a first dimension that does not split into ``n`` equal chunks."""
    good = math.ceil(rows / n) * n if rows >= n else n
    return (
        f"{name} splits dim 0 into {n} equal chunks (one per rank), but {what} has {rows} rows; "
        f"use a first dimension that is a multiple of {n}, such as {good}"
    )


def wrong_device(m: dict[str, Any]) -> bool:
    """Whether a tensor described by ``m`` is not on its rank's device."""
    device: str = m["device"]
    expected: str = m["expected_device"]
    return device.split(":")[0] != expected.split(":")[0] or (device.startswith("cuda") and device != expected)


def usable(m: dict[str, Any], max_bytes: int | None) -> bool:
    """Whether the input described by ``m`` can take part as it is: a tensor on its rank's device,
    within ``max_bytes`` (what a collective view captures)."""
    return m["type"] == "Tensor" and not wrong_device(m) and (max_bytes is None or m["nbytes"] <= max_bytes)


def problem(name: str, op: str, metas: list[dict[str, Any]], what: str, max_bytes: int | None) -> str | None:
    """The first problem in the inputs the ranks built (one sentence), or None when the collective may run.

    ``metas``: one description per rank (``type``, and for tensors ``shape``, ``dtype``, ``device``,
    ``expected_device``, ``nbytes``), in rank order.
    """
    n = len(metas)
    bad = [r for r, m in enumerate(metas) if m["type"] != "Tensor"]
    if bad:
        kind = metas[bad[0]]["type"]
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        return f"the input ({what}) is {article} {kind}, not a torch.Tensor, on {rank_list(bad)}"
    bad = [r for r, m in enumerate(metas) if not wrong_device(m) and max_bytes is not None and m["nbytes"] > max_bytes]
    if bad and max_bytes is not None:  # bad is empty when max_bytes is None
        r = bad[0]
        return (
            f"rank {r}'s input is {format_bytes(metas[r]['nbytes'])}, more than the "
            f"{format_bytes(max_bytes)} a collective view captures and draws per rank; use a smaller "
            "tensor here, and mg.bench (%mgpu_bench) to time large sizes"
        )
    bad = [r for r, m in enumerate(metas) if wrong_device(m)]
    if bad:
        r = bad[0]
        return (
            f"rank {r}'s input tensor is on {metas[r]['device']} but rank {r}'s device is "
            f"{metas[r]['expected_device']}; create it on the rank's device (`device` in %%mgpu)"
        )
    if len({m["dtype"] for m in metas}) > 1:
        listing = ", ".join(f"rank {r} {m['dtype']}" for r, m in enumerate(metas))
        return f"the input dtypes differ across ranks ({listing}); every rank must use the same dtype"
    if len({tuple(m["shape"]) for m in metas}) > 1:
        listing = ", ".join(f"rank {r} {tuple(m['shape'])}" for r, m in enumerate(metas))
        return f"the input shapes differ across ranks ({listing}); {name} needs the same shape on every rank"
    shape = tuple(metas[0]["shape"])
    if name in ("all_gather", "gather") + SPLITTING and len(shape) == 0:
        return f"{name} needs tensors with at least one dimension, got a scalar"
    if name in SPLITTING and shape[0] % n:
        return split_hint(name, shape[0], n, f"the input of shape {shape}")
    if op == "avg" and name in REDUCING and metas[0]["dtype"] not in FLOAT_DTYPES:
        return (
            f"op avg needs floating-point tensors, these are {metas[0]['dtype']} (the backend computes the "
            "mean in floating point and cannot store it back); use sum, or a float dtype"
        )
    return None
