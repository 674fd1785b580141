"""One holding drawn as cells (``widgets/tensor_cells.py``): the grid of a tracked tensor, sampling, numbers, outlines."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
import torch

from jupyter_mgpu.widgets import tensor_cells as tc
from jupyter_mgpu.widgets.collective_colors import OriginFill, cell_title, track
from jupyter_mgpu.widgets.svg_canvas import Canvas, text_width

SVG = "{http://www.w3.org/2000/svg}"


def _parse(c: Canvas) -> ET.Element:
    return ET.fromstring("<svg xmlns='http://www.w3.org/2000/svg'>" + "".join(c.parts) + "</svg>")


def _box(el: ET.Element) -> tuple[float, ...]:
    return tuple(float(el.get(k)) for k in ("x", "y", "width", "height"))


@pytest.mark.parametrize(
    "shape, rows, cols",
    [((), 1, 1), ((5,), 1, 5), ((3, 4), 3, 4), ((2, 3, 4), 6, 4), ((2, 2, 2, 3), 8, 3), ((40, 40), 40, 40)],
)
def test_a_small_tensor_is_drawn_whole_as_rows_of_value_and_origin(shape, rows, cols):
    x = torch.arange(1, math.prod(shape) + 1, dtype=torch.float64).reshape(shape)
    cells, sampled = tc.grid(track(x, 2))
    assert not sampled and (len(cells), len(cells[0])) == (rows, cols) == tc.dims(track(x, 2))
    assert [v for row in cells for v, _ in row] == x.flatten().tolist()  # row-major, nothing lost
    assert {m for row in cells for _, m in row} == {1 << 2}


@pytest.mark.parametrize("shape", [(41,), (100, 7), (7, 1000), (500, 500), (3, 50, 90)])
def test_a_large_tensor_is_sampled_with_a_stride_to_at_most_max_cells_a_side(shape):
    x = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
    cells, sampled = tc.grid(track(x, 0))
    assert sampled
    assert 1 <= len(cells) <= tc.MAX_CELLS and 1 <= len(cells[0]) <= tc.MAX_CELLS
    flat = x.reshape(-1, shape[-1]) if len(shape) > 1 else x.reshape(1, -1)
    rs, cs = math.ceil(flat.shape[0] / tc.MAX_CELLS), math.ceil(flat.shape[1] / tc.MAX_CELLS)
    assert [[v for v, _ in row] for row in cells] == flat[::rs, ::cs].tolist()


def test_slots_of_a_holding():
    t = torch.zeros(2)
    assert tc.slots(t) == [t]
    assert tc.slots([t, None]) == [t, None]


@pytest.mark.parametrize("v", [0.0, 3.0, -42.0, 99999.0, 0.125, -0.0371, 1234.5, 1e7, 2.5e-9])
def test_a_value_is_printed_to_two_significant_digits_and_whole_numbers_whole(v):
    text = tc.fmt(v)
    assert float(text) == pytest.approx(v, rel=0.05)
    if v == int(v) and abs(v) < 1e5:
        assert text == str(int(v))
    assert len(text) <= 8


@pytest.mark.parametrize("v", [math.inf, -math.inf, math.nan])
def test_non_finite_values_are_printed_as_python_does(v):
    assert tc.fmt(v) == str(v)


def _cells(root: ET.Element) -> list[ET.Element]:
    return [el for el in root if el.tag == SVG + "rect" and el.get("fill") != "none"]


@pytest.mark.parametrize("shape", [(3,), (2, 4), (5, 5), (30, 12)])
@pytest.mark.parametrize("cell", [4.0, 14.0, 20.0])
def test_every_value_is_one_cell_inside_the_frame_coloured_by_its_origin(shape, cell):
    x = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
    t = track(x, 1)
    c, fill = Canvas(), OriginFill()
    tc.draw_tensor(c, t, 10, 20, cell, fill)
    root = _parse(c)
    rows, cols = tc.dims(t)
    cells = _cells(root)
    assert len(cells) == rows * cols
    for el in cells:
        x0, y0, w, h = _box(el)
        assert 10 - 0.05 <= x0 and x0 + w <= 10 + cols * cell + 0.1
        assert 20 - 0.05 <= y0 and y0 + h <= 20 + rows * cell + 0.1
    expected = [fill(v, m) for row in tc.grid(t)[0] for v, m in row]
    assert [el.get("fill") for el in cells] == expected  # zeros white, the rest rank 1's colour
    frame = root[-1]
    assert frame.get("fill") == "none" and _box(frame) == pytest.approx((10, 20, cols * cell, rows * cell), abs=0.1)
    numbers = [el for el in root if el.tag == SVG + "text"]
    if rows * cols <= 64 and cell >= 14:
        assert [el.text for el in numbers] == [tc.fmt(v) for v in x.flatten().tolist()]
    else:
        assert numbers == []


def test_an_outlined_range_marks_exactly_its_elements():
    t = track(torch.ones(3, 5, dtype=torch.float64), 0)
    c = Canvas()
    tc.draw_tensor(c, t, 0, 0, 10, OriginFill(), outline=(4, 8))
    marks = [el for el in _parse(c) if el.get("stroke") == "#000000"]
    corners = {(round(_box(el)[0]), round(_box(el)[1])) for el in marks}
    assert corners == {(j * 10, i * 10) for i, j in (divmod(k, 5) for k in range(4, 8))}


def test_an_outlined_range_of_a_sampled_tensor_outlines_the_whole_tensor():
    t = track(torch.ones(100, 3, dtype=torch.float64), 0)
    c = Canvas()
    tc.draw_tensor(c, t, 0, 0, 5, OriginFill(), outline=(0, 3))
    rows, cols = tc.dims(t)
    (mark,) = [el for el in _parse(c) if el.get("stroke") == "#000000"]
    assert _box(mark) == pytest.approx((0, 0, cols * 5, rows * 5), abs=0.1)


def test_hover_gives_each_cell_its_value_and_origin():
    x = torch.tensor([[0.0, 2.0], [3.5, 0.0]], dtype=torch.float64)
    t = track(x, 0) + track(torch.tensor([[0.0, 1.0], [0.0, 0.0]]), 3)
    c = Canvas()
    tc.draw_tensor(c, t, 0, 0, 8, OriginFill("sum"), hover=True)
    titles = [el.find(SVG + "title").text for el in _cells(_parse(c))]
    assert titles == [ET.fromstring(f"<t>{cell_title(v, m)}</t>").text for row in tc.grid(t)[0] for v, m in row]
    assert "from ranks 0, 3" in titles[1]


def test_holding_nothing_is_one_dashed_group_that_says_so_inside_its_box():
    what = "rank 2 receives nothing in this step of the scatter"
    c = Canvas()
    tc.draw_nothing(c, 50, 60, 90, 80, what)
    root = _parse(c)
    (group,) = list(root)
    assert group.tag == SVG + "g" and group.get("class") == "mgpu-nothing"
    box = group.find(SVG + "rect")
    assert box.get("stroke-dasharray") and _box(box) == (50, 60, 90, 80)
    lines = group.findall(SVG + "text")
    assert " ".join(el.text for el in lines) == what and len(lines) > 1
    for el in lines:
        half = text_width(el.text, 11) / 2
        assert 50 <= float(el.get("x")) - half and float(el.get("x")) + half <= 140
        assert 60 < float(el.get("y")) < 140
