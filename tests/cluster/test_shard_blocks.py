"""Scatter writes straight into rank-owned blocks; blocks are reused, honest about the budget, never
recycled under a live view, and unmapped by the kernel when the ranks close them.

Every test runs both ways a transfer can go: by address into private blocks (``process_vm_writev``,
the default where the system allows it) and through shared memfd blocks the kernel maps (the fallback).
"""

from __future__ import annotations

import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.engine.shards import shared_blocks
from jupyter_mgpu.errors import DeviceOutOfMemoryError
from jupyter_mgpu.tensors import process_copy
from jupyter_mgpu.tensors import shared_blocks as transfer

pytestmark = pytest.mark.cluster

MODES = ["by address", "shared"]


@pytest.fixture(params=MODES)
def mode(request):
    """``mode(session)`` sends that session's transfers the parametrized way (restored afterwards)."""
    touched = []

    def use(session):
        touched.append(session)
        if request.param == "shared":
            process_copy.disable(session)
        return session

    yield use
    for session in touched:
        session.copy_by_address = True


def _blocks():
    return {b.id: (b.size, b.in_use) for b in shared_blocks._blocks.values()}


def _keep(hid: str) -> None:
    import __main__

    __main__._kept = store.get(hid)


def _kept_sum() -> float:
    import __main__

    return float(__main__._kept.sum())


def _drop_kept() -> None:
    import __main__

    del __main__._kept


def test_a_second_scatter_of_the_same_shape_reuses_the_blocks(s2, mode):
    mode(s2)
    mg.empty_cache(s2)
    x, y = torch.randn(256, 1024), torch.randn(256, 1024)
    A = mg.scatter(x, mg.Shard(0), session=s2)
    first = s2.run(_blocks)
    assert all(len(b) == 1 and list(b.values())[0] == (128 * 1024 * 4, True) for b in first)
    A.free()
    assert all(list(b.values())[0][1] is False for b in s2.run(_blocks))  # cached, not closed
    B = mg.scatter(y, mg.Shard(0), session=s2)
    assert s2.run(_blocks) == first  # the same blocks, in use again
    assert torch.equal(B.gather(), y)
    out = torch.zeros_like(y)
    assert B.gather(out=out) is out and torch.equal(out, y)
    B.free()
    assert mg.empty_cache(s2) == 2 * 128 * 1024 * 4
    assert s2.run(_blocks) == [{}, {}] and transfer.rank_blocks(s2).maps == {}  # unmapped here too


def test_a_view_kept_on_a_rank_keeps_its_block_from_reuse(s2, mode):
    mode(s2)
    x, y = torch.ones(64, 64), torch.full((64, 64), 2.0)
    A = mg.scatter(x, mg.Shard(0), session=s2)
    s2.run(_keep, A.handle_id)
    A.free()
    B = mg.scatter(y, mg.Shard(0), session=s2)  # must not land on the kept view's block
    assert s2.run(_kept_sum) == [32 * 64.0, 32 * 64.0]
    assert torch.equal(B.gather(), y)
    s2.run(_drop_kept)
    B.free()


@pytest.mark.slow
def test_shard_blocks_count_against_the_device_budget(own_session, mode):
    with own_session(2, mem_per_device="256MiB") as s:
        mode(s)
        with pytest.raises(
            DeviceOutOfMemoryError,
            match=r"^ranks 0, 1 ran out of device memory \(budget 256.0 MiB each\) while allocat",
        ):
            mg.scatter(torch.zeros(2, 300, 1 << 18), mg.Shard(0))  # 300 MiB per rank
        A = mg.scatter(torch.ones(2, 160, 1 << 18), mg.Shard(0))  # 160 MiB per rank, in blocks
        # a 200 MiB tensor fits the budget, not with the blocks held: they count like tensors
        grab = "big = torch.ones(200, 1 << 18); x = big.sum().item(); del big; x"
        with pytest.raises(DeviceOutOfMemoryError, match="budget 256.0 MiB"):
            s.run_cell(grab)
        A.free()  # a block past the cache's share of the budget is closed at once
        assert s.run_cell(grab) == [repr(float(200 << 18))] * 2


@pytest.mark.slow
def test_a_scatter_refused_on_one_rank_leaves_no_block_reserved_on_the_others(own_session, mode):
    with own_session(2, mem_per_device="256MiB") as s:
        mode(s)
        s.run_cell("hog = torch.ones(200, 1 << 18)", targets=1)  # rank 1 has little room left
        with pytest.raises(DeviceOutOfMemoryError, match=r"^rank 1 ran out of device memory"):
            mg.scatter(torch.zeros(2, 150, 1 << 18), mg.Shard(0))
        assert s.run(_blocks) == [{}, {}] or all(not used for b in s.run(_blocks) for _, used in b.values())
        assert s.run(lambda: len(shared_blocks._pending)) == [0, 0]


def test_blocks_are_private_memory_when_the_kernel_copies_by_address(s2):
    assert process_copy.usable(s2)
    A = mg.scatter(torch.arange(8.0 * 1024).view(8, 1024), mg.Shard(0), session=s2)
    kinds = s2.run(lambda: [b.shared for b in shared_blocks._blocks.values() if b.in_use])
    assert kinds == [[False], [False]]
    A.free()


def test_a_system_that_forbids_copies_by_address_falls_back_to_shared_blocks(s2, monkeypatch):
    """Hardened ptrace policies and some containers refuse process_vm_writev with EPERM."""
    import errno

    def refuse(write, pid, *rest):
        raise process_copy.Denied(errno.EPERM, f"writing to process {pid}: Operation not permitted")

    monkeypatch.setattr(process_copy, "_one", refuse)
    x = torch.randn(64, 100)
    try:
        A = mg.scatter(x, mg.Shard(1), session=s2)
        assert not process_copy.usable(s2)  # decided once for the session
        assert torch.equal(A.gather(), x)
        assert s2.run(lambda: sorted(b.shared for b in shared_blocks._blocks.values() if b.in_use)) == [[True]] * 2
        assert s2.run(lambda: len(shared_blocks._pending)) == [0, 0]
        A.free()
    finally:
        s2.copy_by_address = True
