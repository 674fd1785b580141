"""Notebook 09's replay of two DTensor redistributes, without a cluster (issue 37): the announcement counts the
steps the player shows and the events behind them, each step has its own caption, no step changes
nothing, and the pictures print their title once with no gap above the rank legend."""

from __future__ import annotations

import re
from types import SimpleNamespace

from test_placement_many_ranks import dtensor_events

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.tracing import replay as tr
from jupyter_mgpu.tracing.capture import Trace
from jupyter_mgpu.widgets import placement_geometry as geom
from jupyter_mgpu.widgets.placement import placement_view, side_by_side
from jupyter_mgpu.widgets.placement_data import trace_data, view_data, visible_at
from jupyter_mgpu.widgets.placement_svg import frame_svg


def notebook_trace():
    """``a_all = a.redistribute(mesh, [Replicate()])``, ``back = a_all.redistribute(mesh, [Shard(1)])``, 4 ranks."""
    return dtensor_events(4, (8, 8))


def test_a_step_that_changes_nothing_joins_the_next_step_of_its_op():
    events, _ = notebook_trace()
    assert len(events) == 52 and len(tr.group(events)) == 4  # (op, step)s; op 1's step 0 re-holds a_all
    steps = tr.steps(events, 4)
    assert [(s.op, s.index, s.of) for s in steps] == [(0, 1, 2), (0, 2, 2), (1, 1, 1)]
    assert sum(len(s.events) for s in steps) == 52  # every event is in one step
    assert sorted(id(e) for s in steps for e in s.events) == sorted(id(e) for e in events)
    states = tr.replay([s.events for s in steps], 4)
    assert all(a != b for a, b in zip(states, states[1:]))  # each step changes what the ranks hold


def test_each_step_has_its_own_caption_counting_its_events():
    events, tensors = notebook_trace()
    data = trace_data(events, tensors, 4)
    captions = [f["caption"] for f in data["frames"]]
    assert len(set(captions)) == len(captions) == 3
    assert [int(re.search(r"· (\d+) events$", c).group(1)) for c in captions] == [4, 40, 8]
    assert captions[1].startswith("DTensor redistribute [S(0)] → [R] (2/2): all_gather on mesh dim 0")
    assert "768 B received" in captions[1]
    assert captions[2].startswith("DTensor redistribute [R] → [S(1)]: local")
    held = [visible_at(data, i) for i in range(3)]
    assert held[0] != held[1] != held[2]


def test_two_ops_with_one_label_are_numbered():
    events, _ = notebook_trace()
    renamed = [[{**b, "tensor": "u" + b["tensor"]} for b in e["blocks"]] for e in events]  # other tensors
    again = [
        {**e, "op": e["op"] + 2, "time": e["time"] + 1000, "seq": e["seq"] + 1000, "blocks": blocks}
        for e, blocks in zip(events, renamed)
    ]
    captions = [tr.caption(s, {}) for s in tr.steps(tr.merge([events, again]), 4)]
    assert len(set(captions)) == len(captions) == 6
    assert captions[4].startswith("DTensor redistribute [S(0)] → [R] #2 (2/2)")
    assert captions[5].startswith("DTensor redistribute [R] → [S(1)] #2: local")


def test_the_trace_announces_its_steps_and_events():
    events, tensors = notebook_trace()
    t = Trace(SimpleNamespace(world_size=4, id=1), live=False)
    t.events, t.tensors = events, tensors
    assert t.summary() == "52 events in 3 steps (0–2)"
    assert len(t.frames()) == 3 and "52 events in 3 steps (0–2)" in repr(t)
    assert t._badge() == "replay of real events: 52 events in 3 steps (0–2), 4 ranks"
    assert t.final_placement()["t3"] == [[((0, 8), (2 * r, 2 * r + 2))] for r in range(4)]


def tensor(shape, placement, world):
    """A stand-in for a DistTensor: what ``placement_view`` reads."""
    return SimpleNamespace(
        shape=shape, placement=placement, world_size=world, itemsize=4, dtype_name="float32", check=lambda: None
    )


def test_a_view_prints_its_title_once_with_no_gap_above_the_legend():
    title = "a (8, 8) float32"
    data = view_data((8, 8), pl.Shard(0), 4, 4, title)
    assert [p["title"] for p in data["panels"]] == [""]  # the caption names the tensor
    shown = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", frame_svg(data, 0)))  # what is printed
    assert shown.count(title) == 1 and shown.count("S(0) over 4 ranks") == 1
    g = geom.geometry(data)
    panel_bottom = max(y + h for _, y, _, h in g["panels"])
    assert 0 < min(y for _, y in g["ranks"]) - panel_bottom <= 14
    w = placement_view(tensor((8, 8), pl.Shard(0), 4))
    assert w.title == "" and w.badge == ""  # no head above the caption
    html = side_by_side(w, w)._repr_mimebundle_()
    html = (html[0] if isinstance(html, tuple) else html)["text/html"]
    printed = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", html))
    assert "<b>" not in html and printed.count("(8, 8) float32: S(0) over 4 ranks") == 2  # once a picture


def test_a_still_frame_without_arrows_keeps_no_room_for_them():
    events, tensors = notebook_trace()
    data = trace_data(events, tensors, 4)
    g = geom.geometry(data)
    assert g["arrow_room"] > 0  # the player keeps room for step 2's arrows on every step
    still = geom.geometry({**data, "frames": data["frames"][-1:]})
    panel_bottom = max(y + h for _, y, _, h in still["panels"])
    assert still["arrow_room"] == 0 and min(y for _, y in still["ranks"]) - panel_bottom <= 14
    last = frame_svg(data, -1)
    assert f'height="{still["height"]:.0f}"' in last and 'class="mgpu-arrow"' not in last
    assert frame_svg(data, 1).count('class="mgpu-arrow"') == 12
