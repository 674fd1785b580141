"""DistTensor with real engines: creation, scatter/gather, redistribute, local, free, errors."""

from __future__ import annotations

import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.engine.shards import seeding
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.tensors import shared_blocks

pytestmark = pytest.mark.cluster

PLACEMENTS = [mg.Shard(0), mg.Shard(1), mg.Replicate(), mg.Block2D()]


def _shard_ids():
    from jupyter_mgpu.engine.shards import shard_store as store

    return store.ids()


def _rss():
    from jupyter_mgpu.engine.records import telemetry

    return telemetry._proc_status()["VmRSS"]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_random_tensor_is_the_same_global_tensor_for_every_world_size(session_of, n):
    s = session_of(n)
    ref = seeding.global_tensor("randn", (301, 259), seed=5)
    for placement in PLACEMENTS:
        A = mg.randn(301, 259, placement=placement, seed=5)
        assert A.session is s
        assert torch.equal(A.gather(), ref), placement
    assert torch.equal(mg.arange(5, 7, placement=mg.Shard(1)).gather(), torch.arange(35).reshape(5, 7))
    assert torch.equal(mg.ones(4, 3, dtype="float64").gather(), torch.ones(4, 3, dtype=torch.float64))
    assert torch.equal(mg.zeros(3, 4, placement=mg.Replicate()).gather(), torch.zeros(3, 4))
    # torch-like positional forms: (shape, placement, dtype, seed)
    P = mg.randn((301, 259), mg.Shard(1), "float64", 5)
    assert P.placement == mg.Shard(1) and P.dtype == torch.float64
    assert torch.equal(P.gather(), seeding.global_tensor("randn", (301, 259), dtype=torch.float64, seed=5))
    assert mg.ones(torch.Size([2, 3]), mg.Replicate()).shape == (2, 3)
    assert shared_blocks.open_buffers() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_scatter_gather_round_trip_is_bit_exact(session_of, dtype):
    session_of(3)
    x = (torch.randn(100, 37) * 1000).to(dtype)
    for placement in PLACEMENTS:
        X = mg.scatter(x, placement)
        assert X.shape == (100, 37) and X.dtype == dtype
        assert torch.equal(X.gather(), x), placement
        out = torch.full_like(x, 0)
        assert X.gather(out=out) is out and torch.equal(out, x)
    # 1-D, 3-D and empty tensors too
    for y in (torch.arange(10.0), torch.randn(4, 5, 6), torch.empty(0, 3)):
        assert torch.equal(mg.scatter(y, mg.Shard(0)).gather(), y)
    assert shared_blocks.open_buffers() == []


def test_local_shards_follow_the_shard_table(s4):
    x = torch.randn(10, 6)
    X = mg.scatter(x, mg.Block2D(2, 2))
    for info in X.table:
        assert torch.equal(
            X.local(info.rank), x[info.ranges[0][0] : info.ranges[0][1], info.ranges[1][0] : info.ranges[1][1]]
        )
    assert X.local_shapes == [(5, 3), (5, 3), (5, 3), (5, 3)]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_redistribute_between_every_pair_of_placements(session_of, n):
    session_of(n)
    x = torch.randn(11, 7, dtype=torch.float64)
    for src in PLACEMENTS:
        X = mg.scatter(x, src)
        for dst in PLACEMENTS:
            Y = X.redistribute(dst)
            assert Y.placement == mg.layout.placement.normalize(dst, 2, n)
            assert torch.equal(Y.gather(), x), (src, dst)


def test_repr_shows_layout_and_bytes(session_of):
    session_of(3)
    A = mg.randn(1000, 8, placement=mg.Shard(0), seed=0)
    text = repr(A)
    assert "shape=(1000, 8)" in text and "float32" in text and "S(0)" in text and "3 ranks" in text
    assert "rank 0: local (334, 8), 10.4 KiB" in text and "rank 2: local (333, 8)" in text
    assert A.bytes_per_rank == [334 * 8 * 4, 333 * 8 * 4, 333 * 8 * 4]
    assert "placement=B(1x3)" in repr(mg.zeros(4, 4, placement=mg.Block2D()))


def test_del_frees_the_shards_and_their_memory(s2):
    mg.randn(2, 2)  # warm up
    before = s2.run(_rss)
    A = mg.zeros(4096, 4096 * 2, placement=mg.Shard(0))  # 64 MiB per rank
    hid = A.handle_id
    during = s2.run(_rss)
    assert all(d - b > 60 * 2**20 for b, d in zip(before, during))
    assert all(hid in ids for ids in s2.run(_shard_ids))
    del A
    # queued, not sent from the finalizer (whose round trip could swallow a stop pressed meanwhile)
    assert hid in s2.__dict__["_mgpu_pending_free"]
    after = s2.run(_rss)  # the free was queued before this call, so it ran first
    assert all(hid not in ids for ids in s2.run(_shard_ids))
    assert all(d - a > 60 * 2**20 for a, d in zip(after, during)), (before, during, after)
    # free() is explicit and idempotent
    B = mg.ones(3, 3)
    B.free()
    B.free()
    with pytest.raises(MgpuError, match="was freed"):
        B.gather()


def test_a_tensor_a_cell_drops_is_freed_when_the_cell_ends(s2):
    from ipshell import shell

    ip = shell()
    assert ip.run_cell("import jupyter_mgpu as mg\n_dropped = mg.zeros(64, 64)").success
    hid = ip.user_ns["_dropped"].handle_id
    assert ip.run_cell("del _dropped").success
    assert hid not in s2.__dict__.get("_mgpu_pending_free", [])  # sent when the cell ended, no call since
    assert all(hid not in ids for ids in s2.run(_shard_ids))


def test_a_cell_ending_after_a_stop_left_the_group_to_rebuild_leaves_its_frees_to_the_next_call(s2):
    """The cell's end does not rebuild the group (there the kernel would wait for a busy rank up to the
    session's timeout, past the stop button's reach): the next call rebuilds, then frees."""
    from ipshell import shell

    ip = shell()
    assert ip.run_cell("import jupyter_mgpu as mg\n_dropped = mg.zeros(64, 64)").success
    hid = ip.user_ns["_dropped"].handle_id
    s2.recovery.mark_dirty("the interrupt")  # as a stop that left a rank busy does
    assert ip.run_cell("del _dropped").success
    assert hid in s2.__dict__["_mgpu_pending_free"] and s2.recovery.dirty == "the interrupt"
    assert all(hid not in ids for ids in s2.run(_shard_ids))  # rebuilt, then freed, before this call
    assert s2.recovery.dirty is None


def test_bad_input_is_one_sentence_and_allocates_nothing(s2):
    ids_before = s2.run(_shard_ids)
    cases = [
        (lambda: mg.randn(4, 4, placement=mg.Shard(2)), "out of range"),
        (lambda: mg.randn(4, 4, placement=mg.Block2D(3, 1)), "not a grid of 2"),
        (lambda: mg.randn(4, 4, dtype="int64"), "floating-point"),
        (lambda: mg.randn(4, 4, dtype="complex-ish"), "unsupported dtype"),
        (lambda: mg.zeros(-1, 4), "non-negative"),
        (lambda: mg.zeros(4.5, 4), "whole numbers"),
        (lambda: mg.zeros((4, 4), mg.Shard(0), placement=mg.Shard(1)), "given twice"),
        (lambda: mg.randn(4, 4, seed=-2), "seed"),
        (lambda: mg.scatter("text"), "scatter needs"),
        (lambda: mg.randn(4, 4).gather(out=torch.empty(3, 3)), "out= must be"),
    ]
    for fn, words in cases:
        with pytest.raises(MgpuError, match=words):
            fn()
    assert s2.run(_shard_ids) == ids_before
    assert torch.equal(mg.arange(3, 2).gather(), torch.arange(6).reshape(3, 2))


@pytest.mark.slow
def test_handles_of_other_or_dead_sessions_are_refused(cluster_pool, own_session):
    a2 = mg.randn(8, 8, session=cluster_pool(2))
    a3 = mg.randn(8, 8, session=cluster_pool(3))
    with pytest.raises(MgpuError, match="different sessions"):
        mg.matmul(a2, a3)
    with own_session(2) as s:
        dead = mg.randn(8, 8, seed=1)
        assert dead.session is s
    with pytest.raises(MgpuError, match="shut down"):
        dead.gather()
    with pytest.raises(MgpuError, match="shut down"):
        mg.matmul(dead, dead)
    assert "invalid" in repr(dead)
    del dead  # a dead handle's finalizer does nothing and raises nothing
    assert torch.equal(a2.gather(), seeding.global_tensor("randn", (8, 8), seed=0))


def test_mgpu_cell_reaches_the_local_shard(s2):
    from ipshell import shell

    ip = shell()
    ip.user_ns["A"] = mg.arange(4, 3, placement=mg.Shard(0))
    r = ip.run_cell("%%mgpu\nmgpu.local(A).sum().item()")
    assert r.success, r.error_in_exec
    assert s2.run_cell("mgpu.local(A).tolist()") == [repr([[0, 1, 2], [3, 4, 5]]), repr([[6, 7, 8], [9, 10, 11]])]
    del ip.user_ns["A"]
