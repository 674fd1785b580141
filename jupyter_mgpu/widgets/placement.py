"""The placement view (``mg.show(A)``) and the trace player (``t.play()``): one anywidget, two modes.

State lives in synced traitlets (``data`` is sent once; ``index``/``playing``/``speed`` move it), so
both are testable without a browser. Each widget's mime bundle carries a static SVG (the current
frame) and a text picture next to the live view, so exported notebooks and terminals keep a picture.
``save_html`` writes one self-contained page (the same ES module inlined, no network). The data
travels with its positions (``placement_geometry``: ``data["geo"]``), so the live view and the static
SVG draw the same picture; a view's one heading is its caption (no title above it, none per panel).

The other half: ``layout/placement.py``, the data it draws.
"""

from __future__ import annotations

import html
import os
from typing import Any

import traitlets

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.widgets import placement_data as pdata
from jupyter_mgpu.widgets import standalone_page
from jupyter_mgpu.widgets.placement_geometry import with_geometry
from jupyter_mgpu.widgets.placement_svg import frame_svg
from jupyter_mgpu.widgets.transport import TransportWidget, module_source

ESM = module_source("placement.js")  # the shared transport controls, then the placement view


class PlacementWidget(TransportWidget):
    """Draws ``data`` (see ``placement_data``) at frame ``index``; ``mode`` is ``view`` or ``player``."""

    _esm = ESM
    data = traitlets.Dict().tag(sync=True)
    interval_ms = traitlets.Int(600).tag(sync=True)
    speed = traitlets.Float(1.0).tag(sync=True)
    live = traitlets.Bool(False).tag(sync=True)
    follow = traitlets.Bool(True).tag(sync=True)
    mode = traitlets.Unicode("player").tag(sync=True)

    @traitlets.validate("data")
    def _data(self, proposal: dict[str, Any]) -> dict[str, Any]:
        return with_geometry(proposal["value"])  # the positions travel with the data (placement_geometry)

    @traitlets.validate("speed")
    def _speed(self, proposal: dict[str, Any]) -> float:
        v = float(proposal["value"])
        if not 0.05 <= v <= 64:
            raise traitlets.TraitError(f"speed must be between 0.05 and 64, got {v}")
        return v

    @property
    def n_frames(self) -> int:
        return len(self.data.get("frames", []))

    @property
    def held(self) -> set[tuple[int, int]]:
        """``(rank, block)`` pairs drawn at the current frame."""
        return pdata.visible_at(self.data, self.index)

    def svg(self, index: int | None = None) -> str:
        """Frame ``index`` (default: the current one) as a static SVG."""
        return frame_svg(self.data, self.index if index is None else index)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The live widget plus a static SVG/HTML picture and a text line for exports."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):
            picture = self.svg(-1 if self.mode == "player" else self.index)
            data["image/svg+xml"] = picture
            data["text/html"] = f"<div class='mgpu-placement-static'>{picture}</div>"
            data["text/plain"] = (
                getattr(self, "text_summary", "") or f"<{self.title or 'placement'}: {self.n_frames} frame(s)>"
            )
        return bundle

    def save_html(self, path: str | os.PathLike[str]) -> str:
        """Write a standalone page that plays this view without a kernel; returns the path."""
        return save_html(self.data, path, title=self.title, badge=self.badge)


def standalone_html(data: dict[str, Any], title: str = "", badge: str = "") -> str:
    """One self-contained page that plays ``data`` without a kernel."""
    state = {
        "data": with_geometry(data),
        "index": 0,
        "playing": False,
        "interval_ms": 600,
        "speed": 1.0,
        "loop": False,
        "live": False,
        "follow": False,
        "mode": "player",
        "title": title,
        "badge": badge,
    }
    return standalone_page.page(ESM, state, title or "placement trace")


def save_html(data: dict[str, Any], path: str | os.PathLike[str], title: str = "", badge: str = "") -> str:
    """Write :func:`standalone_html` to ``path`` atomically (a failure leaves nothing behind)."""
    return standalone_page.write(standalone_html(data, title, badge), path)


def placement_view(tensor: Any, dims: Any = None) -> PlacementWidget:
    """The interactive placement view of a DistTensor (grid of blocks coloured by owning rank)."""
    tensor.check()
    try:
        data = pdata.view_data(
            tensor.shape,
            tensor.placement,
            tensor.world_size,
            tensor.itemsize,
            f"{tensor.shape} {tensor.dtype_name}",
            dims,
        )
    except ValueError as exc:
        raise MgpuError(str(exc)) from None
    w = PlacementWidget(data=data, mode="view")  # the caption names the tensor, its placement and ranks
    try:
        w.text_summary = repr(tensor) + "\n" + text_diagram(tensor.shape, tensor.placement, tensor.world_size, dims)
    except ValueError:
        w.text_summary = repr(tensor)
    return w


def layout_view(layout: Any, world_size: int, summary: str, dims: Any = None) -> PlacementWidget:
    """The interactive view of a DTensor layout on any mesh (``layout.dtensor_layout.DTensorLayout``)."""
    try:
        data = pdata.mesh_view_data(layout, world_size, dims)
    except ValueError as exc:
        raise MgpuError(str(exc)) from None
    w = PlacementWidget(data=data, mode="view")  # the caption names the tensor, its placement and ranks
    w.text_summary = summary + "\n" + layout.text()
    return w


def layout_html(layout: Any, summary: str) -> str:
    """The static picture of a DTensor layout above its text summary (notebook reprs, exports)."""
    try:
        data = pdata.mesh_view_data(layout, max(layout.mesh.ranks) + 1, None if len(layout.shape) < 3 else (0, 1))
    except ValueError as exc:
        return f"<pre>{html.escape(summary)}</pre><div>({html.escape(str(exc))})</div>"
    return f"<div class='mgpu-placement-static'>{frame_svg(data, 0)}<pre>{html.escape(summary)}</pre></div>"


def tensor_html(tensor: Any) -> str:
    """The rich repr of a DistTensor: the placement diagram and the text summary."""
    try:
        tensor.check()
    except MgpuError as exc:  # freed, or its session is gone: say so instead of drawing shards that are not there
        return f"<pre>{html.escape(repr(tensor))}</pre><div style='color:#a00'>{html.escape(str(exc))}</div>"
    try:
        data = pdata.view_data(
            tensor.shape,
            tensor.placement,
            tensor.world_size,
            tensor.itemsize,
            f"{tensor.shape} {tensor.dtype_name}",
            None if tensor.ndim < 3 else (0, 1),
        )
    except ValueError as exc:  # more than 64 ranks, too many small multiples: the text summary only
        return f"<pre>{html.escape(repr(tensor))}</pre><div>({html.escape(str(exc))})</div>"
    return f"<div class='mgpu-placement-static'>{frame_svg(data, 0)}<pre>{html.escape(repr(tensor))}</pre></div>"


def text_diagram(shape: Any, placement: Any, world_size: int, dims: Any = None, width: int = 48) -> str:
    """A character grid of the placement (rank numbers per tile; ``*`` where every rank holds it)."""
    from jupyter_mgpu.layout import tiles as lay

    panels = lay.placement_layout(shape, placement, world_size, dims)
    lines = []
    for p in panels:
        if p["fixed"]:
            lines.append(", ".join(f"dim {i}: {a}:{b}" for i, (a, b) in p["fixed"]))
        nr, nc = len(p["rows"]) - 1, len(p["cols"]) - 1
        cell = max(1, min(6, width // max(nc, 1) - 1))
        for i in range(nr):
            row = []
            for j in range(nc):
                owners = p["tiles"][i * nc + j]["owners"]
                s = "*" if len(owners) == world_size > 1 else ",".join(map(str, owners)) or "."
                row.append(s[:cell].center(cell))
            lines.append("|" + "|".join(row) + "|")
    return "\n".join(lines)


def side_by_side(*widgets: PlacementWidget) -> Any:
    """Several placement players in one row that wraps to the cell's width (each scales down to fit when
    it alone is wider); exports keep each one's last frame, laid out the same way."""
    import ipywidgets

    class PlayerRow(ipywidgets.Box):
        def _repr_mimebundle_(self, **kwargs: Any) -> Any:
            bundle = super()._repr_mimebundle_(**kwargs)
            data = bundle[0] if isinstance(bundle, tuple) else bundle
            if isinstance(data, dict):
                cells = "".join(
                    f"<div style='max-width:100%'>{f'<b>{html.escape(w.title)}</b><br>' if w.title else ''}"
                    f"{w.svg(-1)}</div>"
                    for w in self.children
                )
                data["text/html"] = (
                    f"<div class='mgpu-placement-static' style='display:flex;flex-wrap:wrap;"
                    f"gap:12px 24px;align-items:flex-start'>{cells}</div>"
                )
            return bundle

    for w in widgets:
        w.layout.max_width = "100%"
        w.layout.margin = "0 24px 16px 0"
    return PlayerRow(
        list(widgets), layout=ipywidgets.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
    )
