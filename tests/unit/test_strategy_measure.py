"""strategies/measure.py without engines: the optimizer's state read from the state itself, the bytes a
collective's buffer counts, a tracker's columns."""

from __future__ import annotations

import torch
from torch import nn

from jupyter_mgpu.strategies import measure


def test_optimizer_state_bytes_is_adams_two_moments_and_step_counts() -> None:
    model = nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    assert measure.optimizer_state_bytes(opt) == 0  # nothing before the first step
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    n = sum(p.numel() for p in model.parameters())
    steps = sum(s["step"].nbytes for s in opt.state.values())
    assert measure.optimizer_state_bytes(opt) == 2 * n * 4 + steps


def test_optimizer_state_bytes_counts_a_shared_storage_once() -> None:
    p = nn.Parameter(torch.zeros(8))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    buf = torch.zeros(8)
    opt.state[p] = {"a": buf, "b": buf[2:], "c": 3.0}
    assert measure.optimizer_state_bytes(opt) == 32


def test_plain_sgd_keeps_no_state() -> None:
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    assert measure.optimizer_state_bytes(opt) == 0


def test_tracker_columns_split_the_categories() -> None:
    model = nn.Linear(16, 8)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    t = measure.tracker("phase", model, opt)
    with t:
        x = torch.randn(4, 16)
        t.register_inputs(x)
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()
    cols = t.columns()
    n = sum(p.numel() for p in model.parameters())
    assert cols["params"] == n * 4
    assert cols["inputs"] == x.nbytes
    assert n * 8 <= cols["optimizer"] <= n * 8 + 64
    assert t.total_peak() >= cols["params"] + cols["optimizer"]
