"""A plain-text picture of a mesh placement: what torch's ``visualize_sharding`` prints, without
rich or tabulate.

A grid of the tensor's blocks (rows: ranges of dim 0, columns: ranges of dim 1, inclusive like
torch's ``Row 0-4`` / ``Col 0-2``); each cell lists the ranks that hold the block, so replicas are
one cell with several ranks, never extra cells. Partial blocks are marked ``P(op)``. A 1-D tensor
is one column of rows, as torch draws it; a tensor of more dims draws dims 0 and 1, one grid per
range of any further dim that is split. Ranks with empty pieces (torch.chunk's short tail) are
named below the grid instead of drawn. Box-drawing characters, or ASCII with ``ascii=True``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from jupyter_mgpu.layout import tiles
from jupyter_mgpu.layout.mesh import Mesh, mesh_shard_table, normalize_placements, placements_label

# top-left, top-mid, top-right, mid-left, cross, mid-right, bottom-left, bottom-mid, bottom-right, horizontal, vertical
BOX = "┌┬┐├┼┤└┴┘─│"
ASCII = "+++++++++-|"

Cell = tuple[int, ...]


def _span(r: tuple[int, int]) -> str:
    return f"{r[0]}-{r[1] - 1}"


def grid(
    row_labels: Sequence[str], col_labels: Sequence[str], cells: Sequence[Sequence[str]], ascii: bool = False
) -> list[str]:
    """Lines of a boxed table: a header of column labels (if any), then one boxed line per row."""
    tl, tm, tr, ml, mm, mr, bl, bm, br, h, v = tuple(ASCII if ascii else BOX)
    ncols = len(cells[0]) if cells else 0
    widths = [max([len(col_labels[j]) if col_labels else 0] + [len(row[j]) for row in cells]) + 2 for j in range(ncols)]
    lw = max((len(s) for s in row_labels), default=0)
    pad = " " * (lw + 1) if lw else ""

    def rule(left: str, mid: str, right: str) -> str:
        return pad + left + mid.join(h * w for w in widths) + right

    out = []
    if col_labels:
        out.append((pad + " " + " ".join(c.center(w) for c, w in zip(col_labels, widths))).rstrip())
    out.append(rule(tl, tm, tr))
    for i, row in enumerate(cells):
        label = (row_labels[i].ljust(lw) + " ") if lw else ""
        out.append(label + v + v.join(c.center(w) for c, w in zip(row, widths)) + v)
        out.append(rule(ml, mm, mr) if i < len(cells) - 1 else rule(bl, bm, br))
    return out


def _cell(owners: Iterable[int], partial: str) -> str:
    ranks = ",".join(str(r) for r in owners)
    if not ranks:
        return "-"
    return f"{ranks} {partial}" if partial else ranks


def _panel_cells(ndim: int, panel: dict[str, Any], partial: str) -> tuple[list[str], list[str], list[list[str]]]:
    """Row labels, column labels and cell texts of one panel of :func:`tiles.layout`."""
    rows = list(zip(panel["rows"], panel["rows"][1:]))
    cols = list(zip(panel["cols"], panel["cols"][1:]))
    owners = [t["owners"] for t in panel["tiles"]]  # row-major over rows × cols
    if ndim == 0:
        return [], [], [[_cell(owners[0], partial)]]
    if ndim == 1:  # torch draws a 1-D tensor as a column: its ranges become rows
        return [f"Row {_span(c)}" for c in cols], [], [[_cell(o, partial)] for o in owners]
    cells = [[_cell(owners[i * len(cols) + j], partial) for j in range(len(cols))] for i in range(len(rows))]
    return [f"Row {_span(r)}" for r in rows], [f"Col {_span(c)}" for c in cols], cells


def render(shape: Iterable[int], mesh: Mesh, placements: Sequence[Any], ascii: bool = False) -> str:
    """The text picture of a tensor of ``shape`` placed on ``mesh`` by ``placements`` (see the module docstring)."""
    shp = tuple(shape)
    pls = normalize_placements(shp, mesh, placements)
    table = mesh_shard_table(shp, mesh, pls)
    names = f" {list(mesh.dim_names)}" if mesh.dim_names else ""
    ops = sorted({op for s in table for op in s.partial_ops})
    return render_pieces(
        shp,
        [(s.rank, s.ranges) for s in table],
        f"tensor {shp} on mesh {tuple(mesh.shape)}{names}: {placements_label(pls)}",
        " ".join(f"P({op})" for op in ops),
        ascii,
    )


def render_pieces(
    shape: Sequence[int],
    pieces: Sequence[tuple[int, Sequence[tuple[int, int]]]],
    title: str,
    partial: str = "",
    ascii: bool = False,
) -> str:
    """The text picture of any split: ``pieces`` = ``(rank, global box)``; ``partial`` marks every block."""
    shp = tuple(shape)
    lines = [title]
    if any(s == 0 for s in shp):
        lines.append("the tensor is empty: no blocks to draw")
        return "\n".join(lines) + "\n"
    boxes = [(r, tuple((int(x[0]), int(x[1])) for x in box)) for r, box in pieces]
    empty = [r for r, box in boxes if any(b <= a for a, b in box)]
    panels = tiles.layout(shp, boxes)
    if len(shp) > 2:
        split = [d for d in range(2, len(shp)) if any(box[d] != (0, shp[d]) for r, box in boxes if r not in empty)]
        lines.append(
            f"a {len(shp)}-D tensor: dims 0 and 1 drawn"
            + (f", one grid per range of dim {', '.join(map(str, split))}" if split else "; the other dims are whole")
        )
    for panel in panels:
        if panel["fixed"] and len(panels) > 1:
            lines.append(", ".join(f"dim {d} = {_span(r)}" for d, r in panel["fixed"]))
        row_labels, col_labels, cells = _panel_cells(len(shp), panel, partial)
        lines.extend(grid(row_labels, col_labels, cells, ascii))
    if empty:
        lines.append(f"empty pieces (torch.chunk's short tail): rank {', '.join(map(str, empty))}")
    if partial:
        lines.append(f"{partial}: each listed rank holds a full-size operand; the value is their reduction")
    return "\n".join(lines) + "\n"
