"""Colour by origin in the collective pictures (``widgets/collective_colors.py``): tracked tensors carry
the ranks a value came from; one rank is its colour, several are stripes, 0 is white, unknown is grey."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import torch

from jupyter_mgpu.widgets import collective_colors as cc
from jupyter_mgpu.widgets.colors import EMPTY, rank_color, text_color


def test_track_marks_the_ranks_non_zero_values_with_its_bit():
    x = torch.tensor([0.0, 1.5, -2.0, 0.0], dtype=torch.float32)
    t = cc.track(x, 3)
    assert t.dtype == torch.complex128
    assert t.real.tolist() == [0.0, 1.5, -2.0, 0.0]
    assert t.imag.tolist() == [0.0, 8.0, 8.0, 0.0]
    assert [cc.ranks_of(int(m)) for m in t.imag.tolist()] == [[], [3], [3], []]


def test_a_sum_of_tracked_inputs_knows_every_rank_it_came_from():
    inputs = [torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 0.0, 5.0]), torch.tensor([4.0, 0.0, 0.0])]
    total = sum(cc.track(x, r) for r, x in enumerate(inputs))
    assert total.real.tolist() == [5.0, 0.0, 7.0]
    assert [cc.ranks_of(int(m)) for m in total.imag.tolist()] == [[0, 2], [], [0, 1]]


@pytest.mark.parametrize("rank", [0, 51, 52, 63, 64, 100])
def test_one_rank_s_bit_is_exact_at_any_rank(rank):
    t = cc.track(torch.tensor([0.0, 1.0]), rank)
    assert t.imag.tolist() == [0.0, 2.0**rank]
    assert cc.ranks_of(int(t.imag[1].item())) == [rank]


def test_a_pass_of_ranks_tracks_its_ranks_from_bit_0_and_no_other_rank():
    low, high = range(cc.MAX_TRACKED_RANKS), range(cc.MAX_TRACKED_RANKS, 2 * cc.MAX_TRACKED_RANKS)
    assert cc.track(torch.ones(2), 60, low).imag.tolist() == [0.0, 0.0]
    assert cc.track(torch.ones(2), 60, high).imag.tolist() == [2.0 ** (60 - cc.MAX_TRACKED_RANKS)] * 2
    assert cc.track(torch.ones(2), 3, high).imag.tolist() == [0.0, 0.0]
    assert cc.ranks_of((1 << 63) | (1 << 52) | 1) == [0, 52, 63]


def test_ranks_as_short_text_join_runs():
    assert cc.ranks_text([3]) == "3"
    assert cc.ranks_text(list(range(32))) == "0–31"
    assert cc.ranks_text([0, 1, 2, 5, 7, 8, 12]) == "0–2,5,7,8,12"


def test_attach_gives_values_the_masks_of_a_tracked_holding_of_the_same_shape():
    tracked = cc.track(torch.tensor([1.0, 0.0, 3.0]), 1)
    out = cc.attach(torch.tensor([10.0, 20.0, 30.0]), tracked)
    assert out.real.tolist() == [10.0, 20.0, 30.0] and out.imag.tolist() == [2.0, 0.0, 2.0]
    assert cc.attach(None, tracked) is None
    slots = cc.attach([torch.ones(3), None], [tracked, None])
    assert slots[0].imag.tolist() == [2.0, 0.0, 2.0] and slots[1] is None


@pytest.mark.parametrize(
    "tracked",
    [torch.zeros(4, dtype=torch.complex128), [torch.zeros(3, dtype=torch.complex128)], None],
    ids=["other shape", "a list for a tensor", "none"],
)
def test_attach_to_a_differing_structure_keeps_no_origin(tracked):
    out = cc.attach(torch.tensor([1.0, 2.0, 3.0]), tracked)
    assert out.real.tolist() == [1.0, 2.0, 3.0] and out.imag.tolist() == [0.0, 0.0, 0.0]


def test_a_list_of_slots_of_another_length_keeps_no_origin():
    tracked = [cc.track(torch.ones(2), 0)]
    out = cc.attach([torch.ones(2), torch.ones(2)], tracked)
    assert [o.imag.tolist() for o in out] == [[0.0, 0.0], [0.0, 0.0]]


def test_fills_zero_white_one_rank_its_colour_several_stripes_unknown_grey():
    fill = cc.OriginFill("sum")
    assert fill(0.0, 0b11) == EMPTY  # 0 is white whatever it came from
    assert fill(2.0, 1 << 4) == rank_color(4)
    assert fill(2.0, 0b101) == "url(#mgpu-mix-5)"
    assert fill(2.0, 0) == cc.UNKNOWN
    assert fill.ranks == {0, 2, 4} and fill.mixed == {5} and fill.unknown


def test_the_stripes_pattern_of_a_mixed_mask():
    fill = cc.OriginFill("max")
    fill(1.0, 0b1010)
    fill(1.0, 0b0110)
    defs = fill.defs()
    root = ET.fromstring(f"<svg xmlns='http://www.w3.org/2000/svg'><defs>{defs}</defs></svg>")
    patterns = root.findall(".//{http://www.w3.org/2000/svg}pattern")
    assert [p.get("id") for p in patterns] == ["mgpu-mix-6", "mgpu-mix-10"]  # sorted by mask: stable ids
    for pattern, ranks in zip(patterns, ([1, 2], [1, 3])):
        rects = pattern.findall("{http://www.w3.org/2000/svg}rect")
        assert [r.get("fill") for r in rects] == [rank_color(r) for r in ranks]
        assert float(pattern.get("width")) == cc.STRIPE * len(ranks)
        assert [float(r.get("x")) for r in rects] == [i * cc.STRIPE for i in range(len(ranks))]
    assert cc.OriginFill().defs() == ""


@pytest.mark.parametrize(
    ("op", "word"),
    [("sum", "summed"), ("avg", "averaged"), ("product", "multiplied"), ("max", "tied maximum"), (None, "combined")],
)
def test_the_legend_names_each_rank_drawn_how_values_mix_and_zero(op, word):
    fill = cc.OriginFill(op)
    for r in (3, 1):
        fill(1.0, 1 << r)
    assert fill.legend() == [(rank_color(1), "from rank 1"), (rank_color(3), "from rank 3")]  # no 0 drawn: no white
    fill(1.0, 0b1010)
    fill(1.0, 0b0110)
    fill(1.0, 0)
    fill(0.0, 0b10)
    legend = fill.legend()
    assert legend[-3:] == [
        ("url(#mgpu-mix-6)", f"{word}: from the ranks of its stripes"),
        (cc.UNKNOWN, "origin not tracked"),
        (EMPTY, "value 0"),  # white, said in words: a bare "0" after a white box read as one more rank
    ]


def test_the_legend_lists_every_rank_past_twenty_marked():
    fill = cc.OriginFill()
    for r in range(64):
        fill(1.0, 1 << r)
    items = fill.legend()
    assert [label for _, label in items] == [f"from rank {r}" for r in range(64)]
    fills = [f for f, _ in items]
    assert len(set(fills)) == 64  # 20 colours, then the same colours hatched, dotted, cross-hatched
    assert fills[:20] == [rank_color(r) for r in range(20)] and fills[20] == "url(#mgpu-rank-20)"
    assert [fill.ink(f) for f in fills] == [text_color(rank_color(r)) for r in range(64)]
    root = ET.fromstring(f"<svg xmlns='http://www.w3.org/2000/svg'><defs>{fill.defs()}</defs></svg>")
    ids = [p.get("id") for p in root.iter("{http://www.w3.org/2000/svg}pattern")]
    assert ids == [f"mgpu-rank-{r}" for r in range(20, 64)]
    base = [
        p.find("{http://www.w3.org/2000/svg}rect").get("fill") for p in root.iter("{http://www.w3.org/2000/svg}pattern")
    ]
    assert base == [rank_color(r) for r in range(20, 64)]  # a marked rank keeps its colour
    assert fill.legend(per_rank=False) == []  # strips number the ranks themselves; no value 0 drawn


def test_many_ranks_mixed_share_one_hatch_and_say_so():
    fill = cc.OriginFill("sum")
    few, many = (1 << 3) - 1, (1 << (cc.MAX_STRIPES + 1)) - 1
    assert fill.of_mask(few) == f"url(#mgpu-mix-{few})" and fill.of_mask(many) == cc.MANY
    assert "mgpu-mix-many" in fill.defs() and fill.mixed == {few}
    labels = [label for _, label in fill.legend(per_rank=False)]
    assert labels[0] == "summed: from the ranks of its stripes"
    assert labels[1] == "summed: from several ranks (printed on it)"
    assert fill.of_mixed() == cc.MANY  # a strip of many ranks hatches every mix alike


def test_ink_reads_on_its_fill():
    for r in range(20):
        assert cc.OriginFill.ink(rank_color(r)) == text_color(rank_color(r))
    assert cc.OriginFill.ink(EMPTY) == "#000000"
    assert cc.OriginFill.ink("url(#mgpu-mix-3)") == "#000000"


def test_hover_text_of_a_value():
    assert cc.cell_title(2.5, 0b100) == "2.5 (from rank 2)"
    assert cc.cell_title(7.0, 0b1011) == "7 (from ranks 0, 1, 3)"
    assert cc.cell_title(1e20, 0) == "1e+20"
    assert cc.cell_title(float("nan"), 1) == "nan (from rank 0)"
    assert cc.cell_title(float("-inf"), 0) == "-inf"


def test_a_mask_s_ranks_are_said_run_by_run_as_the_ranks_are():
    masks = [1, 0b110, 0b111011010, (1 << 64) - 1, 1 << 63 | 1, 1 << 70 | 1 << 69 | 1 << 3]
    assert [cc.mask_text(m) for m in masks] == [cc.ranks_text(cc.ranks_of(m)) for m in masks]
    assert cc.mask_text(0b111011010) == "1,3,4,6–8" and cc.mask_text(0) == ""
