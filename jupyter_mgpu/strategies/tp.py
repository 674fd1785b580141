"""``tp``: tensor parallel with ``torch.distributed.tensor.parallel.parallelize_module`` — Megatron's
MLP split (Shoeybi et al. 2019): in each pair of consecutive Linear layers the first is
``ColwiseParallel`` (each rank holds some output features), the second ``RowwiseParallel`` (the
matching input features), so the activation between them stays split and one all-reduce per pair
joins the result (and one in the backward for the pair's input gradient). Layers outside the pairs
(LayerNorm) are replicated. Every rank sees the whole batch.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.strategies import weights
from jupyter_mgpu.strategies.step import Context, Prepared, local_step, make_optimizer


def build(ctx: Context) -> Prepared:
    """The model with each Linear pair split column-, then row-wise over this comparison's mesh."""
    from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, parallelize_module

    P = ctx.world_size
    inside = {j: ctx.layers[col]["out"] // P for col, row in ctx.tp_pairs for j in range(col + 1, row)}
    model = weights.sequential(ctx, range(len(ctx.layers)), tp_cols=inside)
    plan: dict[str, ParallelStyle] = {}
    for col, row in ctx.tp_pairs:
        plan[str(col)], plan[str(row)] = ColwiseParallel(), RowwiseParallel()
    parallelize_module(model, ctx.mesh(), plan)
    weights.materialize(model, ctx)
    opt = make_optimizer(ctx, model.parameters())
    watch: dict[str, Any] = {"tracker": None}
    return Prepared(model, opt, local_step(ctx, model, opt, share=False, watch=watch), watch=watch)
