"""The placement view and the trace player at 32 and 64 ranks, without a cluster (issue 37): no error, every
rank told apart (its colour with its number printed), nothing wider than a notebook cell, no text under
10 px, every rank's number inside its strip with room to spare (issue 47), and what the widget sends
growing linearly with the ranks."""

from __future__ import annotations

import json
import re

import pytest

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.layout.mesh import Mesh
from jupyter_mgpu.layout.redistribute_plan import plan_events
from jupyter_mgpu.tracing import replay as tr
from jupyter_mgpu.widgets import placement_geometry as geom
from jupyter_mgpu.widgets.placement import PlacementWidget
from jupyter_mgpu.widgets.placement_data import trace_data, view_data
from jupyter_mgpu.widgets.placement_svg import frame_svg

SHAPE = (4096, 4096)
PLACEMENTS = {"row": pl.Shard(0), "col": pl.Shard(1), "block2d": pl.Block2D(), "replicate": pl.Replicate()}


def sent(data):
    """The bytes of the widget's ``data`` as the browser gets it (with its positions)."""
    return len(json.dumps(PlacementWidget(data=data).data))


def check_picture(data):
    """The widget's positions and the static SVG: within the cell's width, every font ≥ 10 px."""
    g = PlacementWidget(data=data).data["geo"]
    bw, bh = g["box"]
    assert g["width"] <= geom.MAX_WIDTH
    assert all(x + w <= g["width"] for x, _, w, _ in g["panels"])
    assert all(x + bw <= g["width"] and y + bh <= g["height"] for x, y in g["ranks"])
    svg = frame_svg(data, -1)
    width = float(re.search(r'<svg[^>]* width="([\d.]+)"', svg).group(1))
    assert width <= geom.MAX_WIDTH
    sizes = [float(s) for s in re.findall(r'font-size="([\d.]+)"', svg)]
    assert sizes and min(sizes) >= geom.MIN_FONT
    return g, svg


def legend(svg):
    """``{rank: (colour, number printed)}`` from the rank boxes of an SVG."""
    out = {}
    for m in re.finditer(r'<g class="mgpu-rank" data-rank="(\d+)".*?</g>', svg):
        colour = re.search(r'stroke="(#[0-9a-f]{6})"', m.group(0)).group(1)
        number = re.search(r'font-weight="bold"[^>]*>([^<]+)</text>', m.group(0)).group(1)
        out[int(m.group(1))] = (colour, number)
    return out


@pytest.mark.parametrize("p", [32, 64])
@pytest.mark.parametrize("kind", list(PLACEMENTS))
def test_the_view_draws_32_and_64_ranks_each_told_apart_within_the_cell(kind, p):
    data = view_data(SHAPE, PLACEMENTS[kind], p, 4, "A (4096, 4096) float32")
    _, svg = check_picture(data)
    ranks = legend(svg)
    assert sorted(ranks) == list(range(p))
    assert len(set(ranks.values())) == p  # colour and number: no two ranks alike
    assert [ranks[r][1] for r in range(p)] == [str(r) for r in range(p)]
    labels = re.findall(r'class="mgpu-tile-label"[^>]*>([^<]+)</text>', svg)
    if kind == "replicate":
        assert labels == ["all"]
    else:  # each rank's number is printed on its own tile too
        assert sorted(int(x) for x in labels) == list(range(p))


def _box(tag):
    """``(x0, y0, x1, y1)`` of a ``<rect>`` or a tile label's ``<text>``; a label's is estimated as in the
    brief of issue 47: ``len(text) * size * 0.6`` long, ``size`` high, centred where it is drawn (its
    baseline is ``0.36 * size`` below its centre), turned up when it is rotated."""
    num = {k: float(v) for k, v in re.findall(r'\b(x|y|width|height|font-size)="([\d.]+)"', tag)}
    if tag.startswith("<rect"):
        return num["x"], num["y"], num["x"] + num["width"], num["y"] + num["height"]
    size, text = num["font-size"], re.search(r">([^<]+)</text>", tag).group(1)
    cx, cy = num["x"], num["y"] - 0.36 * size
    half_w, half_h = len(text) * size * 0.6 / 2, size / 2
    if "rotate(-90" in tag:
        half_w, half_h = half_h, half_w
    return cx - half_w, cy - half_h, cx + half_w, cy + half_h


def label_margins(svg):
    """``{rank: px}``: how far each rank's label on the tiles stays inside its strip (the bounding box of
    the tiles it alone holds), on the closest side."""
    strips = {}
    for m in re.finditer(r'<g class="mgpu-tile" data-owners="(\d+)">.*?</g>', svg):
        box = _box(re.search(r'<rect [^>]*fill="none"[^>]*/>', m.group(0)).group(0))
        old = strips.get(int(m.group(1)), box)
        strips[int(m.group(1))] = (min(old[0], box[0]), min(old[1], box[1]), max(old[2], box[2]), max(old[3], box[3]))
    out = {}
    for tag in re.findall(r'<text class="mgpu-tile-label".*?</text>', svg):
        rank = int(re.search(r">(\d+)</text>", tag).group(1))
        (x0, y0, x1, y1), (sx0, sy0, sx1, sy1) = _box(tag), strips[rank]
        out[rank] = round(min(x0 - sx0, y0 - sy0, sx1 - x1, sy1 - y1), 2)
    return out


@pytest.mark.parametrize("p", [2, 4, 8, 32, 64])
@pytest.mark.parametrize("kind", ["row", "col"])
@pytest.mark.parametrize("shape", [(64, 64), SHAPE, (64, 4096), (4096, 64)])
def test_each_ranks_number_sits_inside_its_strip_with_room_to_spare(shape, kind, p):
    """Issue 47: at 32 strips the numbers ran over the strips' edges. Every strip is labelled, and each
    label's box keeps at least 1 px from every edge of its strip, along rows and along columns."""
    _, svg = check_picture(view_data(shape, PLACEMENTS[kind], p, 4, f"A {shape} float32"))
    margins = label_margins(svg)
    assert sorted(margins) == list(range(p))  # every strip says whose it is
    assert min(margins.values()) >= 1, {r: m for r, m in margins.items() if m < 1}


def test_a_label_needs_its_height_and_a_margin_on_each_side():
    """The same answers as ``labelFit`` in static/placement.js (labextension/test/widget_placement.test.ts)."""
    assert geom.MIN_TILE == geom.MIN_FONT + 2 * geom.LABEL_PAD == 13
    assert [geom.label_fit("12", *wh) for wh in [(40, 13), (13, 40), (40, 12), (12, 40), (9, 9)]] == [
        "h",
        "v",
        "",
        "",
        "",
    ]


def test_a_strip_too_thin_for_its_number_is_left_unlabelled_not_overrun():
    """Strips thinner than a label with its margins (uneven shards past the panel's tallest) go unlabelled;
    the ones drawn still keep their room."""
    _, svg = check_picture(view_data((100, 64), pl.Shard(0), 64, 4, "A"))
    margins = label_margins(svg)
    assert 0 < len(margins) < 64 and min(margins.values()) >= 1


@pytest.mark.parametrize("kind", list(PLACEMENTS))
def test_what_the_view_sends_grows_linearly_with_the_ranks(kind):
    size = {p: sent(view_data(SHAPE, PLACEMENTS[kind], p, 4, "A")) for p in (16, 32, 64)}
    assert size[64] <= 2.2 * size[32] and size[32] <= 2.2 * size[16], size
    assert size[64] <= 250 * 64 + 2000, size  # about 200 bytes a rank


def test_ranks_on_several_hosts_are_drawn_in_one_group_of_rows_per_host():
    data = view_data(SHAPE, pl.Shard(0), 32, 4, "A")
    data["rank_names"] = [f"node{r // 8}:cuda:{r % 8}" for r in range(32)]
    g, svg = check_picture(data)
    assert [h[2] for h in g["groups"]] == ["node0", "node1", "node2", "node3"]
    rows = sorted({y for _, y in g["ranks"]})
    assert len(rows) == 4 and all(g["ranks"][r][1] == rows[r // 8] for r in range(32))  # a host, a row
    assert all(g["groups"][i][1] < rows[i] for i in range(4))  # each host's name above its ranks
    assert 'class="mgpu-rank-group"' in svg and ">node3</text>" in svg


def test_a_tensor_with_more_ranks_than_rows_still_fits():
    _, svg = check_picture(view_data((5, 9), pl.Shard(0), 64, 4, "small"))
    assert len(legend(svg)) == 64  # the ranks with empty shards are in the legend, holding 0 B
    _, svg = check_picture(view_data((4, 30, 20), pl.Shard(0), 4, 4, "T", dims=(1, 2)))
    assert svg.count("dim 0: ") == 4  # small multiples keep their titles


def dtensor_events(p, shape=SHAPE):
    """The events the DTensor hook records for ``a.redistribute(R)`` then ``.redistribute(S(1))`` on ``p`` ranks:
    each op's step 0 ``hold`` of its source, then torch's steps (``layout/redistribute_plan``)."""
    mesh, events = Mesh((p,)), []
    ops = [
        ([(pl.Shard(0),), (pl.Replicate(),)], "t1", "t2", "[S(0)] → [R]"),
        ([(pl.Replicate(),), (pl.Shard(1),)], "t2", "t3", "[R] → [S(1)]"),
    ]
    for op, (chain, src, dst, label) in enumerate(ops):
        for rank in range(p):
            for seq, e in enumerate(plan_events(shape, mesh, chain, [0], rank, 4)):
                events.append(
                    {
                        "rank": rank,
                        "op": op,
                        "label": f"DTensor redistribute {label}",
                        "step": e.step,
                        "action": e.action,
                        "blocks": [{"tensor": src if e.tensor == "src" else dst, "box": [list(r) for r in e.box]}],
                        "bytes": e.nbytes,
                        "time": op * 100 + seq,
                        "seq": op * 100 + seq,
                        "peer": e.peer,
                        **e.info,
                    }
                )
    labels = {"t1": "a", "t2": "a_all", "t3": "back"}
    return tr.merge([events]), {n: {"shape": list(shape), "itemsize": 4, "label": v} for n, v in labels.items()}


@pytest.mark.parametrize("p", [32, 64])
def test_the_trace_player_at_32_and_64_ranks(p):
    events, tensors = dtensor_events(p)
    data = trace_data(events, tensors, p)
    assert len(data["frames"]) == 3
    gather = data["frames"][1]
    assert gather["arrows"] == [] and len(gather["flows"]) == p  # p·(p-1) arrows: each rank's counts instead
    assert all(f[1:] == [p - 1, p - 1] for f in gather["flows"]) and gather["transfers"] == p * (p - 1)
    assert f"{p * (p - 1):,} transfers" in gather["caption"]
    for i in range(3):
        _, svg = check_picture({**data, "frames": data["frames"][: i + 1]})
        assert len(legend(svg)) == p
    assert 'class="mgpu-flow"' in frame_svg(data, 1)


def test_what_the_player_sends_grows_linearly_with_the_ranks():
    size = {p: sent(trace_data(*dtensor_events(p), p)) for p in (16, 32, 64)}
    assert size[64] <= 2.2 * size[32] and size[32] <= 2.2 * size[16], size
    assert size[64] <= 500 * 64 + 4000, size


def test_a_ring_on_32_ranks_keeps_its_arrows_in_rows_of_16():
    p, events = 32, []
    for r in range(p):
        mine, left = [[r * 8, r * 8 + 8], [0, 8]], [[(r - 1) % p * 8, (r - 1) % p * 8 + 8], [0, 8]]
        base = {"rank": r, "op": 0, "label": "ring", "bytes": 256}
        events.append(
            {**base, "step": 0, "action": "hold", "blocks": [{"tensor": "B", "box": mine}], "time": 0, "seq": 0}
        )
        events.append(
            {
                **base,
                "step": 1,
                "action": "send",
                "blocks": [{"tensor": "B", "box": mine}],
                "time": 1,
                "seq": 1,
                "peer": (r + 1) % p,
            }
        )
        events.append(
            {
                **base,
                "step": 1,
                "action": "recv",
                "blocks": [{"tensor": "B", "box": left, "buf": "s"}],
                "time": 1,
                "seq": 2,
                "peer": (r - 1) % p,
            }
        )
    data = trace_data(tr.merge([events]), {"B": {"shape": [8 * p, 8], "itemsize": 4, "label": "B"}}, p)
    assert len(data["frames"][1]["arrows"]) == p and "flows" not in data["frames"][1]
    g, svg = check_picture(data)
    assert g["compact"] and len({y for _, y in g["ranks"]}) == 2 and g["row_room"] > 0  # room for arcs between rows
    assert svg.count('class="mgpu-arrow"') == p


def test_more_than_64_ranks_is_one_sentence_naming_what_to_do_instead():
    with pytest.raises(ValueError, match=r"1 to 64 ranks and this one has 65; mg.show\(tensor, text=True\)"):
        view_data((8, 8), pl.Shard(0), 65, 4, "A")
    with pytest.raises(ValueError, match=r"t.events and t.final_placement\(\)"):
        trace_data([], {}, 65)


def test_the_notebooks_box_sits_in_the_first_row_with_room_for_its_arcs():
    events = [
        {
            "rank": r,
            "op": 0,
            "label": "scatter",
            "step": 0,
            "action": "recv",
            "peer": -1,
            "bytes": 32,
            "time": r,
            "seq": 0,
        }
        | {"blocks": [{"tensor": "x", "box": [[r, r + 1], [0, 8]]}]}
        for r in range(20)
    ]
    data = trace_data(tr.merge([events]), {"x": {"shape": [20, 8], "itemsize": 4, "label": "x"}}, 20)
    g, svg = check_picture(data)
    assert g["host"][1] == g["ranks"][0][1] and g["host"][0] + g["box"][0] < g["ranks"][0][0]
    assert 0 < g["arrow_room"] <= geom.ARROW_ROOM
    top = g["ranks"][0][1]
    arcs = re.findall(r'class="mgpu-arrow" d="M[\d.]+,([\d.]+) Q[\d.]+,([\d.]+) ', svg)
    assert len(arcs) == 20 and ">notebook</text>" in svg
    first_row = [(float(a), float(c)) for a, c in arcs if float(a) == top]
    assert first_row and all(top - c <= 2 * g["arrow_room"] for _, c in first_row)  # the arc's peak in its room
