"""From an ``nn.Sequential`` to layer specs and back, initial weights, and a dropout every strategy agrees on.

Controller side: :func:`describe` turns a notebook's ``nn.Sequential`` into specs (``model_spec``)
and :func:`write_initial_weights` saves its weights one file per layer, so a rank later reads only the
layers it holds. Rank side: :func:`build` makes a layer from its spec, :func:`initial_weights` gives a
layer's full initial tensors (from those files, or drawn from a seed for bundled models: the same
numbers on every rank), and :class:`SeededDropout` drops the same elements whichever rank computes
them, so dropout does not make strategies differ: each element's mask comes from a hash of
(seed, step, layer, sample position in the global batch, feature).
"""

from __future__ import annotations

import math
import os
from typing import Any, ClassVar

import torch
from torch import nn

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.strategies import model_spec as ms

M32 = 0xFFFFFFFF


def describe(model: Any) -> list[dict[str, Any]]:
    """The specs of an ``nn.Sequential``; one sentence naming the first layer that cannot be split."""
    if not isinstance(model, nn.Sequential):
        raise MgpuError(
            "mg.compare needs an nn.Sequential of Linear, activation, LayerNorm and Dropout layers "
            f"(or a bundled model such as 'mlp:1024x8'), got {type(model).__name__}"
        )
    out: list[dict[str, Any]] = []
    for i, layer in enumerate(model):
        name = type(layer).__name__
        if type(layer) is nn.Linear:
            out.append(
                {"kind": "linear", "in": layer.in_features, "out": layer.out_features, "bias": layer.bias is not None}
            )
        elif type(layer) is nn.LayerNorm and len(layer.normalized_shape) == 1:
            out.append(
                {
                    "kind": "layernorm",
                    "features": int(layer.normalized_shape[0]),
                    "eps": float(layer.eps),
                    "affine": layer.elementwise_affine,
                    "bias": getattr(layer, "bias", None) is not None,
                }
            )
        elif type(layer) is nn.Dropout:
            out.append({"kind": "dropout", "p": float(layer.p)})
        elif name in ms.ACTIVATIONS and type(layer) is getattr(nn, name):
            out.append({"kind": "act", "cls": name, "args": _activation_args(layer)})
        else:
            raise MgpuError(
                f"layer {i} ({name}) is not supported: mg.compare splits nn.Sequential models of Linear, "
                f"activation ({', '.join(ms.ACTIVATIONS)}), 1-D LayerNorm and Dropout layers"
            )
        if any(p.dtype != torch.float32 for p in layer.parameters()):
            raise MgpuError(
                f"{ms.label(out, i)} has {next(layer.parameters()).dtype} parameters; "
                "mg.compare measures float32 models (call model.float() first)"
            )
    ms.widths(out)
    return out


def _activation_args(layer: nn.Module) -> dict[str, Any]:
    keep = {
        "GELU": ("approximate",),
        "LeakyReLU": ("negative_slope",),
        "ELU": ("alpha",),
        "Softplus": ("beta", "threshold"),
        "Hardtanh": ("min_val", "max_val"),
    }
    return {k: getattr(layer, k) for k in keep.get(type(layer).__name__, ())}


def write_initial_weights(model: nn.Sequential, folder: str) -> None:
    """Save each layer's parameters to ``folder/layer<i>.pt`` (controller side, mode 0600 files)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    for i, layer in enumerate(model):
        state = {k: v.detach().cpu().contiguous() for k, v in layer.state_dict().items()}
        if state:
            torch.save(state, os.path.join(folder, f"layer{i}.pt"))


def initial_weights(init: dict[str, Any], layers: list[dict[str, Any]], i: int) -> dict[str, torch.Tensor]:
    """Layer ``i``'s full initial parameters: from ``init["dir"]`` or drawn from ``init["seed"]``."""
    spec = layers[i]
    if ms.param_count(spec) == 0:
        return {}
    if init.get("dir"):
        saved: dict[str, torch.Tensor] = torch.load(os.path.join(init["dir"], f"layer{i}.pt"), weights_only=True)
        return saved
    if spec["kind"] == "layernorm":
        out = {"weight": torch.ones(spec["features"])}
        if spec["bias"]:
            out["bias"] = torch.zeros(spec["features"])
        return out
    g = torch.Generator().manual_seed(int(init["seed"]) * 1_000_003 + i)
    bound = 1.0 / math.sqrt(spec["in"])  # nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for both
    out = {"weight": torch.empty(spec["out"], spec["in"]).uniform_(-bound, bound, generator=g)}
    if spec["bias"]:
        out["bias"] = torch.empty(spec["out"]).uniform_(-bound, bound, generator=g)
    return out


class SeededDropout(nn.Module):
    """Dropout whose mask depends only on (seed, step, layer, global row, feature), not on the rank.

    ``rows`` (the global batch positions of the rows this rank computes) and ``step`` are set by the
    ``compare_run`` before each forward; ``col0`` is the first feature this rank holds when tensor parallel
    splits the features, ``width`` the full feature count.
    """

    context: ClassVar[dict[str, Any]] = {"rows": None, "step": 0}

    def __init__(self, p: float, index: int, seed: int, width: int, col0: int = 0):
        super().__init__()
        self.p, self.index, self.seed, self.width, self.col0 = p, index, seed, width, col0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        rows = self.context["rows"]
        if rows is None or len(rows) != x.shape[0]:
            rows = torch.arange(x.shape[0])
        keep = keep_mask(
            rows.to(x.device),
            self.col0,
            x.shape[-1],
            self.width,
            (self.seed * 7919 + self.index * 104729 + int(self.context["step"]) * 1299709) & M32,
            self.p,
        )
        return x * keep.to(x.dtype) * (1.0 / (1.0 - self.p))


def keep_mask(rows: torch.Tensor, col0: int, ncols: int, width: int, key: int, p: float) -> torch.Tensor:
    """Which elements survive: a 32-bit integer hash of each (row, column) compared against ``p``."""
    cols = torch.arange(col0, col0 + ncols, device=rows.device)
    x = (rows.long()[:, None] * width + cols[None, :]) ^ key
    for _ in range(2):
        x = ((x & M32) * 0x45D9F3B) & M32
        x = x ^ (x >> 16)
    return x >= int(p * 2**32)


def build(
    spec: dict[str, Any], index: int, seed: int = 0, width: int = 0, col0: int = 0, features: int | None = None
) -> nn.Module:
    """A fresh layer for ``spec`` (weights uninitialised: call inside ``torch.device("meta")`` or load them).

    ``features``: this rank's feature count for a dropout inside a tensor-parallel pair.
    """
    kind = spec["kind"]
    if kind == "linear":
        return nn.Linear(spec["in"], spec["out"], bias=spec["bias"])
    if kind == "layernorm":
        kwargs = {"bias": spec["bias"]} if spec["affine"] else {}
        return nn.LayerNorm(spec["features"], eps=spec["eps"], elementwise_affine=spec["affine"], **kwargs)
    if kind == "dropout":
        return SeededDropout(spec["p"], index, seed, width or (features or 0), col0)
    layer: nn.Module = getattr(nn, spec["cls"])(**spec["args"])
    return layer
