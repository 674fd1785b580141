"""Traces from real engines: replay equals reality for every matmul strategy, every collective and data movement."""

from __future__ import annotations

import time

import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import collective_run as coll
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.tracing import replay as tr

pytestmark = pytest.mark.cluster

FIELDS = {"rank", "step", "action", "blocks", "bytes", "time"}


def _covers_exactly(boxes, box) -> bool:
    """The replay's pieces of a shard lie inside its box and cover it exactly."""
    inside = all(all(a0 <= a and b <= b0 for (a, b), (a0, b0) in zip(piece, box)) for piece in boxes)
    return inside and tr.union_numel(boxes) == pl.box_numel(box)


def _assert_replay_is_real(t, tensor):
    """The replay's final holdings of ``tensor`` are its shard table and the shards the ranks really store."""
    final = t.final_placement()[tensor.handle_id]
    real = tensor.session.run(rank_tensor.shard_bytes, tensor.handle_id)
    for s in tensor.table:
        assert _covers_exactly(final[s.rank], s.ranges), (s.rank, final[s.rank], s.ranges)
        assert tr.union_numel(final[s.rank]) * tensor.itemsize == real[s.rank]


@pytest.mark.parametrize("strategy", ["row", "col", "inner", "ring", "summa"])
def test_matmul_replay_ends_in_the_real_placement(s4, strategy):
    A = mg.randn(37, 22, placement=mg.Block2D(2, 2), seed=1)  # redistributed first by every strategy but summa
    B = mg.randn(22, 29, placement=mg.Shard(1), seed=2)
    with mg.trace() as t:
        C = mg.matmul(A, B, strategy)
    assert t.events and all(FIELDS <= set(e) for e in t.events)
    assert {e["action"] for e in t.events} <= set(tr.ACTIONS)
    assert {e["label"] for e in t.events} == {f"matmul:{strategy}"}
    for x in (A, B, C):
        _assert_replay_is_real(t, x)
    final = t.final_placement()
    assert set(final) == {A.handle_id, B.handle_id, C.handle_id}  # every temporary copy was freed
    assert [sum(m) for m in t.memory()][-1] > 0
    if strategy in ("ring", "summa", "inner"):
        assert any(e["action"] in ("send", "recv", "reduce") and e.get("peer", -1) >= 0 for e in t.events)
        assert sum(t.bytes_moved()) > 0
    assert any(e["action"] == "compute" for e in t.events)
    assert float((C.gather() - A.gather() @ B.gather()).abs().max()) < 1e-3
    p = t.play()
    p.step(len(p.data["frames"]))
    assert p.index == p.n_frames - 1
    if s4.cluster.spec.telemetry_period:  # the measured memory of each rank rides along with every frame
        assert t.samples and all(len(f["tele"]) == 4 for f in p.data["frames"])
        assert all(b > 0 for f in p.data["frames"] for b in f["tele"])


def test_ring_records_every_chunk_moving_around_the_ring(s4):
    A = mg.randn(40, 40, placement=mg.Shard(0), seed=1)
    B = mg.randn(40, 40, placement=mg.Shard(0), seed=2)
    with mg.trace() as t:
        C = mg.matmul(A, B, "ring")
    chunks = C.plan.chosen.params["chunks"]
    recvs = [e for e in t.events if e["action"] == "recv"]
    assert len(recvs) == 4 * 3 * chunks  # each rank receives every other rank's block, chunk by chunk
    assert all(e["peer"] == (e["rank"] - 1) % 4 for e in recvs)
    assert all(e["blocks"][0]["tensor"] == B.handle_id for e in recvs)


def test_scatter_redistribute_gather_replay(s4):
    x = torch.arange(63.0).view(9, 7)
    with mg.trace() as t:
        A = mg.scatter(x, placement=mg.Shard(0))
        B = A.redistribute(mg.Block2D(2, 2))
        g = B.gather()
    assert torch.equal(g, x)
    assert [lab for lab in dict.fromkeys(e["label"] for e in t.events)] == ["scatter", "redistribute", "gather"]
    _assert_replay_is_real(t, A)
    _assert_replay_is_real(t, B)
    assert any(e["action"] == "recv" and e["peer"] == -1 for e in t.events)  # from the notebook
    assert any(e["action"] == "send" and e["peer"] == -1 for e in t.events)  # to the notebook


def _rebuild(name, final, inputs, op, rank, n):
    """The tensor(s) rank ``rank`` holds according to the replay, rebuilt from the real inputs."""
    x = torch.stack(inputs)
    red = {"sum": x.sum(0), "max": x.max(0).values}[op]
    mine = []
    for tname, boxes in final.items():
        for box in boxes[rank]:
            src = x if tname.endswith(":inputs") else red
            mine.append((box, src[tuple(slice(a, b) for a, b in box)]))
    mine.sort(key=lambda kv: kv[0])
    if name in coll.LIST_AFTER:
        return [v.squeeze(0) for _, v in mine] if mine else None
    if not mine:
        return None
    [(box, v)] = mine
    return v.squeeze(0) if len(box) == x.dim() else v


@pytest.mark.parametrize("name", coll.COLLECTIVES)
def test_collective_replay_ends_in_what_the_ranks_really_hold(s4, name):
    with mg.trace() as t:
        r = mg.collective(name, shape=(8, 3), src=2, op="max" if name in coll.REDUCING else "sum")
    final = t.final_placement()
    for rank in range(4):
        got = _rebuild(name, final, r.inputs, r.op or "sum", rank, 4)
        assert coll_equal(got, r.after[rank]), (name, rank)


def coll_equal(a, b):
    from jupyter_mgpu.collectives.collective_run import holdings_equal

    return holdings_equal(a, b)


def test_live_player_follows_events_while_the_block_runs(s2):
    A = mg.randn(30, 30, placement=mg.Shard(0), seed=1)
    with mg.trace() as t:
        p = t.play()
        assert p.live and p.n_frames == 0
        C = mg.matmul(A, A.redistribute(mg.Shard(0)), "ring")

        def followed() -> bool:  # the follower thread sets data, then index: read both once it has done so
            n = p.n_frames
            return n > 0 and p.index == n - 1

        deadline = time.monotonic() + 5
        while not followed() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert followed(), (p.n_frames, p.index)  # followed the events while still recording
    assert not p.live and p.n_frames == len(t.frames()) == len(tr.steps(t.events, 2))
    del C


def test_tracing_off_records_nothing_and_costs_one_check(s2):
    from jupyter_mgpu.engine.records import trace as etrace

    assert s2.run(etrace.active) == [False, False]
    with mg.trace() as t:
        assert s2.run(etrace.active) == [True, True]
    assert s2.run(etrace.active) == [False, False]
    assert len(t) == 0


@pytest.mark.slow
def test_bad_input_is_one_sentence(s2, own_session, tmp_path):
    with mg.trace() as t:
        with pytest.raises(MgpuError, match="already recording"):
            with mg.trace():
                pass
    with pytest.raises(MgpuError, match="no events"):
        t.play()
    with pytest.raises(MgpuError, match="no events"):
        t.save_html(tmp_path / "x.html")
    A = mg.randn(4, 4, seed=0)
    with mg.trace() as t:
        A.redistribute(mg.Replicate())
    with pytest.raises(MgpuError, match="cannot write"):
        t.save_html(tmp_path / "nope" / "x.html")
    assert list(tmp_path.iterdir()) == []
    A.free()
    with pytest.raises(MgpuError, match="was freed"):
        mg.show(A)
    with pytest.raises(MgpuError, match="needs a DistTensor"):
        mg.show(torch.zeros(2))
    with own_session(2):
        B = mg.randn(4, 4, seed=0)
    with pytest.raises(MgpuError, match="shut down"):
        mg.show(B)
    assert "shut down" in B._repr_html_() and "mgpu-tile" not in B._repr_html_()


def test_show_and_rich_repr(s4):
    A = mg.randn(60, 40, placement=mg.Block2D(2, 2))
    v = mg.show(A)
    assert v.mode == "view" and len(v.data["panels"]) == 1
    assert sorted(r for r, _ in v.held) == [0, 1, 2, 3]
    bundle = v._repr_mimebundle_()
    bundle = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "placement=B(2x2)" in bundle["text/plain"] and "|  2   |  3   |" in bundle["text/plain"]
    assert bundle["image/svg+xml"].count('class="mgpu-tile"') == 4
    T = mg.randn(4, 6, 5, placement=mg.Shard(0))
    v3 = mg.show(T, dims=(1, 2))
    assert len(v3.data["panels"]) == 4  # the sharded dim not drawn: small multiples


@pytest.mark.parametrize(
    "src,dst",
    [
        (mg.Shard(1), mg.Shard(0)),
        (mg.Block2D(2, 2), mg.Replicate()),
        (mg.Replicate(), mg.Block2D(4, 1)),
        (mg.Shard(0), mg.Block2D(2, 2)),
    ],
)
def test_every_redistribution_replays_to_the_real_shards(s4, src, dst):
    A = mg.arange(11, 13, placement=src)
    with mg.trace() as t:
        B = A.redistribute(dst)
    _assert_replay_is_real(t, B)
    _assert_replay_is_real(t, A)  # the source is unchanged
    moved = sum(t.bytes_moved())
    expect = sum(
        pl.box_numel(box) * 8
        for s, row in enumerate(pl.moves((11, 13), src, dst, 4))
        for d, box in enumerate(row)
        if box is not None and s != d
    )
    assert moved == expect
