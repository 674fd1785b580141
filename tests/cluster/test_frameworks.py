"""Training frameworks, unchanged, in %%mgpu cells on the shared 2-rank session: accelerate's
``Accelerator()`` and Lightning's ``Trainer(strategy="ddp")`` find torchrun's environment and the
session's process group, and train to the losses one process gets (DDP's math: the mean of the
ranks' gradients); the session is usable afterwards."""

from __future__ import annotations

import ast
import time

import pytest
import torch
from ipshell import shell

pytestmark = pytest.mark.cluster

STEPS = 4
BATCH = 16  # per rank; one process takes the two ranks' batches together
N = 2 * STEPS * BATCH  # samples: one epoch of STEPS steps on 2 ranks


@pytest.fixture(scope="module")
def ip():
    return shell()


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(N, 8, generator=g), torch.randn(N, 1, generator=g)


def _single_process_losses(shards_of_step) -> list[float]:
    """One process doing what DDP does on 2 ranks: each rank's loss and gradient on its own shard,
    the gradients averaged, one SGD step; the loss reported is the mean of the ranks' losses."""
    x, y = _data()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        grads, step_losses = [], []
        for idx in shards_of_step(step):
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
            loss.backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            step_losses.append(loss.item())
        for p, *per_rank in zip(model.parameters(), *grads):
            p.grad = sum(per_rank) / len(per_rank)
        opt.step()
        losses.append(sum(step_losses) / len(step_losses))
    return losses


def _after_a_framework_the_session_still_works(s2, ip, capsys) -> None:
    assert s2.run(_all_reduce_of_ranks) == [3.0, 3.0]
    capsys.readouterr()
    ip.run_cell_magic("mgpu", "", "t = torch.tensor([10.0 * (rank + 1)])\ndist.all_reduce(t)\nprint('sum', t.item())")
    out = capsys.readouterr().out
    assert "[rank 0] sum 30.0" in out and "[rank 1] sum 30.0" in out


def _all_reduce_of_ranks() -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return t.item()


# accelerate as its docs write it; prepare() deals the loader's batches out in turn: step k gives
# rank 0 batch 2k and rank 1 batch 2k+1
ACCELERATE_CELL = f"""
import torch
from accelerate import Accelerator

accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
x, y = torch.randn({N}, 8, generator=g), torch.randn({N}, 1, generator=g)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size={BATCH})
model, opt, loader = accelerator.prepare(model, opt, loader)
acc_losses = []
for step, (xb, yb) in enumerate(loader):
    if step == {STEPS}:
        break
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    accelerator.backward(loss)
    opt.step()
    acc_losses.append(accelerator.gather(loss.detach()).mean().item())
print("accelerate", accelerator.distributed_type, accelerator.num_processes, accelerator.process_index)
"""


def test_accelerate_trains_to_the_single_process_losses(s2, ip, capsys):
    start = time.monotonic()
    capsys.readouterr()
    ip.run_cell_magic("mgpu", "", ACCELERATE_CELL)
    printed = capsys.readouterr().out
    assert "[rank 0] accelerate DistributedType.MULTI_CPU 2 0" in printed
    assert "[rank 1] accelerate DistributedType.MULTI_CPU 2 1" in printed
    ip.run_line_magic("mgpu_pull", "acc_losses")
    per_rank = ip.user_ns["acc_losses"]
    assert per_rank[0] == per_rank[1] and len(per_rank[0]) == STEPS

    def shards(k: int) -> list[range]:  # step k: batch 2k on rank 0, batch 2k+1 on rank 1
        return [range((2 * k + r) * BATCH, (2 * k + r + 1) * BATCH) for r in range(2)]

    assert per_rank[0] == pytest.approx(_single_process_losses(shards), abs=1e-5)
    alone = _single_process_losses(lambda k: shards(k)[:1])  # what rank 0 training by itself would see
    assert per_rank[0] != pytest.approx(alone, abs=1e-3)
    _after_a_framework_the_session_still_works(s2, ip, capsys)
    assert time.monotonic() - start < 30


# a LightningModule and Trainer as Lightning's docs write them; for training the Trainer gives the
# loader a shuffling DistributedSampler (seed 0): each rank takes its part of one permutation
LIGHTNING_CELL = f"""
import torch
import lightning as L

class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(self.all_gather(loss.detach()).mean().item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

torch.manual_seed(0)
module = Regression()
g = torch.Generator().manual_seed(1)
x, y = torch.randn({N}, 8, generator=g), torch.randn({N}, 1, generator=g)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size={BATCH})
trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_steps={STEPS}, enable_progress_bar=False,
                    logger=False, enable_checkpointing=False, enable_model_summary=False)
trainer.fit(module, loader)
print("lightning", type(trainer.strategy).__name__, type(trainer.strategy.cluster_environment).__name__,
      trainer.global_rank, trainer.world_size)
"""


def _rank_shard(k: int, r: int) -> list[int]:
    """Rank r's samples at step k (one epoch) under the DistributedSampler Lightning gives the loader."""
    from torch.utils.data import DistributedSampler

    mine = list(DistributedSampler(range(N), num_replicas=2, rank=r, shuffle=True, seed=0))
    return mine[k * BATCH : (k + 1) * BATCH]


def test_lightning_ddp_trainer_runs_unchanged_with_the_single_process_losses(s2, ip, capsys):
    start = time.monotonic()
    # an engine is a worker, as under torchrun: no interactive prompt for Lightning to refuse "ddp" on
    assert s2.run_cell("import sys\nhasattr(sys, 'ps1')", stream=False) == ["False", "False"]
    capsys.readouterr()
    s2.run_cell(LIGHTNING_CELL)
    printed = capsys.readouterr().out
    assert "[rank 0] lightning DDPStrategy TorchElasticEnvironment 0 2" in printed
    assert "[rank 1] lightning DDPStrategy TorchElasticEnvironment 1 2" in printed
    per_rank = [ast.literal_eval(v) for v in s2.run_cell("module.losses", stream=False)]
    assert per_rank[0] == per_rank[1] and len(per_rank[0]) == STEPS
    assert per_rank[0] == pytest.approx(
        _single_process_losses(lambda k: [_rank_shard(k, r) for r in range(2)]), abs=1e-5
    )
    alone = _single_process_losses(lambda k: [_rank_shard(k, 0)])
    assert per_rank[0] != pytest.approx(alone, abs=1e-3)
    _after_a_framework_the_session_still_works(s2, ip, capsys)
    assert time.monotonic() - start < 30
