"""mg.load / mg.save / mg.from_* and mg.map with real engines, checked against one process."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jupyter_mgpu as mg
from jupyter_mgpu.errors import MgpuError, RankError

pytestmark = pytest.mark.cluster

ROWS, DIM = 1001, 24


def _shard_ids():
    from jupyter_mgpu.engine.shards import shard_store as store

    return store.ids()


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((ROWS, DIM), dtype=np.float32)
    b = rng.standard_normal((ROWS, DIM), dtype=np.float32)
    np.save(d / "a.npy", a)
    np.save(d / "b.npy", b)
    return d, a, b


def no_leaks(s, before):
    assert s.run(_shard_ids) == before


@pytest.mark.parametrize("n", [2, 4])
def test_cosine_similarity_of_loaded_pairs_equals_one_process(session_of, pairs, n):
    s = session_of(n)
    d, a, b = pairs
    before = s.run(_shard_ids)
    A, B = mg.load(d / "a.npy"), mg.load(d / "b.npy", placement=mg.Shard(0))
    assert A.shape == (ROWS, DIM) and A.dtype_name == "float32"
    sims = mg.map(F.cosine_similarity, A, B, dim=1)
    assert sims.shape == (ROWS,) and sims.placement == mg.Shard(0)
    ref = F.cosine_similarity(torch.from_numpy(a), torch.from_numpy(b), dim=1)
    torch.testing.assert_close(sims.gather(), ref, rtol=1e-5, atol=1e-6)
    del A, B, sims
    mg.tensors.handles.flush_frees(s)
    no_leaks(s, before)


def test_inputs_in_other_placements_are_resharded_and_replicas_aligned(s4, pairs):
    d, a, b = pairs
    ref = F.cosine_similarity(torch.from_numpy(a), torch.from_numpy(b), dim=1)
    A = mg.load(d / "a.npy")
    for placement in (mg.Shard(1), mg.Replicate(), mg.Block2D()):
        B = mg.load(d / "b.npy", placement=placement)
        torch.testing.assert_close(mg.map(F.cosine_similarity, A, B, dim=1).gather(), ref, rtol=1e-5, atol=1e-6)
    # a replicated input of another length reaches every rank whole: project each row on a vector
    v = mg.scatter(torch.arange(DIM, dtype=torch.float32), placement=mg.Replicate())
    got = mg.map(torch.mv, A, v).gather()
    torch.testing.assert_close(got, torch.from_numpy(a) @ torch.arange(DIM, dtype=torch.float32))
    # sharding along dim 1: per-column sums
    C = mg.load(d / "a.npy", placement=mg.Shard(1))
    torch.testing.assert_close(mg.map(torch.sum, C, dim=0).gather(), torch.from_numpy(a).sum(0), rtol=1e-5, atol=1e-4)


def test_reductions_match_one_process(s4, pairs):
    d, a, _ = pairs
    A = mg.load(d / "a.npy")
    ta = torch.from_numpy(a)
    assert mg.map(lambda x: x.sum().item(), A, reduce="sum") == pytest.approx(ta.sum().item(), rel=1e-4)
    assert mg.map(torch.mean, A, reduce="mean").item() == pytest.approx(ta.mean().item(), rel=1e-4, abs=1e-6)
    assert mg.map(lambda x: x.shape[0], A) == [251, 250, 250, 250]
    kept = mg.map(lambda x: x[x[:, 0] > 0], A, reduce="concat")
    torch.testing.assert_close(kept, ta[ta[:, 0] > 0])
    with pytest.raises(MgpuError, match="do not form one evenly split tensor; pass reduce='concat'"):
        mg.map(lambda x: x[x[:, 0] > 0], A)


def test_notebook_functions_with_globals_and_keyword_arguments(s2, pairs):
    d, a, _ = pairs
    ns = {"__name__": "__main__"}
    exec(
        "import numpy\nOFFSET = 7.0\ndef shifted(x, scale=1.0):\n"
        "    return x * scale + OFFSET + float(numpy.float32(0))\n",
        ns,
    )
    A = mg.load(d / "a.npy")
    got = mg.map(ns["shifted"], A, scale=2.0).gather()
    torch.testing.assert_close(got, torch.from_numpy(a) * 2 + 7)


def local_module_function(x):
    """Defined in a test module the engines may not import: mg.map sends it by value then."""
    return x + 1


def test_functions_of_modules_the_ranks_cannot_import_still_run(s2, pairs):
    d, a, _ = pairs
    got = mg.map(local_module_function, mg.load(d / "a.npy")).gather()
    torch.testing.assert_close(got, torch.from_numpy(a) + 1)


def test_a_function_raising_on_one_rank_names_the_rank_and_rows(s4, pairs):
    d, _, _ = pairs
    before = s4.run(_shard_ids)
    A = mg.load(d / "a.npy")
    ns = {"__name__": "__main__"}
    exec("def picky(x):\n    if x.shape[0] == 251:\n        raise ValueError('odd shard')\n    return x * 2\n", ns)
    with pytest.raises(RankError) as err:
        mg.map(ns["picky"], A)
    msg = str(err.value)
    assert msg.startswith("picky raised ValueError on rank 0 (rows 0–250): odd shard at line 3 of picky")
    assert err.value.ranks == [0]
    A.free()  # (the traceback kept in err still refers to A, so del would not free it yet)
    no_leaks(s4, before)  # the failed call's partial results were freed on every rank
    assert mg.map(lambda x: x.shape[0], mg.arange(8)) == [2, 2, 2, 2]  # the pool is still usable


def test_inputs_of_different_lengths_and_other_bad_input(s4):
    a, b = mg.zeros(10, 3), mg.zeros(9, 3)
    with pytest.raises(MgpuError, match="same length along dim 0: argument 1 has 10 rows but argument 2 has 9$"):
        mg.map(torch.add, a, b)
    with pytest.raises(MgpuError, match="argument 2 of mg.map is a Tensor, not a DistTensor"):
        mg.map(torch.add, a, torch.zeros(10, 3))
    with pytest.raises(MgpuError, match="reduce must be None, 'sum', 'mean' or 'concat'"):
        mg.map(torch.sum, a, reduce="max")
    with pytest.raises(MgpuError, match="every input of mg.map is replicated"):
        mg.map(torch.sum, mg.zeros(4, placement=mg.Replicate()))
    with pytest.raises(MgpuError, match="cannot be sent to the ranks"):
        import threading

        lock = threading.Lock()
        mg.map(lambda x: lock.locked(), a)


@pytest.mark.parametrize("placement", [mg.Shard(0), mg.Shard(1), mg.Replicate()])
def test_save_and_load_round_trip_in_every_format(s4, tmp_path, placement):
    x = mg.randn(37, 6, placement=placement, seed=3)
    full = x.gather().clone()
    for name in ("x.npy", "x.pt", "x.safetensors"):
        path = mg.save(x, tmp_path / name)
        back = mg.load(path, placement=mg.Shard(0))
        assert torch.equal(back.gather(), full), name
    assert np.array_equal(np.load(tmp_path / "x.npy"), full.numpy())
    torch.save({"w": full, "meta": torch.zeros(1)}, tmp_path / "d.pt")
    assert torch.equal(mg.load(tmp_path / "d.pt", key="w", placement=mg.Shard(1)).gather(), full)


def _reset_peak():
    from jupyter_mgpu.engine.records import telemetry

    telemetry.reset_peak()
    return telemetry._proc_status()["VmRSS"]


def _peak():
    from jupyter_mgpu.engine.records import telemetry

    return telemetry._proc_status()["VmHWM"]


def test_each_rank_reads_only_its_rows_of_a_npy_file(s4, tmp_path):
    """A 128 MiB file: each rank's peak resident memory grows by about its 32 MiB share, never the file."""
    rows, cols = 4 * 2048, 4096
    arr = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float32, shape=(rows, cols))
    arr[:] = 1.0
    arr.flush()
    del arr
    file_bytes = rows * cols * 4
    base = s4.run(_reset_peak)
    t = mg.load(tmp_path / "big.npy")
    grew = [p - b for p, b in zip(s4.run(_peak), base)]
    assert t.bytes_per_rank == [file_bytes // 4] * 4
    assert all(g < file_bytes * 0.75 for g in grew), grew  # the shard copy + its mapped pages, not 128 MiB
    assert mg.map(lambda x: float(x.sum()), t, reduce="sum") == rows * cols
    t.free()


def test_from_numpy_and_from_pandas(s2):
    import pandas as pd

    emb = np.arange(60, dtype=np.float32).reshape(10, 6)
    df = pd.DataFrame({"a": list(emb), "b": list(emb * 2), "label": np.arange(10)})
    t = mg.from_pandas(df, columns=["a", "b"])
    assert t.shape == (10, 2, 6) and t.dtype_name == "float32"
    assert torch.equal(t.gather()[:, 1], torch.from_numpy(emb * 2))
    assert torch.equal(mg.from_pandas(df["a"]).gather(), torch.from_numpy(emb))
    assert mg.from_pandas(df[["label"]]).shape == (10, 1)
    assert torch.equal(mg.from_numpy(emb, placement=mg.Shard(1)).gather(), torch.from_numpy(emb))
