"""shard_loader and mgpu.log without engines: the sampler's coverage and order, the metrics files and reader."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, DistributedSampler

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import training
from jupyter_mgpu.monitoring.metrics_log import MetricRecords, MetricsReader


@pytest.fixture
def as_rank(tmp_path):
    """Make this process look like rank ``r`` of ``p`` (a real EngineState, no process group)."""
    saved = rank_state.STATE

    def set_rank(r: int, p: int):
        rank_state.STATE = rank_state.EngineState(
            cluster_id="unit",
            rundir=str(tmp_path),
            rank=r,
            world_size=p,
            device_kind="cpu",
            device_index=r,
            backend="gloo",
            budget_bytes=2**30,
            timeout=5.0,
            threads=1,
            device=torch.device("cpu"),
        )
        return rank_state.STATE

    yield set_rank
    rank_state.STATE = saved
    training._log_file, training._log_path, training._step = None, None, 0


def rank_batches(as_rank, data, p, batch_size, epoch=0, **kw):
    out = []
    for r in range(p):
        as_rank(r, p)
        loader = training.shard_loader(data, batch_size, **kw)
        loader.set_epoch(epoch)
        out.append([b[1].tolist() for b in loader])
    return out


@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("n,batch", [(1, 4), (7, 2), (64, 8), (1001, 32), (10, 1)])
def test_every_sample_exactly_once_per_epoch_with_equal_step_counts(as_rank, p, n, batch):
    data = (torch.randn(n, 3), torch.arange(n))
    for epoch in (0, 1):
        per_rank = rank_batches(as_rank, data, p, batch, epoch=epoch, seed=5)
        assert len({len(b) for b in per_rank}) == 1, "ranks must take the same number of steps"
        seen = [i for batches in per_rank for b in batches for i in b]
        assert sorted(seen) == list(range(n))


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_the_global_order_does_not_depend_on_the_world_size(as_rank, p):
    n, batch = 97, 4
    order = training.ShardSampler(n, 0, 1, shuffle=True, seed=11).order(3)
    per_rank = rank_batches(as_rank, (torch.zeros(n), torch.arange(n)), p, batch, epoch=3, seed=11)
    for k in range(len(per_rank[0])):
        step = sorted(i for r in range(p) for i in per_rank[r][k])
        assert step == sorted(order[k * batch * p : (k + 1) * batch * p])
    assert order != training.ShardSampler(n, 0, 1, shuffle=True, seed=11).order(4)  # epochs differ


def test_ranks_take_what_distributed_sampler_gives_them_when_it_needs_no_padding():
    for r in range(4):
        ours = training.ShardSampler(40, r, 4, shuffle=True, seed=2)
        ref = DistributedSampler(range(40), num_replicas=4, rank=r, shuffle=True, seed=2)
        ref.set_epoch(1)
        assert ours.indices(1) == list(ref)


def test_without_shuffle_the_order_is_the_dataset_order(as_rank):
    per_rank = rank_batches(as_rank, (torch.zeros(9), torch.arange(9)), 2, 2, shuffle=False)
    assert per_rank == [[[0, 2], [4, 6], [8]], [[1, 3], [5, 7], []]]


def test_each_full_pass_moves_to_the_next_epoch(as_rank):
    as_rank(0, 1)
    loader = training.shard_loader((torch.arange(50),), 50, seed=0)
    first = next(iter(loader))[0].tolist()
    second = next(iter(loader))[0].tolist()  # the first pass was not finished: still epoch 0
    assert first == second
    list(loader)
    assert next(iter(loader))[0].tolist() != first


def test_drop_last_keeps_only_full_global_batches(as_rank):
    per_rank = rank_batches(as_rank, (torch.zeros(10), torch.arange(10)), 2, 3, drop_last=True)
    assert [len(b) for b in per_rank] == [1, 1] and all(len(b[0]) == 3 for b in per_rank)


class Pairs(Dataset):
    def __len__(self):
        return 11

    def __getitem__(self, i):
        return {"x": torch.full((2,), float(i)), "y": i}


def test_map_style_datasets_and_numpy_arrays_are_batched(as_rank):
    as_rank(1, 3)
    batches = list(training.shard_loader(Pairs(), 2, shuffle=False))
    assert [b["y"].tolist() for b in batches] == [[1, 4], [7, 10]]
    assert batches[0]["x"].shape == (2, 2)
    x = np.arange(22, dtype=np.float32).reshape(11, 2)
    got = list(training.shard_loader((x, np.arange(11)), 2, shuffle=False))
    assert got[0][0].dtype == torch.float32 and got[0][1].tolist() == [1, 4]


def test_bad_loader_input_gets_one_sentence(as_rank):
    as_rank(0, 2)
    with pytest.raises(ValueError, match="batch_size must be a positive whole number"):
        training.shard_loader((torch.zeros(4),), 0)
    with pytest.raises(ValueError, match="differ in length"):
        training.shard_loader((torch.zeros(4), torch.zeros(5)), 2)
    with pytest.raises(TypeError, match="needs a dataset with a length"):
        training.shard_loader(iter(range(3)), 2)


def test_log_appends_json_lines_the_reader_follows(as_rank, tmp_path):
    as_rank(1, 2)
    reader = MetricsReader(str(tmp_path))
    assert reader.poll() == 0 and reader.records() == []
    training.log(loss=torch.tensor(2.5), accuracy=np.float32(0.5))
    training.log(loss=1.5)
    assert reader.poll() == 2
    recs = reader.records()
    assert [(r["rank"], r["step"], r["loss"]) for r in recs] == [(1, 1, 2.5), (1, 2, 1.5)]
    assert recs[0]["accuracy"] == 0.5 and "accuracy" not in recs[1]
    path = training.metrics_path(str(tmp_path), 1)
    assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
    with open(path, "a") as f:  # a line still being written is not read half
        f.write(json.dumps({"rank": 1, "step": 3, "time": 0.0, "loss": 0.5})[:10])
    assert reader.poll() == 0
    with open(path, "a") as f:
        f.write(json.dumps({"rank": 1, "step": 3, "time": 0.0, "loss": 0.5})[10:] + "\n")
    assert reader.poll() == 1
    training.reset_metrics()
    reader.poll()
    assert reader.records() == []
    training.log(loss=9.0)
    reader.poll()
    assert [r["step"] for r in reader.records()] == [1]


def test_log_rejects_what_is_not_a_number(as_rank):
    as_rank(0, 1)
    with pytest.raises(ValueError, match="needs at least one metric"):
        training.log()
    with pytest.raises(ValueError, match="several elements"):
        training.log(loss=torch.ones(3))
    with pytest.raises(ValueError, match="takes numbers or short strings"):
        training.log(loss=[1, 2])


def test_records_average_over_ranks_per_step_and_make_a_dataframe():
    recs = MetricRecords(
        [
            {"rank": 0, "step": 1, "time": 1.0, "loss": 1.0},
            {"rank": 1, "step": 1, "time": 1.1, "loss": 3.0, "accuracy": 0.5},
            {"rank": 0, "step": 2, "time": 2.0, "loss": 0.5, "tag": "x"},
        ]
    )
    assert recs.names() == ["loss", "accuracy"]
    assert recs.mean("loss") == [(1, 2.0), (2, 0.5)]
    df = recs.df
    assert list(df.columns) == ["rank", "step", "time", "loss", "accuracy", "tag"] and len(df) == 3
