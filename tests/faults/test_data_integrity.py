"""A tensor whose shard lived on a dead rank is never used for partial or stale data."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.errors import EngineDiedError, MgpuError

pytestmark = pytest.mark.cluster


@pytest.mark.slow
def test_shard_lost_on_a_dead_rank_and_gather_is_all_or_nothing(own_session):
    with own_session(3) as s:
        A = mg.randn(96, 64, placement=mg.Shard(0), seed=0)
        B = mg.randn(64, 32, placement=mg.Shard(1), seed=1)
        reference = A.gather().clone()
        out = torch.full((96, 64), -7.0)
        os.kill(s.cluster.engine_pids[2], signal.SIGKILL)
        deadline = time.monotonic() + 5
        while 2 not in s.cluster.exits() and time.monotonic() < deadline:
            time.sleep(0.02)
        for use in (
            lambda: A.gather(),
            lambda: A.gather(out=out),
            lambda: A.local(0),
            lambda: A.redistribute(mg.Replicate()),
            lambda: mg.matmul(A, B),
        ):
            with pytest.raises(MgpuError, match=r"^shard lost on rank 2 of tensor .*died \(killed by SIGKILL\)"):
                use()
        assert bool((out == -7.0).all()), "a failed gather wrote into out="
        s2 = mg.init(3, cpu=True, timeout=5, restart=True)
        try:
            with pytest.raises(MgpuError, match="belongs to a session that was shut down"):
                A.gather()
            again = mg.randn(96, 64, placement=mg.Shard(0), seed=0)
            assert torch.equal(again.gather(), reference)  # recreated, not recovered from stale copies
        finally:
            s2.shutdown()


def test_engine_killed_during_matmul(own_session):
    with own_session(3) as s:
        A = mg.randn(1536, 1536, placement=mg.Shard(0), seed=0)
        B = mg.randn(1536, 1536, placement=mg.Shard(0), seed=1)
        threading.Timer(0.3, lambda: os.kill(s.cluster.engine_pids[1], signal.SIGKILL)).start()
        start = time.monotonic()
        with pytest.raises(EngineDiedError, match="rank 1 died"):
            for _ in range(50):
                mg.matmul(A, B, strategy="ring")
        assert time.monotonic() - start < s.timeout + 10
