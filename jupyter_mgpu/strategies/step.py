"""What every strategy module hands ``compare_run``: a built model, its optimizer and one training step.

A strategy's ``build(ctx)`` returns a :class:`Prepared`; ``step(x, y, k)`` runs training step ``k`` on
the *global* batch ``(x, y)`` (each strategy takes its own share of it) and returns the loss this rank
computed, or None where it computes none (the pipeline's first stages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from jupyter_mgpu.strategies.layers import SeededDropout


@dataclass
class Context:
    """What ``compare_run`` knows when a strategy builds: this rank, its group and the plan's choices."""

    rank: int
    world_size: int
    group: Any
    device: Any
    layers: list[dict[str, Any]]
    init: dict[str, Any]
    seed: int
    loss: str
    optimizer: str
    lr: float
    batch: int
    microbatches: int = 1
    schedule: str = "gpipe"
    stages: list[tuple[int, int]] = field(default_factory=list)
    tp_pairs: list[tuple[int, int]] = field(default_factory=list)

    def mesh(self) -> Any:
        """A 1-D device mesh over this comparison's process group, of this session's device type.

        Named after the group: DTensor caches sharding decisions per mesh, and meshes over the same
        ranks compare equal unless their names differ, so a mesh of an earlier (destroyed) group would
        otherwise be reused.
        """
        from torch.distributed.device_mesh import DeviceMesh

        return DeviceMesh.from_group(self.group, self.device.type, mesh_dim_names=(f"compare{self.group.group_name}",))


@dataclass
class Prepared:
    """A strategy ready to train: the module the trackers follow, its optimizer and one step."""

    module: nn.Module
    optimizer: torch.optim.Optimizer
    step: Callable[[torch.Tensor, torch.Tensor, int], float | None]
    tracker_kind: str = "phase"  # "phase" (MemTracker, phase set by the step) or "fsdp" (FSDPMemTracker)
    comm_buffers: Callable[[], list[torch.Tensor]] = list
    watch: dict[str, Any] = field(default_factory=lambda: {"tracker": None})  # the tracker of the measured step


def make_optimizer(ctx: Context, params: Any) -> torch.optim.Optimizer:
    """The optimizer the plan names: sgd, momentum (SGD, 0.9), adam or adamw."""
    params = list(params)
    if ctx.optimizer == "sgd":
        return torch.optim.SGD(params, lr=ctx.lr)
    if ctx.optimizer == "momentum":
        return torch.optim.SGD(params, lr=ctx.lr, momentum=0.9)
    if ctx.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=ctx.lr)
    return torch.optim.Adam(params, lr=ctx.lr)


def loss_fn(ctx: Context) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The mean loss the plan names (cross_entropy or mse)."""
    f = torch.nn.functional
    return f.cross_entropy if ctx.loss == "cross_entropy" else f.mse_loss


def set_dropout_rows(rows: torch.Tensor, step: int) -> None:
    """Tell the seeded dropouts which global batch rows the next forward computes, and the step."""
    SeededDropout.context["rows"] = rows
    SeededDropout.context["step"] = step


def local_step(
    ctx: Context, module: nn.Module, opt: torch.optim.Optimizer, share: bool, watch: dict[str, Any]
) -> Callable[[torch.Tensor, torch.Tensor, int], float]:
    """One step of a model that runs whole on this rank: on its share of the batch (``share``) or all of it.

    ``watch["tracker"]``, when set, is told when the backward runs.
    """
    from jupyter_mgpu.strategies.measure import set_backward

    loss = loss_fn(ctx)

    def step(x: torch.Tensor, y: torch.Tensor, k: int) -> float:
        rows = torch.arange(x.shape[0])
        if share:
            b = x.shape[0] // ctx.world_size
            sl = slice(ctx.rank * b, (ctx.rank + 1) * b)
            x, y, rows = x[sl], y[sl], rows[sl]
        set_dropout_rows(rows, k)
        opt.zero_grad(set_to_none=True)
        value = loss(module(x), y)
        set_backward(watch["tracker"], True)
        try:
            value.backward()
        finally:
            set_backward(watch["tracker"], False)
        opt.step()
        return float(value.detach())

    return step
