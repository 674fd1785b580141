"""What the standard formulas predict for each strategy and rank of a comparison (pure, float32 = 4 bytes).

Per rank, in bytes: ``params``, ``grads`` and ``optimizer`` state (k tensors per parameter: SGD 0,
momentum 1, Adam/AdamW 2), ``activations`` (what autograd keeps for the backward), ``comm_buffers``,
bytes handed to each collective per step, and the pipeline bubble. The formulas:

* model states — the "bytes per parameter" count of ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory
  Optimizations Toward Training Trillion Parameter Models", §3 and Figure 1), in float32:
  single and DDP keep (4 + 4 + 4k)·Ψ per rank; FSDP (ZeRO-3) divides all three by P — per tensor:
  FSDP2 keeps parameters and gradients in shards padded to ⌈rows/P⌉ and makes optimizer state for the
  rows ``torch.chunk`` gives the rank; tensor parallel divides each Linear pair's weights by P
  and keeps the row-parallel bias and the layers outside the pairs whole (Shoeybi et al. 2019,
  "Megatron-LM", §3); a pipeline stage keeps only its own layers' states.
* activations — per sample, what autograd saves (``model_spec.saved_floats``, Korthikanti et al.
  2022 §4 for an MLP) plus the loss's saved input, times the samples in flight: the rank's share of
  the batch for DDP/FSDP; the whole batch for TP with the features inside each pair split by P
  (Megatron); for a pipeline stage, B/m per micro-batch times the micro-batches in flight — all m
  for GPipe (Huang et al. 2019), at most p − s for 1F1B on stage s (Narayanan et al. 2021,
  "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", §2.2.1).
* communication buffers — DDP: its gradient buckets, one more copy of all gradients (4Ψ, PyTorch DDP
  notes); FSDP2: for the layer being computed, its all-gather output, its unsharded parameters, its
  unsharded gradients and their reduce-scatter buffer — 4 × the largest layer's bytes (``fully_shard``
  gathers and frees one parameter group at a time, ``reshard_after_forward=True``); pipeline: the
  receive buffers of every micro-batch, activations in (4·B·h_in) and gradients back (4·B·h_out).
* bytes per step, each buffer once — DDP: all_reduce of 4Ψ; FSDP: all_gather of each rank's shards
  twice (forward, and again for the backward) and reduce_scatter of the full gradients, 4Ψ (padded);
  TP: per pair one all_reduce of the output (4·B·h) forward and, where the pair's input needs a
  gradient, one of the input gradient backward; pipeline: 4·B·h of activations to the next stage and
  of gradients to the previous.
* bubble — the idle share of a stage in a GPipe or 1F1B step, (p − 1)/(m + p − 1) (Narayanan et al.
  2021 §2.2: bubble time (p − 1)/m of the ideal time).
"""

from __future__ import annotations

import math
from typing import Any

from jupyter_mgpu.strategies import model_spec as ms
from jupyter_mgpu.strategies.plan import OPTIMIZERS, ComparePlan, schedule_of

F32 = 4


def _chunk_rows(d: int, parts: int, r: int) -> int:
    """Rows rank ``r`` holds when ``torch.chunk`` splits ``d`` rows into ``parts`` (FSDP2's split)."""
    c = math.ceil(d / parts)
    return max(0, min(c, d - r * c))


def _tensors(spec: dict[str, Any]) -> list[tuple[int, int]]:
    """Each parameter tensor of a layer as (dim-0 rows, elements per row)."""
    if spec["kind"] == "linear":
        return [(spec["out"], spec["in"])] + ([(spec["out"], 1)] if spec["bias"] else [])
    if spec["kind"] == "layernorm" and spec["affine"]:
        return [(spec["features"], 1)] * (2 if spec["bias"] else 1)
    return []


def _loss_floats(plan: ComparePlan) -> int:
    out = ms.widths(plan.layers)[-1]
    return out * (2 if plan.loss == "mse" else 1)


def _row(
    params: float, k: int, act: float, comm: float, nbytes: dict[str, float], bubble: float | None = None
) -> dict[str, Any]:
    return {
        "params": params * F32,
        "grads": params * F32,
        "optimizer": k * params * F32,
        "activations": act * F32,
        "comm_buffers": comm * F32,
        "bytes": {c: b * F32 for c, b in nbytes.items()},
        "bubble": bubble,
    }


def expected(plan: ComparePlan, strategy: str) -> list[dict[str, Any]]:
    """The predicted row of each rank ``strategy`` (any name of ``plan.STRATEGIES``) runs on, in rank order."""
    P, B, layers = plan.world_size, plan.batch, plan.layers
    k = OPTIMIZERS[plan.optimizer]
    n = plan.params
    per_sample = ms.saved_floats(layers) + _loss_floats(plan)
    if strategy == "single":
        return [_row(n, k, B * per_sample, 0, {})]
    if strategy == "ddp":
        return [_row(n, k, B // P * per_sample, n, {"all_reduce": n}) for _ in range(P)]
    if strategy == "fsdp":
        largest = max(ms.param_count(s) for s in layers)
        padded = sum(math.ceil(d / P) * P * e for s in layers for d, e in _tensors(s))
        rows = []
        for r in range(P):  # parameters and gradients sit in padded shards, optimizer state is made per shard
            mine = sum(_chunk_rows(d, P, r) * e for s in layers for d, e in _tensors(s))
            row = _row(
                padded / P,
                k,
                B // P * per_sample,
                4 * largest,
                {"all_gather": 2 * padded / P, "reduce_scatter": padded},
            )
            row["optimizer"] = k * mine * F32
            rows.append(row)
        return rows
    if strategy == "tp":
        return [_tp_row(plan, k, per_sample) for _ in range(P)]
    return [_pp_row(plan, k, s, schedule_of(strategy)) for s in range(P)]


def _tp_row(plan: ComparePlan, k: int, per_sample_full: float) -> dict[str, Any]:
    P, B, layers = plan.world_size, plan.batch, plan.layers
    w = ms.widths(layers)
    params = float(plan.params)
    split: dict[int, int] = {}
    nbytes = 0.0
    for col, row in plan.tp_pairs:
        c, r = layers[col], layers[row]
        params -= (c["in"] * c["out"] + (c["out"] if c["bias"] else 0)) * (1 - 1 / P)
        params -= r["in"] * r["out"] * (1 - 1 / P)
        for j in range(col + 1, row + 1):
            split[j] = P
        nbytes += B * r["out"]  # forward: the row-parallel output is summed over the ranks
        if any(ms.param_count(layers[j]) for j in range(col)):
            nbytes += B * w[col]  # backward: the pair's input gradient, where one is needed
    act = B * (ms.saved_floats(layers, split=split) + _loss_floats(plan))
    return _row(params, k, act, 0, {"all_reduce": nbytes})


def _pp_row(plan: ComparePlan, k: int, s: int, schedule: str) -> dict[str, Any]:
    P, B, m, layers = plan.world_size, plan.batch, plan.microbatches, plan.layers
    w = ms.widths(layers)
    a, b = plan.stages[s]
    params = sum(ms.param_count(layers[i]) for i in range(a, b))
    last = s == P - 1
    # its output is kept for the backward too (the last stage's logits, or what it sends on)
    per_sample = ms.saved_floats(layers, a, b) + w[b] + (_loss_floats(plan) if last else 0)
    in_flight = min(m, P - s) if schedule == "1f1b" else m
    act = in_flight * (B // m) * per_sample
    comm = (B * w[a] if s > 0 else 0) + (B * w[b] if not last else 0)
    nbytes: dict[str, float] = {}
    if not last:
        nbytes["send"] = B * w[b]
        nbytes["recv"] = B * w[b]
    if s > 0:
        nbytes["send"] = nbytes.get("send", 0) + B * w[a]
        nbytes["recv"] = nbytes.get("recv", 0) + B * w[a]
    return _row(params, k, act, comm, nbytes, bubble=(P - 1) / (m + P - 1))
