"""mg.compare before anything runs: model description, the planner's refusals and splits, the formulas."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.strategies import expected as ex
from jupyter_mgpu.strategies import layers as lay
from jupyter_mgpu.strategies import model_spec as ms
from jupyter_mgpu.strategies import plan as pm


def mlp(*widths: int, act: type = nn.ReLU) -> nn.Sequential:
    mods: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        mods.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            mods.append(act())
    return nn.Sequential(*mods)


def plan(layers, strategies="single,ddp,fsdp,tp,pp", world=2, **kw):
    args = dict(batch=16, steps=4, microbatches=4, optimizer="adam", lr=0.01, loss="cross_entropy", samples=64)
    args.update(kw)
    return pm.make_plan(layers, strategies, world, **args)


def test_describe_keeps_every_supported_layer_and_its_settings():
    m = nn.Sequential(
        nn.Linear(8, 16, bias=False),
        nn.GELU(approximate="tanh"),
        nn.Dropout(0.25),
        nn.LayerNorm(16, eps=1e-3),
        nn.Linear(16, 4),
        nn.LeakyReLU(0.2),
    )
    specs = lay.describe(m)
    assert [s["kind"] for s in specs] == ["linear", "act", "dropout", "layernorm", "linear", "act"]
    assert specs[0] == {"kind": "linear", "in": 8, "out": 16, "bias": False}
    assert specs[1]["args"] == {"approximate": "tanh"} and specs[5]["args"] == {"negative_slope": 0.2}
    assert specs[3]["eps"] == 1e-3 and specs[2]["p"] == 0.25
    assert ms.widths(specs) == [8, 16, 16, 16, 16, 4, 4]
    built = [lay.build(s, i, width=16) for i, s in enumerate(specs)]
    assert isinstance(built[2], lay.SeededDropout) and built[1].approximate == "tanh"


@pytest.mark.parametrize(
    "model, message",
    [
        (nn.Sequential(nn.Linear(4, 4), nn.Conv1d(1, 1, 1)), r"^layer 1 \(Conv1d\) is not supported"),
        (
            nn.Sequential(nn.Linear(4, 8), nn.Linear(6, 2)),
            r"^layer 1 \(Linear 6→2\) takes 6 features but the layers before",
        ),
        (nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(5)), r"^layer 1 \(LayerNorm 5\) normalises 5 features"),
        (nn.Linear(4, 4), r"needs an nn.Sequential .* got Linear"),
        (nn.Sequential(nn.Linear(4, 4).double()), r"layer 0 \(Linear 4→4\) has torch.float64 parameters"),
    ],
)
def test_describe_names_the_layer_it_cannot_split(model, message):
    with pytest.raises(MgpuError, match=message):
        lay.describe(model)


def test_bundled_models():
    specs = ms.bundled("mlp:64x3")
    assert [s["kind"] for s in specs] == ["linear", "act", "linear", "act", "linear"]
    assert sum(ms.param_count(s) for s in specs) == 3 * (64 * 64 + 64)
    with pytest.raises(MgpuError, match="unknown bundled model 'cnn:1'"):
        ms.bundled("cnn:1")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(strategies="ddp,zero3"), r"^unknown strategy 'zero3': choose from single, ddp"),
        (dict(optimizer="lamb"), r"^unknown optimizer 'lamb'"),
        (dict(loss="hinge"), r"^unknown loss 'hinge'"),
        (dict(steps=3), r"^steps must be a whole number of at least 4"),
        (dict(batch=15), r"^batch 15 does not split evenly over 2 ranks \(ddp"),
        (dict(batch=18, strategies="pp", microbatches=4), r"^batch 18 is not divisible into 4 micro-batches"),
        (dict(samples=8), r"^the data has 8 samples, fewer than one batch of 16"),
        (dict(lr=-1.0), r"^lr must be a positive learning rate"),
    ],
)
def test_planner_refuses_bad_arguments_in_one_sentence(kwargs, message):
    strategies = kwargs.pop("strategies", "single,ddp,fsdp,tp,pp")
    with pytest.raises(MgpuError, match=message):
        plan(lay.describe(mlp(8, 16, 4)), strategies, **kwargs)


def test_planner_refuses_models_that_cannot_be_split_and_names_the_layer():
    three = lay.describe(mlp(8, 16, 16, 4))  # Linear layers 0, 2, 4
    with pytest.raises(MgpuError, match=r"layer 4 \(Linear 16→4\) is Linear number 3 and has no partner"):
        plan(three, "tp")
    with pytest.raises(MgpuError, match=r"needs at least one Linear layer per stage: 4 stages, but the model has 3"):
        plan(three, "pp", world=4)
    norm = lay.describe(nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)))
    with pytest.raises(
        MgpuError,
        match=r"cannot split layer 1 \(LayerNorm 16\): it sits between column-parallel "
        r"layer 0 and row-parallel layer 2",
    ):
        plan(norm, "tp")
    odd = lay.describe(mlp(8, 6, 4))
    with pytest.raises(MgpuError, match=r"splits the 6 output features of layer 0 \(Linear 8→6\) over 4 ranks"):
        plan(odd, "tp", world=4, batch=16)


def test_tp_pairs_and_layernorm_outside_them():
    specs = lay.describe(
        nn.Sequential(
            nn.Linear(8, 16),
            nn.GELU(),
            nn.Dropout(0.1),
            nn.Linear(16, 8),
            nn.LayerNorm(8),
            nn.Linear(8, 16),
            nn.ReLU(),
            nn.Linear(16, 4),
        )
    )
    assert pm.tp_pairs(specs, 2) == [(0, 3), (5, 7)]


def _best_split(costs: list[int], parts: int) -> int:
    """The smallest possible largest part of a contiguous split (brute force)."""
    best = math.inf
    for cuts in itertools.combinations(range(1, len(costs)), parts - 1):
        bounds = (0, *cuts, len(costs))
        best = min(best, max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])))
    return best


@pytest.mark.parametrize(
    "widths, stages",
    [((8, 64, 8, 8, 8, 4), 2), ((8, 8, 8, 64, 64, 8, 4), 3), ((16, 16, 16, 16, 16), 4), ((4, 100, 4, 4, 100, 4, 4), 3)],
)
def test_pipeline_stages_are_contiguous_start_at_a_linear_and_are_balanced(widths, stages):
    specs = lay.describe(mlp(*widths))
    bounds = pm.pp_stages(specs, stages)
    assert len(bounds) == stages and bounds[0][0] == 0 and bounds[-1][1] == len(specs)
    assert all(a < b and b == c for (a, b), (c, _) in zip(bounds, bounds[1:]))
    assert all(specs[a]["kind"] == "linear" for a, _ in bounds)
    cost = [sum(ms.param_count(specs[i]) for i in range(a, b)) for a, b in bounds]
    units = [ms.param_count(s) for s in specs if s["kind"] == "linear"]
    assert max(cost) == _best_split(units, stages)


def test_expected_model_states_follow_zero_and_megatron_counts():
    specs = ms.bundled("mlp:64x4")  # 4 Linear(64, 64): N = 4 * 4160
    n = 4 * (64 * 64 + 64)
    p = plan(specs, "single,ddp,fsdp,tp,pp,pp-1f1b", world=4, batch=16, microbatches=4)
    (single,) = ex.expected(p, "single")
    assert (single["params"], single["grads"], single["optimizer"]) == (4 * n, 4 * n, 8 * n)  # Adam: 2 states
    ddp = ex.expected(p, "ddp")
    assert all(r["params"] == 4 * n and r["comm_buffers"] == 4 * n and r["bytes"] == {"all_reduce": 4 * n} for r in ddp)
    fsdp = ex.expected(p, "fsdp")
    assert sum(r["params"] for r in fsdp) == 4 * n and all(r["params"] == n for r in fsdp)
    assert fsdp[0]["bytes"] == {"all_gather": 2 * n, "reduce_scatter": 4 * n}
    tp = ex.expected(p, "tp")  # column shards' weight+bias and row shards' weight split; row bias whole
    assert tp[0]["params"] == 4 * (2 * (64 * 64 // 4 + 16) + 2 * (64 * 64 // 4 + 64))
    # forward: each pair's output summed (16 × 64 floats); backward: the second pair's input gradient
    assert tp[0]["bytes"] == {"all_reduce": 4 * (2 * 16 * 64 + 16 * 64)}
    pp = ex.expected(p, "pp")
    assert sum(r["params"] for r in pp) == 4 * n
    assert pp[0]["bytes"] == {"send": 4 * 16 * 64, "recv": 4 * 16 * 64}
    assert pp[1]["bytes"] == {"send": 8 * 16 * 64, "recv": 8 * 16 * 64}
    assert pp[0]["bubble"] == pytest.approx(3 / 7)  # (p-1)/(m+p-1)
    gpipe, f1b = ex.expected(p, "pp"), ex.expected(p, "pp-1f1b")
    assert [r["activations"] for r in f1b][-1] < [r["activations"] for r in gpipe][-1]  # 1 micro-batch in flight
    sgd = plan(specs, "single", world=4, optimizer="sgd")
    assert ex.expected(sgd, "single")[0]["optimizer"] == 0


def test_expected_activations_count_what_autograd_keeps():
    specs = lay.describe(nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)))
    # the data is not an activation; GELU keeps its input (16) and the next Linear its input (16);
    # the loss keeps log-softmax's output (4)
    assert ms.saved_floats(specs) == 32
    p = plan(specs, "single", batch=16)
    assert ex.expected(p, "single")[0]["activations"] == 4 * 16 * (32 + 4)


def test_seeded_dropout_gives_every_element_one_decision_whoever_computes_it():
    rows = torch.arange(12)
    whole = lay.keep_mask(rows, 0, 20, 20, key=1234, p=0.3)
    top_left = lay.keep_mask(rows[:6], 0, 10, 20, key=1234, p=0.3)
    bottom_right = lay.keep_mask(rows[6:], 10, 10, 20, key=1234, p=0.3)
    assert torch.equal(whole[:6, :10], top_left) and torch.equal(whole[6:, 10:], bottom_right)
    big = lay.keep_mask(torch.arange(400), 0, 500, 500, key=7, p=0.3)
    assert abs(big.float().mean().item() - 0.7) < 0.01
    assert not torch.equal(big, lay.keep_mask(torch.arange(400), 0, 500, 500, key=8, p=0.3))
