"""Sharded matmul with real engines: every strategy x world size x shape kind against torch.mm."""

from __future__ import annotations

import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.engine.shards import seeding
from jupyter_mgpu.errors import DeviceOutOfMemoryError, MgpuError
from jupyter_mgpu.ops import matmul_baselines
from jupyter_mgpu.ops.matmul_plan import tolerance

pytestmark = pytest.mark.cluster

STRATEGIES = ["row", "col", "inner", "ring", "summa", "auto"]
SHAPES = {
    "square": (64, 64, 64),
    "rectangular": (96, 40, 150),
    "uneven": (101, 37, 53),
    "thin": (5, 130, 7),
    "tiny_inner": (9, 2, 11),
}


def _ids():
    from jupyter_mgpu.engine.shards import shard_store as store

    return store.ids()


def _reference(m, k, n, dtype=torch.float32, seeds=(1, 2)):
    a = seeding.global_tensor("randn", (m, k), dtype=dtype, seed=seeds[0])
    b = seeding.global_tensor("randn", (k, n), dtype=dtype, seed=seeds[1])
    calc = torch.float64 if dtype == torch.float64 else torch.float32
    return a.to(calc) @ b.to(calc)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.slow
def test_every_strategy_matches_torch_mm(session_of, n, strategy):
    session_of(n)
    for kind, (m, k, nn) in SHAPES.items():
        A = mg.randn(m, k, placement=mg.Shard(0), seed=1)
        B = mg.randn(k, nn, placement=mg.Shard(1), seed=2)  # not every strategy's layout: redistributed
        C = mg.matmul(A, B, strategy)
        assert C.shape == (m, nn) and C.dtype_name == "float32"
        err = float((C.gather() - _reference(m, k, nn)).abs().max())
        assert err <= tolerance("float32", k), (kind, err)
        assert C.report.strategy == C.plan.strategy
        if strategy != "auto":
            assert C.report.strategy == strategy
        assert len(C.report.peak_bytes) == n and all(p > 0 for p in C.report.peak_bytes)
        assert C.placement == C.plan.out_placement


@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
@pytest.mark.slow
def test_other_dtypes_on_four_ranks(s4, dtype):
    tdt = getattr(torch, dtype)
    ref = _reference(90, 70, 50, tdt)
    for strategy in ["row", "col", "inner", "ring", "summa"]:
        A = mg.randn(90, 70, placement=mg.Shard(0), dtype=dtype, seed=1)
        B = mg.randn(70, 50, placement=mg.Shard(0), dtype=dtype, seed=2)
        C = mg.matmul(A, B, strategy)
        assert C.dtype == tdt
        err = float((C.gather().to(ref.dtype) - ref).abs().max())
        assert err <= tolerance(dtype, 70), (strategy, err)


@pytest.mark.parametrize("grid", [(1, 4), (4, 1), (2, 2)])
def test_summa_on_any_grid(s4, grid):
    A = mg.randn(77, 45, placement=mg.Block2D(*grid), seed=1)
    B = mg.randn(45, 33, placement=mg.Replicate(), seed=2)
    C = A @ B if grid == (2, 2) else mg.matmul(A, B, "summa", grid=grid)
    if grid != (2, 2):
        assert C.placement == mg.Block2D(*grid)
    assert float((C.gather() - _reference(77, 45, 33)).abs().max()) <= tolerance("float32", 45)


def _live_grid_groups():
    """Whether this rank's cached SUMMA row/column groups belong to the current process group."""
    import torch.distributed as dist

    from jupyter_mgpu.ops import summa_matmul as matmul

    return all(g in dist.distributed_c10d._world.pg_group_ranks for g in matmul._grid_groups(2, 2))


def test_summa_after_a_process_group_rebuild_uses_fresh_subgroups(s4):
    A = mg.randn(37, 22, placement=mg.Block2D(2, 2), seed=1)
    B = mg.randn(22, 29, placement=mg.Shard(1), seed=2)
    for _ in range(4):  # a rebuilt default group often lands at the address of the one before
        mg.matmul(A, B, "summa")
        assert s4._rebuild_process_group()  # what a failed collective triggers
        assert s4.run(_live_grid_groups) == [True] * 4  # stale groups of the destroyed one hang a broadcast
    C = mg.matmul(A, B, "summa")
    assert float((C.gather() - A.gather() @ B.gather()).abs().max()) < 1e-3


def test_ring_moves_what_the_plan_says_and_no_rank_holds_all_of_b(s4):
    n = 1024
    A = mg.randn(n, n, placement=mg.Shard(0), seed=1)
    B = mg.randn(n, n, placement=mg.Shard(0), seed=2)
    C = mg.matmul(A, B, "ring")
    # exact: every rank receives the other three quarters of B
    assert C.report.bytes_moved == C.plan.bytes_moved == [n * n * 3 // 4 * 4] * 4
    assert C.report.steps == C.plan.steps > 4
    b_bytes = n * n * 4
    # predicted and measured peak both stay well below "A shard + all of B + C shard"
    assert max(C.plan.peak_bytes) < 0.7 * (b_bytes + 2 * b_bytes // 4)
    assert all(p < b_bytes + 2 * b_bytes // 4 for p in C.report.peak_bytes), C.report.peak_bytes
    assert all(p >= 2 * b_bytes // 4 for p in C.report.peak_bytes)  # at least the input shards
    assert C.report.time > 0 and C.report.gflops > 0
    assert mg.tensors.sharded_matmul.max_error(C, 1, 2) <= tolerance("float32", n)
    text = repr(C.report)
    assert "ring" in text and "peak (measured)" in text and "peak (predicted)" in text


def test_bad_input_is_refused_before_anything_allocates(s2):
    A = mg.randn(8, 6, seed=1)
    B = mg.randn(5, 4, seed=2)
    B6 = mg.randn(6, 4, dtype="float64", seed=2)
    B6f = mg.randn(6, 4, seed=2)
    H1, H2 = mg.randn(8, 6, dtype="float16"), mg.randn(6, 4, dtype="float16")
    v = mg.randn(6, seed=0)
    before = s2.run(_ids)
    cases = [
        (lambda: mg.matmul(A, B), "inner dimensions do not match: A is 8x6, B is 5x4"),
        (lambda: mg.matmul(A, B6), "dtypes differ"),
        (lambda: mg.matmul(A, B6f, "cannon"), "unknown matmul strategy 'cannon'"),
        (lambda: mg.matmul(A, B6f, "summa", grid=(3, 1)), "does not have 2 ranks"),
        (lambda: mg.matmul(A, v), "two 2-D tensors"),
        (lambda: mg.matmul(A, torch.ones(6, 4)), "expected a DistTensor"),
        (lambda: mg.matmul(H1, H2), "float16 matmul needs GPUs"),
        (lambda: mg.plan_matmul(((4, 4), (4, 4)), 2, strategy="fast"), "unknown matmul strategy"),
    ]
    for fn, words in cases:
        with pytest.raises(MgpuError, match=words):
            fn()
    assert s2.run(_ids) == before
    C = mg.matmul(A, B6f)
    assert float((C.gather() - _reference(8, 6, 4)).abs().max()) <= tolerance("float32", 6)


def test_a_matmul_that_cannot_fit_says_so_with_what_would(s2):
    budget = s2.devices[0].total_memory
    n = int(budget**0.5) + 4096  # a shard of C alone is larger than a device
    before = s2.run(_ids)
    # handles that only describe inputs (never made on the ranks): the refusal must come first
    A = mg.DistTensor(s2, "virtual-a", (n, n), "float32", mg.Shard(0))
    B = mg.DistTensor(s2, "virtual-b", (n, n), "float32", mg.Shard(0))
    with pytest.raises(MgpuError, match=r"no matmul strategy fits: .* use at least \d+ devices"):
        mg.matmul(A, B)
    with pytest.raises(MgpuError, match="no matmul strategy fits"):
        mg.matmul(A, B, "ring")
    assert s2.run(_ids) == before
    plan = mg.plan_matmul(((n, n), (n, n)), 2, "float32", device_memory=budget)
    assert plan.strategy is None and "no matmul strategy fits" in repr(plan)


@pytest.mark.slow
def test_naive_concat_runs_out_of_memory_where_mg_matmul_fits(own_session):
    """The motivating case, scaled to seconds: C = A @ B with A 8192x64, B 64x8192 (C: 256 MiB).

    Budget 300 MiB of tensors per device. The naive recipe holds C/2 + C/2 received (256 MiB, fits)
    and then needs the concatenated C (256 MiB more) on rank 0; mg.matmul needs C/2 = 128 MiB
    (+ 2 MiB of inputs) per rank.
    """
    m = k_n = 8192
    k = 64
    with own_session(2, mem_per_device="300MiB") as s:
        A = mg.randn(m, k, placement=mg.Shard(0), seed=1)
        Br = mg.randn(k, k_n, placement=mg.Replicate(), seed=2)
        with pytest.raises(DeviceOutOfMemoryError, match="rank 0 ran out of device memory") as info:
            s.run(matmul_baselines.naive_concat, A.handle_id, Br.handle_id)
        assert 0 in info.value.ranks
        assert "256.0 MiB" in str(info.value)  # the concatenated C
        del Br
        B = mg.randn(k, k_n, placement=mg.Shard(1), seed=2)
        C = mg.matmul(A, B)
        assert C.report.strategy == C.plan.strategy
        assert max(C.report.peak_bytes) < 0.75 * m * k_n * 4  # well under the full C rank 0 could not hold
        assert mg.tensors.sharded_matmul.max_error(C, 1, 2) <= tolerance("float32", k)


def test_mgpu_matmul_magic(s4, capsys):
    from ipshell import shell

    ip = shell()
    r = ip.run_cell("%mgpu_matmul 96 64 80 --strategy summa --check --gather")
    assert r.success, r.error_in_exec
    out = capsys.readouterr().out
    assert "* summa" in out and "B(2x2)" in out and "matmul report: summa" in out
    assert "check against torch.mm: max abs error" in out and ": ok" in out
    assert torch.allclose(ip.user_ns["_mgpu_C"], _reference(96, 64, 80, seeds=(0, 1)), atol=tolerance("float32", 64))
    assert ip.run_cell("%mgpu_matmul 50 --dtype float64 --check").success
    assert ": ok" in capsys.readouterr().out
    for bad, words in [
        ("%mgpu_matmul 0", "at least 1"),
        ("%mgpu_matmul 8 --strategy nope", "unknown matmul strategy"),
        ("%mgpu_matmul 8 9", "M K N"),
        ("%mgpu_matmul 8 --grid 3x3", "not rows x cols"),
    ]:
        r = ip.run_cell(bad)
        assert not r.success and words in str(r.error_in_exec), (bad, r.error_in_exec)
    del ip.user_ns["_mgpu_C"]
