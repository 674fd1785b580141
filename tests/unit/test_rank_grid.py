"""The rank × column figure of the collective pictures (``widgets/rank_grid.py``): one row per rank, within its width."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch

from jupyter_mgpu.widgets import rank_grid as rg
from jupyter_mgpu.widgets.collective_colors import track
from jupyter_mgpu.widgets.colors import rank_color
from jupyter_mgpu.widgets.svg_canvas import text_width
from jupyter_mgpu.widgets.tensor_cells import dims

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(autouse=True)
def one_host(monkeypatch):
    """The ranks of one host (whatever session another test left current): no host labels."""
    monkeypatch.setattr(rg, "rank_names", lambda n: None)


def _row(r: int, cols: int, entries: int) -> list:
    x = torch.arange(1, cols + 1, dtype=torch.float64) * (r + 1)
    return [track(x, r), [track(x, r)] * entries]


def _figure(n: int = 4, cols: int = 6, entries: int = 2, **kw) -> tuple[ET.Element, str]:
    cells = kw.pop("cells", None) or [_row(r, cols, entries) for r in range(n)]
    labels = kw.pop("labels", [None, [f"from {j}" for j in range(entries)]])
    title, op = kw.pop("title", "all_gather"), kw.pop("op", None)
    subtitle = "every rank gets every rank's piece"
    svg = rg.render_grid(title, subtitle, ["before", "after"], cells, labels, ["nothing", "nothing yet"], op, **kw)
    return ET.fromstring(svg), svg


def _size(root: ET.Element) -> tuple[float, float]:
    return float(root.get("width")), float(root.get("height"))


def _texts(root: ET.Element) -> list[ET.Element]:
    return list(root.iter(SVG + "text"))


def test_the_figure_is_well_formed_svg_whose_size_is_its_view_box():
    root, _ = _figure()
    assert root.tag == SVG + "svg" and "mgpu-collective-svg" in root.get("class")
    w, h = _size(root)
    assert root.get("viewBox") == f"0 0 {w:.0f} {h:.0f}" and w > 0 and h > 0


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_one_labelled_row_per_rank_top_to_bottom_in_its_colour(n):
    root, _ = _figure(n)
    labels = [el for el in _texts(root) if re.fullmatch(r"rank \d+", el.text or "")]
    assert [el.text for el in labels] == [f"rank {r}" for r in range(n)]
    ys = [float(el.get("y")) for el in labels]
    assert ys == sorted(ys) and len(set(ys)) == n
    swatches = {el.get("fill") for el in root.iter(SVG + "rect") if el.get("width") == "12.0"}
    assert {rank_color(r) for r in range(n)} <= swatches


def test_the_figure_grows_a_row_per_rank():
    heights = [_size(_figure(n)[0])[1] for n in (1, 2, 4, 8)]
    assert heights == sorted(heights) and len(set(heights)) == 4


def test_a_rank_holding_nothing_is_one_nothing_group():
    n = 5
    cells = [[track(torch.ones(3), r), None if r % 2 else [track(torch.ones(3), r), None]] for r in range(n)]
    root, _ = _figure(n, cells=cells)
    groups = [g for g in root.iter(SVG + "g") if g.get("class") == "mgpu-nothing"]
    holds_nothing = [r for r in range(n) if r % 2] + [r for r in range(n) if not r % 2]  # None, then an empty slot
    assert len(groups) == len(holds_nothing)
    said = [" ".join(t.text for t in g.iter(SVG + "text")) for g in groups]
    assert said.count("nothing yet") == 2 and said.count("not yet") == 3


def _drawn_right_edges(root: ET.Element, size: str = "12", anchor: str = "start") -> list[float]:
    """The right edge of every rect, text and path; a text takes its font from its groups (strips)."""
    out = []
    for el in root:
        if el.tag == SVG + "rect" and el.get("x") is not None:
            out.append(float(el.get("x")) + float(el.get("width")))
        if el.tag == SVG + "text":
            tw = text_width(el.text or "", float(el.get("font-size", size)))
            out.append(float(el.get("x")) + {"start": tw, "middle": tw / 2, "end": 0}[el.get("text-anchor", anchor)])
        if el.tag == SVG + "path":
            out.extend(float(v) for v in re.findall(r"(-?[\d.]+) -?[\d.]+", el.get("d") or ""))
        if el.tag in (SVG + "g", SVG + "svg"):
            out += _drawn_right_edges(el, el.get("font-size", size), el.get("text-anchor", anchor))
    return out


@pytest.mark.parametrize("cols, entries", [(1, 1), (6, 2), (40, 1), (40, 4), (200, 3)])
@pytest.mark.parametrize("transfers", [0, 2, 8])
def test_nothing_is_drawn_past_the_figures_width(cols, entries, transfers):
    moves = [(i % 4, (i + 1) % 4, f"piece {i}") for i in range(transfers)]
    root, _ = _figure(4, cols, entries, transfers=moves, op="sum")
    width, height = _size(root)
    edges = _drawn_right_edges(root)
    assert max(edges) <= width + 0.5
    assert all(float(el.get("y")) <= height for el in root.iter(SVG + "rect") if el.get("y") is not None)


@pytest.mark.parametrize("cols, entries", [(1, 1), (6, 2), (40, 1), (40, 4), (200, 3), (11, 8), (3, 16)])
@pytest.mark.parametrize("transfers", [0, 1, 2, 8])
def test_the_figure_is_at_most_width_px_wide_however_many_values_it_holds(cols, entries, transfers):
    moves = [(0, 1, "piece")] * transfers  # 8 arrows widen the gutter left of the columns
    root, _ = _figure(4, cols, entries, transfers=moves)
    assert _size(root)[0] <= rg.WIDTH
    assert max(_drawn_right_edges(root)) <= rg.WIDTH + 0.5


@pytest.mark.parametrize("entries", [2, 4, 8])
@pytest.mark.parametrize("n", [2, 8])
def test_long_entry_labels_and_entries_not_filled_yet_stay_within_the_width(n, entries):
    cells = [[track(torch.ones(11, 11), r), [track(torch.ones(11, 11), r)] + [None] * (entries - 1)] for r in range(n)]
    labels = [None, [f"chunk {j} → rank {j} of the ring" for j in range(entries)]]
    root, _ = _figure(n, cells=cells, labels=labels, transfers=[(r, (r + 1) % n, "x") for r in range(n)])
    assert _size(root)[0] <= rg.WIDTH
    assert max(_drawn_right_edges(root)) <= rg.WIDTH + 0.5


def test_a_long_title_wraps_within_the_width_and_keeps_every_word():
    title = "reduce_scatter of a tensor with a very long name " * 3
    root, _ = _figure(title=title)
    lines = [el.text for el in _texts(root) if el.get("font-size") == "16"]
    assert len(lines) > 1 and " ".join(lines) == title.strip()
    assert _size(root)[0] <= rg.WIDTH and max(_drawn_right_edges(root)) <= rg.WIDTH + 0.5


def test_the_cell_shrinks_as_values_grow_but_stays_in_its_bounds():
    sizes = []
    for ncols in (1, 2, 4, 12, 20, 30, 40):  # up to MAX_CELLS: past it a stride samples
        cells = [[track(torch.ones(ncols), 0)], [track(torch.ones(ncols), 1)]]
        cell, widths, bh, box_h = rg.layout(cells, [None], ["nothing"], None)
        assert 3.0 <= cell <= 22.0
        assert widths == [pytest.approx(dims(cells[0][0])[1] * cell)] and bh == cell and box_h >= bh
        sizes.append(cell)
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0]


def test_a_fixed_cell_is_kept():
    cells = [[track(torch.ones(100), 0)]]
    assert rg.layout(cells, [None], ["nothing"], 7.5)[0] == 7.5


def test_each_transfer_is_one_arrow_in_its_senders_colour_with_one_marker_per_sender():
    moves = [(0, 1, "x"), (0, 2, "y"), (3, 0, "z <&>")]
    root, svg = _figure(4, transfers=moves)
    arrows = list(root.iter(SVG + "path"))
    arrows = [p for p in arrows if p.get("marker-end")]
    assert len(arrows) == 3
    assert [p.get("stroke") for p in arrows] == [rank_color(a) for a, _, _ in moves]
    assert [p.find(SVG + "title").text for p in arrows] == [f"rank {a} → rank {b}: {w}" for a, b, w in moves]
    markers = {m.get("id") for m in root.iter(SVG + "marker")}
    assert markers == {"mgpu-arrow-0", "mgpu-arrow-3"}
    assert all(p.get("marker-end") == f"url(#mgpu-arrow-{a})" for p, (a, _, _) in zip(arrows, moves))


def test_a_highlighted_slot_of_the_last_column_is_outlined():
    n, entries = 3, 3
    root, _ = _figure(n, 4, entries, highlight={1: 2})
    outlines = [el for el in root.iter(SVG + "rect") if el.get("stroke-width") == "2.2"]
    assert len(outlines) == 1
    slot_names = [el for el in _texts(root) if el.text == "from 2"]
    assert len(slot_names) == n  # each rank's third slot is labelled; rank 1's is the one outlined
    ys = sorted(float(el.get("y")) for el in slot_names)
    x, y = float(outlines[0].get("x")), float(outlines[0].get("y"))
    assert y == pytest.approx(ys[1], abs=0.2)  # 3 px around the slot, whose name sits 3 px above it
    assert x + 3 == pytest.approx(float(slot_names[0].get("x")), abs=0.2)


def test_the_key_names_every_rank_whose_data_is_drawn_and_mixed_values():
    x = [track(torch.tensor([1.0, 0.0]), r) for r in range(3)]
    cells = [[x[r], [x[r] + x[(r + 1) % 3]]] for r in range(3)]
    root, _ = _figure(3, cells=cells, op="sum", labels=[None, ["sum"]])
    said = {el.text for el in _texts(root)}
    assert {"from rank 0", "from rank 1", "from rank 2", "0", "value 0"} <= said  # a 0 is drawn: white, said
    assert any(s.startswith("summed") for s in said)
    assert len({p.get("id") for p in root.iter(SVG + "pattern")}) == 3  # ranks {0,1}, {1,2}, {0,2} mixed


def test_across_hosts_each_rank_says_where_it_runs_within_the_label_column(monkeypatch):
    names = [f"very-long-host-name-{r // 2}.example.org:cuda:{r % 2}" for r in range(4)]
    monkeypatch.setattr(rg, "rank_names", lambda n: names if n == 4 else None)
    root, _ = _figure(4)
    small = [el.text for el in _texts(root) if el.get("font-size") == "10" and float(el.get("x")) == 30]
    assert any("very-long-host-name-1" in s for s in small)
    assert max(_drawn_right_edges(root)) <= _size(root)[0] + 0.5
