"""Training inside %%mgpu cells with real engines: shard_loader, DDP, mgpu.log and the live metrics plot."""

from __future__ import annotations

import ast
import time

import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.errors import RankError
from jupyter_mgpu.widgets.live_figure import MIME

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_shard_loader_covers_every_sample_once_per_epoch(session_of, n):
    s = session_of(n)
    out = s.run_cell(
        "ds = (torch.arange(103).float().unsqueeze(1), torch.arange(103))\n"
        "loader = mgpu.shard_loader(ds, batch_size=5, seed=1)\n"
        "epochs = [[y.tolist() for x, y in loader] for _ in range(2)]\n"
        "(len(loader), epochs)",
        stream=False,
    )
    per_rank = [ast.literal_eval(v) for v in out]
    assert len({steps for steps, _ in per_rank}) == 1
    for e in range(2):
        seen = [i for _, epochs in per_rank for batch in epochs[e] for i in batch]
        assert sorted(seen) == list(range(103))
        assert all(len(epochs[e]) == per_rank[0][0] for _, epochs in per_rank)
    assert per_rank[0][1][0] != per_rank[0][1][1]  # each pass is a new epoch order


DDP_CELL = """
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(100 + rank)                      # different on every rank: DDP must broadcast rank 0's
model = DDP(torch.nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
g = torch.Generator().manual_seed(0)
X, Y = torch.randn(96, 8, generator=g), torch.randint(0, 3, (96,), generator=g)
loader = mgpu.shard_loader((X, Y), batch_size=24 // world_size, seed=4)
for step, (x, y) in enumerate(loader):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    mgpu.log(loss=loss)
[p.detach().flatten().tolist() for p in model.module.parameters()]
"""


def _single_process_reference(world_size: int) -> list[list[float]]:
    """The same training on one process: each step's global batch is what the ranks shared."""
    from torch.utils.data import DistributedSampler

    torch.manual_seed(100)
    model = torch.nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(96, 8, generator=g), torch.randint(0, 3, (96,), generator=g)
    per = 24 // world_size
    order = list(DistributedSampler(range(96), num_replicas=1, rank=0, shuffle=True, seed=4))
    for k in range(96 // 24):
        idx = torch.tensor(order[k * 24 : (k + 1) * 24])
        # ranks hold interleaved positions; with equal per-rank batches the mean of means is the mean
        assert len(idx) == per * world_size
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X[idx]), Y[idx]).backward()
        opt.step()
    return [p.detach().flatten().tolist() for p in model.parameters()]


@pytest.mark.parametrize("n", [2, 4])
def test_ddp_keeps_parameters_identical_on_every_rank_and_equal_to_one_process(session_of, n):
    s = session_of(n)
    mg.clear_metrics(s)
    params = [ast.literal_eval(v) for v in s.run_cell(DDP_CELL, stream=False)]
    assert all(p == params[0] for p in params[1:]), "parameters differ between ranks after DDP steps"
    ref = _single_process_reference(n)
    for got, want in zip(params[0], ref):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    recs = mg.metrics(s)
    assert sorted({r["rank"] for r in recs}) == list(range(n))
    assert [r["step"] for r in recs if r["rank"] == 0] == [1, 2, 3, 4]
    mg.clear_metrics(s)
    assert mg.metrics(s) == []


LOG_CELL = """
import time
for i in range(40):
    mgpu.log(loss=1.0 / (i + 1) + rank, accuracy=i / 40)
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_metrics_and_the_live_plot_update_while_the_cell_runs(s2):
    mg.clear_metrics(s2)
    plot = mg.metrics_plot(interval=0.1)
    try:
        pending = s2.run_cell(LOG_CELL, block=False, stream=False)
        seen_during = None
        deadline = time.monotonic() + 30
        while not pending.ready() and time.monotonic() < deadline:
            time.sleep(0.2)
            recs = mg.metrics()
            fig = plot.figures.get("loss")
            if recs and fig is not None and len(fig.data[0].x) and not pending.ready():
                seen_during = (len(recs), len(fig.data[0].x), len(fig.data[-1].x))
                break
        assert seen_during is not None, "no metrics reached the controller while the cell was running"
        assert seen_during[0] < 80
        pending.get(timeout=30)
        time.sleep(0.4)
        fig = plot.figures["loss"]
        assert list(fig.data[0].x) == list(range(1, 41)) and list(fig.data[1].x) == list(range(1, 41))
        assert fig.data[0].line.color == "#1f77b4" and fig.data[1].line.color == "#ff7f0e"
        # the mean over ranks: rank 0 logs 1/(i+1), rank 1 logs 1/(i+1) + 1
        assert fig.data[-1].y[0] == pytest.approx(1.5) and fig.data[-1].y[-1] == pytest.approx(1 / 40 + 0.5)
        assert set(plot.figures) == {"loss", "accuracy"}
        assert plot.running
    finally:
        plot.stop()
    assert not plot.running
    mg.clear_metrics(s2)


def test_the_plot_header_follows_clear_metrics_and_stop_draws_the_last_records(s2):
    mg.clear_metrics(s2)
    plot = mg.metrics_plot(interval=60)  # its thread never ticks here: only refresh() and stop() draw
    try:
        s2.run_cell("for i in range(5): mgpu.log(loss=float(i))", stream=False)
        plot.refresh()
        assert plot.status.value == "10 records, last step 5"
        mg.clear_metrics(s2)
        plot.refresh()
        assert plot.status.value.startswith("<i>no records")  # not the count of records it no longer draws
        s2.run_cell("for i in range(3): mgpu.log(loss=float(i))", stream=False)
    finally:
        plot.stop()  # draws what was logged since the last refresh, then stops
    assert plot.status.value == "6 records, last step 3; stopped following the ranks"
    assert list(plot.figures["loss"].data[0].x) == [1, 2, 3]
    # what every view is drawn from: the whole figure as it is now
    spec = plot.views["loss"].outputs[0]["data"][MIME]
    assert [t["x"] for t in spec["data"]] == [[1, 2, 3]] * 3, spec["data"]
    assert spec["layout"]["title"]["text"] == "loss", spec["layout"]
    sent = plot.views["loss"].outputs
    plot.refresh()  # nothing new on the ranks: nothing sent again
    assert plot.views["loss"].outputs is sent
    mg.clear_metrics(s2)


@pytest.mark.slow
def test_the_live_plot_stops_with_its_session(own_session):
    with own_session(1):
        plot = mg.metrics_plot()
        assert plot.running
    deadline = time.monotonic() + 5
    while plot.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not plot.running


def test_bad_log_and_loader_calls_name_the_rank(s2):
    with pytest.raises(RankError, match=r"ValueError on ranks 0, 1: mgpu.log needs at least one metric"):
        s2.run_cell("mgpu.log()", stream=False)
    with pytest.raises(RankError, match=r"ValueError on ranks 0, 1: batch_size must be a positive whole number"):
        s2.run_cell("mgpu.shard_loader(torch.zeros(4), batch_size=0)", stream=False)
