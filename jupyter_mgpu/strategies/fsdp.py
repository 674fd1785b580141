"""``fsdp``: FSDP2's ``fully_shard`` (ZeRO-3) — each layer with parameters, then the root, sharded over
an explicit 1-D device mesh of the session's device type (without one, ``fully_shard`` picks the
accelerator's type whenever one exists). Each rank keeps 1/P of every parameter, gradient and optimizer
state; a layer's parameters are all-gathered just before its forward and backward and its gradients
reduce-scattered after. Every rank trains on an equal share of each batch, like DDP.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.strategies import weights
from jupyter_mgpu.strategies.step import Context, Prepared, local_step, make_optimizer


def build(ctx: Context) -> Prepared:
    """The model sharded layer by layer (built on meta, then only this rank's shards get memory)."""
    from torch.distributed.fsdp import fully_shard

    mesh = ctx.mesh()
    model = weights.sequential(ctx, range(len(ctx.layers)))
    for layer in model:
        if any(True for _ in layer.parameters(recurse=False)):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    weights.materialize(model, ctx)
    opt = make_optimizer(ctx, model.parameters())
    watch: dict[str, Any] = {"tracker": None}
    return Prepared(model, opt, local_step(ctx, model, opt, share=True, watch=watch), tracker_kind="fsdp", watch=watch)
