"""Who holds which part of each weight under a strategy, drawn with ``mg.show``'s placement view.

The boxes come from the ranks themselves (``strategies/weights.shard_boxes``: each parameter's slice
of the global weight as its DTensor placement, or its whole tensor), so the picture shows what FSDP's
dim-0 shards, tensor parallel's column/row split, a pipeline's stages or DDP's replicas really were.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.layout import tiles as lay
from jupyter_mgpu.strategies import model_spec as ms
from jupyter_mgpu.units import format_bytes
from jupyter_mgpu.widgets.colors import rank_color

MAX_WEIGHTS = 4


def _tiles_of(panel: dict[str, Any], rows: tuple[int, int], cols: tuple[int, int]) -> list[int]:
    return [
        i
        for i, t in enumerate(panel["tiles"])
        if rows[0] <= t["rows"][0] and t["rows"][1] <= rows[1] and cols[0] <= t["cols"][0] and t["cols"][1] <= cols[1]
    ]


def _tip(label: str, shape: tuple[int, int], owned: list[tuple[int, Any]], tile: dict[str, Any]) -> str:
    """The hover text of one tile: the layer, then each rank holding it and its slice."""
    holders = [
        f"rank {r}: rows {b[0][0]}:{b[0][1]} × cols {b[1][0]}:{b[1][1]}, "
        f"{format_bytes((b[0][1] - b[0][0]) * (b[1][1] - b[1][0]) * 4)}"
        for r, b in owned
        if b[0][0] <= tile["rows"][0]
        and tile["rows"][1] <= b[0][1]
        and b[1][0] <= tile["cols"][0]
        and tile["cols"][1] <= b[1][1]
    ]
    return f"{label}, weight {shape[0]}×{shape[1]}\n" + ("\n".join(holders) or "held by no rank")


def weights_data(
    held: dict[int, list[dict[str, Any]]], layers: list[dict[str, Any]], chosen: list[int], world_size: int
) -> dict[str, Any]:
    """Placement-view data (``widgets/placement_data`` format): one panel per chosen layer's weight."""
    panels: list[dict[str, Any]] = []
    blocks: list[Any] = []
    adds: list[Any] = []
    tips: list[Any] = []
    mem = [0] * world_size
    for i in chosen:
        owned = [
            (r, tuple(tuple(b) for b in w["box"]))
            for r, ws in held.items()
            for w in ws
            if w["layer"] == i and w["name"].endswith(".weight")
        ]
        shape = layers[i]["out"], layers[i]["in"]
        p = lay.layout(shape, owned, (0, 1))[0]
        pi = len(panels)
        panels.append(
            {
                "title": f"layer {i}",
                "size": list(shape),  # short: a tall weight's panel is narrow
                "rows": p["rows"],
                "cols": p["cols"],
                "itemsize": 4,
                "dims": ["out", "in"],
                "tiles": [[t["rows"][0], t["rows"][1], t["cols"][0], t["cols"][1]] for t in p["tiles"]],
            }
        )
        tips.append([_tip(ms.label(layers, i), shape, owned, t) for t in p["tiles"]])
        for r, b in owned:
            if (b[0][1] - b[0][0]) * (b[1][1] - b[1][0]) == 0:
                continue
            blocks.append([pi, b[0][0], b[0][1], b[1][0], b[1][1], _tiles_of(p, b[0], b[1])])
            adds.append([r, len(blocks) - 1])
            mem[r] += (b[0][1] - b[0][0]) * (b[1][1] - b[1][0]) * 4
    frame = {
        "add": adds,
        "rm": [],
        "arrows": [],
        "compute": [],
        "mem": mem,
        "caption": "as the ranks reported their parameters after building the strategy",
    }
    return {
        "world_size": world_size,
        "colors": [rank_color(r) for r in range(world_size)],
        "panels": panels,
        "blocks": blocks,
        "frames": [frame],
        "tips": tips,
        "max_mem": max(mem + [1]),
    }


def weights_view(result: Any, strategy: str, layers: Any = None) -> Any:
    """The placement view of ``strategy``'s weights (default: the first two Linear layers; at most 4)."""
    from jupyter_mgpu.widgets.placement import PlacementWidget

    raw = result.raw.get(strategy)
    if not raw:
        raise MgpuError(f"no strategy named {strategy!r} ran in this result (it has {', '.join(result.raw) or 'none'})")
    specs = result.plan.layers
    linear = ms.linear_indices(specs)
    chosen = linear[:2] if layers is None else ([layers] if isinstance(layers, int) else list(layers))
    bad = [i for i in chosen if i not in linear]
    if bad:
        raise MgpuError(
            f"layer {bad[0]} is not a Linear layer of this model (Linear layers: {', '.join(map(str, linear))})"
        )
    if not 1 <= len(chosen) <= MAX_WEIGHTS:
        raise MgpuError(f"show draws 1 to {MAX_WEIGHTS} weights at a time, got {len(chosen)}")
    held = {r["rank"]: r.get("weights") or [] for r in raw}
    w = PlacementWidget(
        data=weights_data(held, specs, chosen, result.world_size),
        mode="view",
        title=f"{strategy}: who holds which part of each weight",
        badge=f"reported by {len(raw)} rank{'s' if len(raw) != 1 else ''}",
    )
    w.text_summary = f"<{strategy} weights of layers {', '.join(map(str, chosen))} on {result.world_size} ranks>"
    return w
