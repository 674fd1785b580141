"""``single``: the whole model on rank 0 alone, trained on the whole batch — the reference every other
strategy must match (same initial weights, same batches, same maths)."""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.strategies import weights
from jupyter_mgpu.strategies.step import Context, Prepared, local_step, make_optimizer


def build(ctx: Context) -> Prepared:
    """The full model on this rank, its optimizer and a step over the whole batch."""
    model = weights.materialize(weights.sequential(ctx, range(len(ctx.layers))), ctx)
    opt = make_optimizer(ctx, model.parameters())
    watch: dict[str, Any] = {"tracker": None}
    return Prepared(model, opt, local_step(ctx, model, opt, share=False, watch=watch), watch=watch)
