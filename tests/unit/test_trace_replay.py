"""Pure replay: merge order of the ranks' events, frames, holdings, memory, the player's data and widget state."""

from __future__ import annotations

import json
import os

import pytest

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.ops import collective_trace as ct
from jupyter_mgpu.tracing import replay as tr
from jupyter_mgpu.widgets.placement import PlacementWidget, save_html, standalone_html
from jupyter_mgpu.widgets.placement_data import trace_data, visible_at


def ev(rank, op, step, action, blocks, t, seq, nbytes=0, peer=None):
    e = {
        "rank": rank,
        "op": op,
        "label": f"op{op}",
        "step": step,
        "action": action,
        "blocks": [{"tensor": n, "box": box, **({"buf": b} if b else {})} for n, box, b in blocks],
        "bytes": nbytes,
        "time": t,
        "seq": seq,
    }
    if peer is not None:
        e["peer"] = peer
    return e


TENSORS = {"B": {"shape": [4, 4], "itemsize": 4, "label": "B"}}
B0, B1 = [[0, 2], [0, 4]], [[2, 4], [0, 4]]


def ring_events():
    r0 = [
        ev(0, 0, 0, "hold", [("B", B0, None)], 1.0, 1, 32),
        ev(0, 0, 1, "send", [("B", B0, None)], 1.1, 2, 32, 1),
        ev(0, 0, 1, "recv", [("B", B1, "s")], 1.3, 3, 32, 1),
        ev(0, 0, 2, "free", [("B", B1, "s")], 1.5, 4, 32),
    ]
    r1 = [
        ev(1, 0, 0, "hold", [("B", B1, None)], 0.9, 1, 32),
        ev(1, 0, 1, "recv", [("B", B0, "s")], 1.2, 2, 32, 0),
        ev(1, 0, 1, "send", [("B", B1, None)], 1.25, 3, 32, 0),
        ev(1, 0, 2, "free", [("B", B0, "s")], 1.6, 4, 32),
    ]
    return r0, r1


def test_merge_orders_by_op_then_step_then_time_and_keeps_each_ranks_order():
    r0, r1 = ring_events()
    later = [ev(0, 1, 0, "hold", [("B", B0, None)], 0.5, 5)]  # a later op with an earlier clock still comes after
    merged = tr.merge([r0 + later, r1])
    assert [(e["op"], e["step"]) for e in merged] == sorted((e["op"], e["step"]) for e in merged)
    assert merged[-1]["op"] == 1
    for rank in (0, 1):
        seqs = [e["seq"] for e in merged if e["rank"] == rank]
        assert seqs == sorted(seqs)
    step1 = [(e["rank"], e["action"]) for e in merged if e["step"] == 1 and e["op"] == 0]
    assert step1 == [(0, "send"), (1, "recv"), (1, "send"), (0, "recv")]  # by time


def test_replay_holdings_memory_and_final_placement():
    merged = tr.merge(ring_events())
    frames = tr.group(merged)
    assert len(frames) == 3
    states = tr.replay(frames, 2)
    assert states[1][0] == {("B", ((0, 2), (0, 4)), None), ("B", ((2, 4), (0, 4)), "s")}
    mem = tr.memory(states, TENSORS)
    assert mem == [[32, 32], [64, 64], [32, 32]]  # a temporary copy counts while it is held
    assert tr.final_placement(states, 2) == {"B": [[((0, 2), (0, 4))], [((2, 4), (0, 4))]]}


def test_memory_counts_overlapping_blocks_of_one_tensor_once():
    assert tr.union_numel([((0, 2), (0, 4)), ((0, 4), (0, 4)), ((2, 4), (0, 4))]) == 16
    assert tr.union_numel([((0, 2), (0, 2)), ((1, 3), (1, 3))]) == 7


def test_trace_data_deltas_rebuild_every_frames_holdings():
    merged = tr.merge(ring_events())
    data = trace_data(merged, TENSORS, 2)
    assert len(data["frames"]) == 3 and len(data["panels"]) == 1
    held = [visible_at(data, i) for i in range(3)]
    assert held[0] == {(0, 0), (1, 1)} and len(held[1]) == 4 and held[2] == held[0]
    assert data["frames"][1]["arrows"] and all(a[0] != a[1] for a in data["frames"][1]["arrows"])
    assert data["frames"][1]["mem"] == [64, 64] and data["max_mem"] == 64


def big_trace(n_events=2400, p=8):
    evs, seq = [], [0] * p
    shape = [64, 64]
    for i in range(n_events):
        r = i % p
        step = i // p
        seq[r] += 1
        box = [[(step * 8) % 64, (step * 8) % 64 + 8], [r * 8, r * 8 + 8]]
        action = ("hold", "send", "recv", "compute", "free")[step % 5]
        evs.append(ev(r, 0, step, action, [("T", box, None)], step + r * 1e-3, seq[r], 256, (r + 1) % p))
    return tr.merge([evs]), {"T": {"shape": shape, "itemsize": 4, "label": "T"}}


def test_a_trace_of_2400_events_gives_compact_data():
    merged, tensors = big_trace()
    data = trace_data(merged, tensors, 8)
    n = len(data["frames"])
    assert n == len(tr.steps(merged, 8)) and 200 < n < 300  # 300 (op, step)s, less those that change nothing
    assert all(f["add"] or f["rm"] or f["arrows"] or f["compute"] for f in data["frames"])
    size = len(json.dumps(data))
    assert size < 400_000, size  # differences only: a few hundred bytes per frame
    w = PlacementWidget(data=data)
    assert w.n_frames == n
    w.index = 10_000
    assert w.index == n - 1  # clamped


def test_widget_state_without_a_kernel():
    data = trace_data(tr.merge(ring_events()), TENSORS, 2)
    w = PlacementWidget(data=data, mode="player")
    assert w.index == 0 and w.held == {(0, 0), (1, 1)}
    w.step()
    assert w.index == 1 and len(w.held) == 4
    w.step(-1)
    assert w.index == 0
    w.play()
    assert w.playing
    w.step(5)
    assert w.index == 2 and not w.playing  # the end stops playback
    w.speed = 4
    with pytest.raises(Exception, match="speed"):
        w.speed = 0
    bundle = w._repr_mimebundle_()
    data_bundle = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "application/vnd.jupyter.widget-view+json" in data_bundle
    assert data_bundle["image/svg+xml"].startswith("<svg") and "mgpu-tile" in data_bundle["text/html"]


def test_standalone_html_is_self_contained(tmp_path):
    data = trace_data(tr.merge(ring_events()), TENSORS, 2)
    page = standalone_html(data, "ring")
    assert "<script" in page and "function render" in page and "export default" not in page
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    out = save_html(data, tmp_path / "t.html", "ring")
    assert os.path.getsize(out) > 1000
    assert [p.name for p in tmp_path.iterdir()] == ["t.html"]


def test_save_html_to_a_path_that_cannot_be_written_leaves_nothing(tmp_path):
    data = trace_data(tr.merge(ring_events()), TENSORS, 2)
    with pytest.raises(MgpuError, match="does not exist"):
        save_html(data, tmp_path / "missing" / "t.html")
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores the mode: a directory in the way of the file name instead
            target = ro / "t.html"
            target.mkdir()
            with pytest.raises(MgpuError, match="cannot write"):
                save_html(data, target)
            assert [p.name for p in ro.iterdir()] == ["t.html"] and target.is_dir()
        else:
            with pytest.raises(MgpuError, match="cannot write"):
                save_html(data, ro / "t.html")
            assert list(ro.iterdir()) == []
    finally:
        os.chmod(ro, 0o700)


@pytest.mark.parametrize(
    "name",
    [
        "broadcast",
        "reduce",
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "scatter",
        "gather",
        "all_to_all",
        "barrier",
        "send_recv",
    ],
)
def test_collective_plan_sends_match_receives(name):
    n, src, shape = 4, 2, (8, 3)
    plans = [ct.plan(name, r, n, src, shape) for r in range(n)]
    sends = sorted((r, peer, box) for r, p in enumerate(plans) for _, box, peer in p["send"])
    recvs = sorted((peer, r, box) for r, p in enumerate(plans) for _, box, peer in p["recv"])
    assert sends == recvs


def test_a_live_player_before_any_event_still_has_a_static_picture():
    w = PlacementWidget(data={}, live=True)
    assert w.n_frames == 0 and w.held == set()
    bundle = w._repr_mimebundle_()
    bundle = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "no events yet" in bundle["text/html"]
