"""``ddp``: torch's ``DistributedDataParallel`` — every rank holds the whole model and an equal share
of each batch; the gradients are averaged by an all-reduce of DDP's gradient buckets during backward.

The buckets are DDP's own (allocated in C++, so no Python tracker sees them being made); a comm hook
that is torch's default all-reduce hook (``ddp_comm_hooks.default_hooks.allreduce_hook``) hands each
bucket to the memory tracker as a communication buffer on its way to the all-reduce.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_mgpu.strategies import weights
from jupyter_mgpu.strategies.step import Context, Prepared, local_step, make_optimizer

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import GradBucket


def build(ctx: Context) -> Prepared:
    """The full model wrapped in DDP over this comparison's group; a step over this rank's share."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = weights.materialize(weights.sequential(ctx, range(len(ctx.layers))), ctx)
    ddp = DDP(model, process_group=ctx.group, device_ids=None if ctx.device.type == "cpu" else [ctx.device])
    watch: dict[str, Any] = {"tracker": None}

    def hook(group: dist.ProcessGroup, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
        t = watch["tracker"]
        if t is not None:
            t.register(bucket.buffer(), "Other")
        return allreduce_hook(group, bucket)

    # DDP compares a hook's annotations with GradBucket and Future objects; this module's are strings
    # (``from __future__ import annotations``), which it refuses: they are for mypy only
    hook.__annotations__.clear()
    ddp.register_comm_hook(ctx.group, hook)
    opt = make_optimizer(ctx, ddp.parameters())
    return Prepared(ddp, opt, local_step(ctx, ddp, opt, share=True, watch=watch), watch=watch)
