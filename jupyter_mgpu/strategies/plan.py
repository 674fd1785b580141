"""The pure planner of ``mg.compare``: check every argument and split the model, before any rank allocates.

Every refusal is one sentence naming what is wrong (and which layer). The plan says which layers form
tensor-parallel pairs (column-parallel, then row-parallel, Megatron style) and which layers each
pipeline stage holds (contiguous, balanced by parameter count). No torch here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.strategies import model_spec as ms

STRATEGIES = ("single", "ddp", "fsdp", "tp", "pp", "pp-gpipe", "pp-1f1b")
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}  # state tensors kept per parameter
LOSSES = ("cross_entropy", "mse")
ELEMENTWISE = ("act", "dropout")  # layers that may sit between a column- and a row-parallel Linear
MEASURED_STEP = 2  # steps before it warm up, it runs under the trackers, steps after it are timed


@dataclass
class ComparePlan:
    """What ``mg.compare`` will run: the checked arguments, the TP pairs and the pipeline stages."""

    layers: list[dict[str, Any]]
    strategies: list[str]
    world_size: int
    batch: int
    steps: int
    microbatches: int
    optimizer: str
    lr: float
    loss: str
    samples: int
    tp_pairs: list[tuple[int, int]] = field(default_factory=list)
    stages: list[tuple[int, int]] = field(default_factory=list)

    @property
    def params(self) -> int:
        return sum(ms.param_count(s) for s in self.layers)

    def ranks(self, strategy: str) -> list[int]:
        """The ranks a strategy runs on (``single``: rank 0 alone)."""
        return [0] if strategy == "single" else list(range(self.world_size))


def schedule_of(strategy: str) -> str:
    """The pipeline schedule of a ``pp`` strategy name: ``gpipe`` (``pp``, ``pp-gpipe``) or ``1f1b``."""
    return "1f1b" if strategy == "pp-1f1b" else "gpipe"


def strategy_names(strategies: Any) -> list[str]:
    """The strategies asked for (a list or ``"ddp,fsdp"``), checked, in order, without repeats."""
    if isinstance(strategies, str):
        strategies = [s for s in strategies.replace(" ", "").split(",") if s]
    if not isinstance(strategies, Iterable) or isinstance(strategies, (bytes, dict)):
        raise MgpuError(f"strategies must be a list such as ['ddp', 'fsdp'], got {strategies!r}")
    names = []
    for s in strategies:
        if not isinstance(s, str) or s.lower() not in STRATEGIES:
            raise MgpuError(f"unknown strategy {s!r}: choose from single, ddp, fsdp, tp, pp (or pp-gpipe, pp-1f1b)")
        names.append(s.lower())
    if not names:
        raise MgpuError("strategies names no strategy: choose from single, ddp, fsdp, tp, pp")
    return list(dict.fromkeys(names))


def tp_pairs(layers: list[dict[str, Any]], world_size: int) -> list[tuple[int, int]]:
    """Consecutive Linear layers as (column-parallel, row-parallel) pairs; one sentence when impossible."""
    lin = ms.linear_indices(layers)
    if len(lin) % 2:
        last = lin[-1]
        raise MgpuError(
            f"tensor parallel pairs consecutive Linear layers (column- then row-parallel), but "
            f"{ms.label(layers, last)} is Linear number {len(lin)} and has no partner; "
            "use an even number of Linear layers"
        )
    pairs = list(zip(lin[0::2], lin[1::2]))
    for col, row in pairs:
        for j in range(col + 1, row):
            if layers[j]["kind"] not in ELEMENTWISE:
                raise MgpuError(
                    f"tensor parallel cannot split {ms.label(layers, j)}: it sits between column-parallel "
                    f"layer {col} and row-parallel layer {row}, where each rank holds only some features"
                )
        out = layers[col]["out"]
        if out % world_size:
            raise MgpuError(
                f"tensor parallel splits the {out} output features of {ms.label(layers, col)} over "
                f"{world_size} ranks, and {out} does not divide by {world_size}"
            )
    return pairs


def pp_stages(layers: list[dict[str, Any]], stages: int) -> list[tuple[int, int]]:
    """``stages`` contiguous layer ranges, each starting at a Linear layer, balanced by parameter count."""
    lin = ms.linear_indices(layers)
    if len(lin) < stages:
        raise MgpuError(
            f"pipeline parallel needs at least one Linear layer per stage: {stages} stages, but the "
            f"model has {len(lin)} Linear layer{'s' if len(lin) != 1 else ''}"
        )
    starts = [0] + lin[1:]
    units = [(a, b) for a, b in zip(starts, starts[1:] + [len(layers)])]
    cost = [sum(ms.param_count(layers[i]) for i in range(a, b)) for a, b in units]
    n = len(units)
    prefix = [0]
    for c in cost:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][j]: the smallest possible largest stage when units[:j] form k stages
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                v = max(best[k - 1][i], prefix[j] - prefix[i])
                if v < best[k][j]:
                    best[k][j], cut[k][j] = v, i
    bounds, j = [], n
    for k in range(stages, 0, -1):
        i = cut[k][j]
        bounds.append((units[i][0], units[j - 1][1]))
        j = i
    return bounds[::-1]


def _positive_int(name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise MgpuError(f"{name} must be a whole number of at least {low}, got {value!r}")
    return value


def make_plan(
    layers: list[dict[str, Any]],
    strategies: Any,
    world_size: int,
    *,
    batch: Any,
    steps: Any,
    microbatches: Any,
    optimizer: Any,
    lr: Any,
    loss: Any,
    samples: int,
) -> ComparePlan:
    """Check everything ``mg.compare`` was given and split the model; raises one sentence on bad input."""
    names = strategy_names(strategies)
    batch = _positive_int("batch", batch)
    steps = _positive_int("steps", steps, 4)  # two warm-up steps, one measured for memory and bytes, then timed
    microbatches = _positive_int("microbatches", microbatches)
    if not isinstance(optimizer, str) or optimizer.lower() not in OPTIMIZERS:
        raise MgpuError(f"unknown optimizer {optimizer!r}: choose from {', '.join(OPTIMIZERS)}")
    if not isinstance(loss, str) or loss.lower() not in LOSSES:
        raise MgpuError(f"unknown loss {loss!r}: choose from {', '.join(LOSSES)}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 1e3:
        raise MgpuError(f"lr must be a positive learning rate such as 0.01, got {lr!r}")
    if samples < batch:
        raise MgpuError(f"the data has {samples} samples, fewer than one batch of {batch}")
    for s in names:
        if s in ("ddp", "fsdp") and batch % world_size:
            raise MgpuError(
                f"batch {batch} does not split evenly over {world_size} ranks ({s} gives each rank an "
                "equal share of every batch)"
            )
    plan = ComparePlan(
        layers, names, world_size, batch, steps, microbatches, optimizer.lower(), float(lr), loss.lower(), samples
    )
    if "tp" in names:
        plan.tp_pairs = tp_pairs(layers, world_size)
    if any(s.startswith("pp") for s in names):
        if batch % microbatches:
            raise MgpuError(f"batch {batch} is not divisible into {microbatches} micro-batches")
        plan.stages = pp_stages(layers, world_size)
    return plan
