"""Pure description of the models ``mg.compare`` splits: a list of layer specs (plain dicts, no torch).

A spec is one of ``{"kind": "linear", "in", "out", "bias"}``, ``{"kind": "act", "cls", "args"}``
(an elementwise activation), ``{"kind": "layernorm", "features", "eps", "affine", "bias"}`` or
``{"kind": "dropout", "p"}``. The controller describes a notebook's ``nn.Sequential`` with
``layers.describe``; a bundled model such as ``"mlp:4096x8"`` (8 Linear layers of width 4096 with
ReLU between them) is described here, and its weights are drawn on the ranks from a seed, so a model
bigger than any one rank's memory never has to exist in one place.
"""

from __future__ import annotations

import re
from typing import Any

from jupyter_mgpu.errors import MgpuError

# elementwise activations the strategies accept (torch.nn class names); what autograd saves for each
SAVES_INPUT = ("GELU", "SiLU", "Mish", "Softplus", "LeakyReLU", "ReLU6", "Hardtanh")
SAVES_OUTPUT = ("ReLU", "Tanh", "Sigmoid", "ELU")
SAVES_NOTHING = ("Identity",)
ACTIVATIONS = SAVES_INPUT + SAVES_OUTPUT + SAVES_NOTHING
BUNDLED = re.compile(r"^mlp:(\d+)x(\d+)$")


def bundled(name: str) -> list[dict[str, Any]]:
    """The layers of a bundled model: ``"mlp:WxD"`` is D ``Linear(W, W)`` layers with ReLU between."""
    m = BUNDLED.match(name.strip()) if isinstance(name, str) else None
    if not m:
        raise MgpuError(f"unknown bundled model {name!r}: name one such as 'mlp:1024x8' (width x Linear layers)")
    width, depth = int(m.group(1)), int(m.group(2))
    if not (1 <= width <= 65536 and 1 <= depth <= 512):
        raise MgpuError(f"bundled model {name!r} is out of range: width 1-65536, 1-512 Linear layers")
    layers: list[dict[str, Any]] = []
    for i in range(depth):
        layers.append({"kind": "linear", "in": width, "out": width, "bias": True})
        if i < depth - 1:
            layers.append({"kind": "act", "cls": "ReLU", "args": {}})
    return layers


def label(layers: list[dict[str, Any]], i: int) -> str:
    """``layer 3 (Linear 32→4)``: how errors and pictures name a layer."""
    s = layers[i]
    if s["kind"] == "linear":
        what = f"Linear {s['in']}→{s['out']}"
    elif s["kind"] == "layernorm":
        what = f"LayerNorm {s['features']}"
    elif s["kind"] == "dropout":
        what = f"Dropout p={s['p']:g}"
    else:
        what = s["cls"]
    return f"layer {i} ({what})"


def param_count(spec: dict[str, Any]) -> int:
    """Parameters of one layer."""
    if spec["kind"] == "linear":
        n_in: int = spec["in"]
        n_out: int = spec["out"]
        return n_in * n_out + (n_out if spec["bias"] else 0)
    if spec["kind"] == "layernorm" and spec["affine"]:
        features: int = spec["features"]
        return features * (2 if spec["bias"] else 1)
    return 0


def linear_indices(layers: list[dict[str, Any]]) -> list[int]:
    """Indices of the Linear layers, in order."""
    return [i for i, s in enumerate(layers) if s["kind"] == "linear"]


def widths(layers: list[dict[str, Any]]) -> list[int]:
    """Features entering each layer, then the model's output features (``len(layers) + 1`` numbers).

    Raises one sentence naming the first layer whose input does not match what the layer before gives.
    """
    lin = linear_indices(layers)
    if not lin:
        raise MgpuError("the model has no Linear layer: mg.compare splits the weights of Linear layers")
    width = layers[lin[0]]["in"]
    out = []
    for i, s in enumerate(layers):
        out.append(width)
        if s["kind"] == "linear":
            if s["in"] != width:
                raise MgpuError(f"{label(layers, i)} takes {s['in']} features but the layers before it give {width}")
            width = s["out"]
        elif s["kind"] == "layernorm" and s["features"] != width:
            raise MgpuError(
                f"{label(layers, i)} normalises {s['features']} features but the layers before it give {width}"
            )
    out.append(width)
    return out


def saved_floats(
    layers: list[dict[str, Any]], start: int = 0, stop: int | None = None, split: dict[int, int] | None = None
) -> float:
    """Floats per sample that autograd keeps from the forward of ``layers[start:stop]`` for the backward.

    Linear keeps its input; LayerNorm its input plus a mean and a reciprocal deviation; Dropout its
    mask; activations that differentiate through their input (GELU, SiLU, …) keep it, those that use
    their output (ReLU, Tanh, …) share it with the next layer's input. The first layer's input is the
    data (or, in a pipeline, the receive buffer), not an activation. ``split[i]``: layer i's input is
    split over that many ranks (tensor parallel). Follows the counting of Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models", §4, for an MLP.
    """
    w = widths(layers)
    stop = len(layers) if stop is None else stop
    split = split or {}
    total = 0.0
    for i in range(start, stop):
        s, f = layers[i], w[i] / split.get(i, 1)
        first = i == start
        if s["kind"] == "linear":
            total += 0 if first else f
        elif s["kind"] == "layernorm":
            total += (0 if first else f) + 2
        elif (s["kind"] == "dropout" and s["p"] > 0) or (s["kind"] == "act" and s["cls"] in SAVES_INPUT and not first):
            total += f
    return total
