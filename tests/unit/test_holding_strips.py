"""Many ranks' holdings as strips (``widgets/holding_strips.py``), where the strips go
(``widgets/grid_geometry.py``), the drawer that redraws only what changed (``widgets/slot_drawing.py``) and
the entries each frame changes (``widgets/frame_changes.py``)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch

from jupyter_mgpu.widgets import collective_colors as cc
from jupyter_mgpu.widgets import frame_changes as fc
from jupyter_mgpu.widgets import grid_geometry as gg
from jupyter_mgpu.widgets import holding_strips as hs
from jupyter_mgpu.widgets.colors import EMPTY, rank_color
from jupyter_mgpu.widgets.slot_drawing import SlotDrawer
from jupyter_mgpu.widgets.svg_canvas import MIN_FONT, text_width

SVG = "{http://www.w3.org/2000/svg}"


def _parse(parts: list[str]) -> list[ET.Element]:
    g = f"<g xmlns='http://www.w3.org/2000/svg' font-size='{MIN_FONT}' text-anchor='middle'>{''.join(parts)}</g>"
    return list(ET.fromstring(g))


def test_a_strip_counts_each_origin_s_values_its_zeros_and_their_range():
    a = cc.track(torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0]), 2)
    b = cc.track(torch.tensor([0.0, 2.0, 2.0, 0.0, 0.0]), 5)
    s = hs.strip_of(a + b)
    assert s.alone == ((2, 1), (5, 1)) and s.zeros == 2 and s.unknown == 0
    assert (s.mixed, s.mixed_ranks, s.mixed_alike) == (1, 1 << 2 | 1 << 5, True)
    assert (s.lo, s.hi, s.shape, s.values) == (0.0, 3.0, (5,), 5)
    assert hs.describe(s, "sum") == "5: 1 from rank 2, 1 from rank 5, 1 summed from ranks 2,5, 2 zeros; values 0 … 3"


def test_a_second_pass_adds_the_ranks_past_fifty_two():
    low = cc.track(torch.ones(3), 1, range(52)) + cc.track(torch.ones(3), 60, range(52))
    high = cc.track(torch.ones(3), 1, range(52, 64)) + cc.track(torch.ones(3), 60, range(52, 64))
    s = hs.strip_of(low, high)
    assert s.alone == () and (s.mixed, s.mixed_ranks) == (3, 1 << 1 | 1 << 60) and cc.ranks_of(s.mixed_ranks) == [1, 60]


def test_a_strip_is_split_in_proportion_to_its_origins_each_with_its_rank_printed():
    x = torch.zeros(40)
    x[:30], x[30:] = 1.0, 2.0
    s = hs.strip_of(cc.track(x * (torch.arange(40) < 30), 3) + cc.track(x * (torch.arange(40) >= 30), 25))
    parts: list[str] = []
    fill = cc.OriginFill()
    hs.draw_strip(parts, s, 10, 20, 100, 14, fill)
    els = _parse(parts)
    rects = [el for el in els if el.tag == SVG + "rect" and el.get("fill") != "none"]
    assert [r.get("fill") for r in rects] == [rank_color(3), "url(#mgpu-rank-25)"]
    assert [float(r.get("width")) for r in rects] == pytest.approx([75, 25], abs=0.1)
    assert [el.text for el in els if el.tag == SVG + "text"] == ["3", "25"]
    assert fill.ranks == {3, 25}


def test_a_strip_prints_ranks_only_where_they_fit_and_joins_its_smallest_parts():
    x = torch.ones(64)
    t = sum(cc.track(x * (torch.arange(64) // 8 == k), k) for k in range(8))  # 8 ranks, 8 values each
    parts: list[str] = []
    fill = cc.OriginFill()
    hs.draw_strip(parts, hs.strip_of(t), 0, 0, 60, 14, fill)
    els = _parse(parts)
    fills = [el.get("fill") for el in els if el.tag == SVG + "rect" and el.get("fill") != "none"]
    assert len(fills) == hs.MAX_PARTS and fills[-1] == cc.OTHERS and fill.others
    for el in els:
        if el.tag == SVG + "text":
            assert text_width(el.text, MIN_FONT) + 3 <= 15.1  # each part is 15 px: one digit, or "…"


def test_every_value_zero_is_a_white_strip_that_says_0():
    parts: list[str] = []
    hs.draw_strip(parts, hs.strip_of(cc.track(torch.zeros(4, 4), 1)), 0, 0, 30, 14, cc.OriginFill())
    els = _parse(parts)
    assert [el.get("fill") for el in els if el.tag == SVG + "rect"] == [EMPTY]
    assert [el.text for el in els if el.tag == SVG + "text"] == ["0"]


def test_values_combined_from_many_ranks_share_one_hatch_with_their_ranks_printed():
    t = sum(cc.track(torch.ones(4), r) for r in range(32))
    parts: list[str] = []
    fill = cc.OriginFill("sum")
    hs.draw_strip(parts, hs.strip_of(t), 0, 0, 200, 14, fill)
    els = _parse(parts)
    assert [el.get("fill") for el in els if el.tag == SVG + "rect"][0] == cc.MANY and fill.many
    assert [el.text for el in els if el.tag == SVG + "text"] == ["0–31"]
    hs.draw_strip(parts := [], hs.strip_of(t), 0, 0, 20, 14, fill)
    assert [el.text for el in _parse(parts) if el.tag == SVG + "text"] == ["32"]  # "0–31" does not fit


@pytest.mark.parametrize(
    "label, width, printed",
    [
        ("chunk 7 → rank 7", 200, "chunk 7 → rank 7"),
        ("chunk 7 → rank 7", 64, "7 → rank 7"),
        ("chunk 7 → rank 7", 40, "rank 7"),
        ("chunk 7 → rank 7", 1, "7"),
        ("from rank 12", 45, "rank 12"),
    ],
)
def test_an_entry_label_drops_its_first_words_to_fit(label, width, printed):
    assert gg.fit_label(label, width) == printed


def _entries(n: int, e: int) -> list[list[list]]:
    one = cc.track(torch.ones(11, 11), 0)
    return [[[one, [one] * e] for _ in range(n)]]


@pytest.mark.parametrize("e", [8, 16, 32, 64, 128])
def test_many_entries_fold_onto_lines_of_legible_entries_within_the_width(e):
    g = gg.plan(_entries(32, e), [[None, None]], [["", ""]])
    assert g.compact and g.body_w <= gg.WIDTH
    assert g.widths[1] >= gg.MIN_ENTRY and g.per_line[1] * g.widths[1] <= g.col_w[1] + 0.1
    lines = -(-e // g.per_line[1])
    assert g.per_line[1] * lines - e < lines  # lines evenly filled
    x, y = g.slot_xy(0, 1, e - 1)
    assert x + g.widths[1] <= g.col_x(1) + g.col_w[1] + 0.1 and y == g.row_y(0) + (lines - 1) * gg.LINE
    assert g.row_y(1) - g.row_y(0) >= lines * gg.LINE  # rows never overlap


def test_a_few_ranks_of_small_tensors_are_cells_and_many_ranks_strips():
    assert not gg.plan(_entries(8, 2), [[None, None]], [["", ""]]).compact
    assert gg.plan(_entries(9, 2), [[None, None]], [["", ""]]).compact


def test_the_drawer_redraws_an_entry_only_when_it_changed():
    frames = _entries(16, 4)
    g = gg.plan(frames, [[None, None]], [["", ""]])
    draw = SlotDrawer(g, cc.OriginFill(), None, hover=False)
    cells = frames[0]
    first = draw.slot(3, 1, 2, cells[3][1], None, None, "")
    assert draw.slot(3, 1, 2, [x.clone() for x in cells[3][1]], None, None, "") is first  # same values: reused
    changed = [x.clone() for x in cells[3][1]]
    changed[2] = cc.track(torch.ones(11, 11), 5)
    again = draw.slot(3, 1, 2, changed, None, None, "")
    assert again != first and again[0] == "u"  # one rank's data alone: drawn once, used here
    assert ">5</text>" in draw.shared[again[1]] and rank_color(5) in draw.shared[again[1]]
    assert draw.slot(3, 1, 9, cells[3][1], None, None, "") == ""  # no entry 9


def test_the_figure_draws_a_rank_s_list_once_and_its_hover_says_every_entry():
    frames = _entries(16, 4)
    g = gg.plan(frames, [[None, None]], [["", ""]])
    draw = SlotDrawer(g, cc.OriginFill(), None, hover=True)
    changed = list(frames[0][3][1])
    changed[2] = cc.track(torch.ones(11, 11), 5)
    row = draw.slot(3, 1, 0, changed, None, None, "")
    assert all(draw.slot(3, 1, j, changed, None, None, "") == "" for j in (1, 2, 3))  # the row is entry 0's
    (title,) = re.findall(r"<title>([^<]*)</title>", row)
    assert title.split("\n") == [
        "rank 3, each entry 11×11:",
        "[0]–[1] 121 from rank 0; values 1 … 1",
        "[2] 121 from rank 5; values 1 … 1",
        "[3] 121 from rank 0; values 1 … 1",
    ]
    (used,) = re.findall(r"<use href='#([^']+)'", row)
    assert draw.slot(4, 1, 0, changed, None, None, "").count(f"#{used}'") == 1  # a row alike: the same drawing
    assert draw.shared[used].count("<use ") == 4  # its four entries


def test_many_strips_summarised_at_once_are_those_summarised_one_by_one():
    x = torch.arange(12.0).reshape(3, 4)
    tensors = [cc.track(x, r) for r in (0, 7, 63)] + [cc.track(x, 70), cc.track(torch.zeros(0), 1)]
    tensors += [cc.track(x, 1) + cc.track(x, 2), cc.track(x, 3) + cc.track(x * 0 + 1, 40)]
    batch = hs.strips_of([(t, None) for t in tensors])
    assert batch == [hs.strip_of(t) for t in tensors]
    assert [s.alone for s in batch[:4]] == [((0, 11),), ((7, 11),), ((63, 11),), ((70, 11),)]  # 0 is a zero
    assert batch[4].values == 0 and batch[5].mixed == 11 and batch[6].mixed_ranks == 1 << 3 | 1 << 40


def test_a_frame_changes_only_the_entries_that_are_not_the_very_same_tensors():
    a, b, c = (cc.track(torch.ones(2), r) for r in range(3))
    frames = [[[[a, None]]], [[[a, b]]], [[[a, b]]], [[[c, b]]]]  # frames[f][rank][column]: one rank, one list
    moved = fc.changed(frames, None, [[None]] * 4, [[""]] * 4)
    assert moved == [[(0, 0, None)], [(0, 0, [1])], [], [(0, 0, [0])]]  # a new list of the same tensors: nothing
    assert fc.changed(frames, None, [[None], [["x", "y"]], [["x", "y"]], [["x", "y"]]], [[""]] * 4)[1] == [(0, 0, None)]
    assert [id(t) for t, _ in fc.tensors_of(frames, None, moved)] == [id(a), id(b), id(c)]


def test_a_code_drawn_once_goes_in_its_place_and_the_others_by_number():
    once, twice = (0, 40, 0), (1, 40, 0)
    parts: list = ["<svg>", 0]
    patches: list = [{}, {6: 1}, {7: 1}]
    assert fc.codes_once([once, twice], parts, patches) == [twice]
    assert parts == ["<svg>", once] and patches == [{}, {6: 0}, {7: 0}]
