"""Build a rank's part of the model without ever holding more than one full layer, and report its shards.

Layers are made on the meta device (no memory), split by the strategy (``fully_shard``,
``parallelize_module``, or a pipeline stage's own layers), given real storage with ``to_empty``, and
then filled layer by layer from the initial weights: a DTensor parameter takes only its own slice of
the full tensor. :func:`shard_boxes` reports, per parameter, which slice of the global weight this
rank holds, as read from the parameters themselves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from jupyter_mgpu.strategies import layers as lay
from jupyter_mgpu.strategies import model_spec as ms


def sequential(ctx: Any, indices: Iterable[int], tp_cols: dict[int, int] | None = None) -> nn.Sequential:
    """An ``nn.Sequential`` of layers ``indices`` on the meta device, children named by their global index.

    ``tp_cols[i]``: features per rank of a dropout inside a tensor-parallel pair (its columns start at
    ``rank × tp_cols[i]``).
    """
    w = ms.widths(ctx.layers)
    tp_cols = tp_cols or {}
    children = OrderedDict()
    with torch.device("meta"):
        for i in indices:
            cols = tp_cols.get(i)
            children[str(i)] = lay.build(ctx.layers[i], i, ctx.seed, width=w[i], col0=ctx.rank * cols if cols else 0)
    return nn.Sequential(children)


def materialize(module: nn.Module, ctx: Any) -> nn.Module:
    """Give ``module``'s (possibly sharded) parameters storage on this rank's device and fill them."""
    module.to_empty(device=ctx.device)
    root = module.module if hasattr(module, "module") and isinstance(module.module, nn.Module) else module
    for name, child in root.named_children():
        params = dict(child.named_parameters(recurse=False))
        if not params:
            continue
        full = lay.initial_weights(ctx.init, ctx.layers, int(name))
        for pname, p in params.items():
            copy_into(p, full[pname].to(ctx.device))
        del full
    return module


def _local_box(p: Any, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    from torch.distributed.tensor import DTensor

    if isinstance(p, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        local, offset = compute_local_shape_and_global_offset(shape, p.device_mesh, p.placements)
        return [(int(o), int(o) + int(n)) for o, n in zip(offset, local)]
    return [(0, int(n)) for n in shape]


def copy_into(p: torch.Tensor, full: torch.Tensor) -> None:
    """Fill parameter ``p`` (a tensor, or a DTensor holding one shard) from the full tensor."""
    from torch.distributed.tensor import DTensor

    box = _local_box(p, tuple(full.shape))
    with torch.no_grad():
        target = p.to_local() if isinstance(p, DTensor) else p
        target.copy_(full[tuple(slice(a, b) for a, b in box)])


def shard_boxes(module: nn.Module) -> list[dict[str, Any]]:
    """Per parameter this rank holds: its layer, global shape and the box ``[(start, stop), ...]`` it holds."""
    root = module.module if hasattr(module, "module") and isinstance(module.module, nn.Module) else module
    out = []
    for name, child in root.named_children():
        for pname, p in child.named_parameters(recurse=False):
            shape = tuple(int(n) for n in p.shape)
            out.append(
                {
                    "layer": int(name),
                    "name": f"{name}.{pname}",
                    "shape": list(shape),
                    "box": [list(b) for b in _local_box(p, shape)],
                }
            )
    return out
