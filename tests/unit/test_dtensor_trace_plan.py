"""The pure part of the DTensor trace hook (``layout/redistribute_plan.plan_events``): what each rank sends,
receives, reduces, holds and frees in a redistribute, replayed to the boxes the mesh tables give."""

from __future__ import annotations

from jupyter_mgpu.layout.mesh import Mesh, Partial, mesh_shard_table
from jupyter_mgpu.layout.placement import Replicate, Shard
from jupyter_mgpu.layout.redistribute_plan import DST, SRC, collective_of, plan_events
from jupyter_mgpu.tracing import replay as tr

R, S0, S1, P = Replicate(), Shard(0), Shard(1), Partial()


def _replay(shape, mesh, chain, dims, itemsize=4):
    """Every rank's planned events as trace dicts, replayed: ``{tensor role: [boxes of rank 0, ...]}``."""
    events = []
    for rank in mesh.ranks:
        for seq, e in enumerate(plan_events(shape, mesh, chain, dims, rank, itemsize)):
            blocks = [{"tensor": e.tensor, "box": [list(r) for r in e.box]}]
            events.append({"rank": rank, "op": 0, "step": e.step, "action": e.action, "blocks": blocks, "time": seq})
            events[-1].update(bytes=e.nbytes, peer=e.peer, seq=seq, **e.info)
    merged = tr.merge([events])
    return tr.final_placement(tr.replay(tr.group(merged), mesh.size), mesh.size), merged


def _table(shape, mesh, placements):
    return [[s.ranges] if s.numel else [] for s in mesh_shard_table(shape, mesh, placements)]


def test_collective_names_per_mesh_dim():
    assert collective_of(S0, R, 4) == "all_gather"
    assert collective_of(S0, S1, 4) == "all_to_all"
    assert collective_of(P, R, 4) == "all_reduce"
    assert collective_of(P, S0, 4) == "reduce_scatter"
    assert collective_of(R, S1, 4) == collective_of(R, P, 4) == collective_of(S0, R, 1) == "local"


def test_all_gather_on_four_ranks_sends_and_receives_every_other_piece():
    mesh = Mesh((4,))
    events = plan_events((8, 6), mesh, [(S0,), (R,)], [0], 1, 4)
    by = {a: [e for e in events if e.action == a] for a in ("hold", "send", "recv", "free")}
    assert [(e.step, e.tensor, e.box) for e in by["hold"]] == [(0, SRC, ((2, 4), (0, 6))), (1, DST, ((0, 8), (0, 6)))]
    assert [(e.peer, e.box, e.nbytes) for e in by["send"]] == [(p, ((2, 4), (0, 6)), 48) for p in (0, 2, 3)]
    assert [(e.peer, e.box) for e in by["recv"]] == [(p, ((2 * p, 2 * p + 2), (0, 6))) for p in (0, 2, 3)]
    assert {e.tensor for e in by["recv"] + by["free"]} == {DST}  # the source is never freed
    assert all(e.info["collective"] == "all_gather" and e.info["after"] == "[R]" for e in events if e.step)
    final, _ = _replay((8, 6), mesh, [(S0,), (R,)], [0])
    assert final[DST] == _table((8, 6), mesh, (R,)) and final[SRC] == _table((8, 6), mesh, (S0,))


def test_uneven_rows_partial_and_all_to_all_end_in_the_tables():
    mesh = Mesh((4,))
    for shape, src, dst in [((5, 3), S0, R), ((5, 6), S0, S1), ((5, 3), P, R), ((8, 3), P, S0), ((5, 7), R, S1)]:
        final, events = _replay(shape, mesh, [(src,), (dst,)], [0])
        assert final[DST] == _table(shape, mesh, (dst,)), (src, dst)
        assert final[SRC] == _table(shape, mesh, (src,)), (src, dst)
    _, events = _replay((5, 3), mesh, [(S0,), (R,)], [0])
    assert not [e for e in events if e["rank"] == 3 and e["action"] in ("send", "hold") and e["step"] == 0]
    _, events = _replay((4, 4), mesh, [(P,), (R,)], [0])
    reduces = [e for e in events if e["action"] == "reduce"]
    assert len(reduces) == 12 and {e["bytes"] for e in reduces} == {64}
    assert not any(e["action"] == "recv" for e in events)


def test_two_steps_on_a_2d_mesh_free_the_intermediate_pieces():
    mesh = Mesh((2, 2))
    chain = [(S0, S1), (S0, R), (R, R)]  # torch gathers mesh dim 1 first, then mesh dim 0
    final, events = _replay((6, 5), mesh, chain, [1, 0])
    assert final[DST] == _table((6, 5), mesh, (R, R))
    assert final[SRC] == _table((6, 5), mesh, (S0, S1))
    peers = {(e["rank"], e["step"]): e["peer"] for e in events if e["action"] == "recv"}
    assert peers[(0, 1)] == 1 and peers[(0, 2)] == 2  # mesh dim 1 pairs 0-1, mesh dim 0 pairs 0-2
    freed = [e for e in events if e["rank"] == 0 and e["step"] == 2 and e["action"] == "free"]
    assert ((0, 3), (0, 5)) in [tuple(tuple(r) for r in e["blocks"][0]["box"]) for e in freed]
    local = _replay((6, 5), mesh, [(S0, R), (S0, S1)], [1])
    assert local[0][DST] == _table((6, 5), mesh, (S0, S1)) and not any(e["action"] == "send" for e in local[1])


def test_a_rank_outside_the_mesh_records_nothing():
    assert plan_events((4,), Mesh((2,), ranks=[0, 1]), [(S0,), (R,)], [0], 3, 4) == []
