"""Copies by address (process_vm_readv/writev) of strided views, tried on this very process."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.tensors import process_copy


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), world=st.integers(1, 5), dim=st.integers(0, 1))
def test_every_shard_of_a_matrix_goes_there_and_back_bit_exact(rows, cols, world, dim):
    x = torch.randn(rows, cols)
    me = os.getpid()
    for info in pl.shard_table((rows, cols), pl.Shard(dim), world):
        view = x[info.index]
        shard = torch.full(tuple(info.shape), float("nan"))
        process_copy.write([(me, shard.data_ptr(), view)])
        assert torch.equal(shard, view)
        back = torch.zeros_like(x)
        process_copy.read([(me, shard.data_ptr(), back[info.index])])
        assert torch.equal(back[info.index], view)


def test_pieces_cover_the_stretches_in_order_within_the_limits(monkeypatch):
    monkeypatch.setattr(process_copy, "IOV_MAX", 3)
    stretches = [(1000 * i, 7) for i in range(10)] + [(50_000, 40)]
    pieces = process_copy._pieces(stretches, remote=5_000_000, piece=16)
    flat = [(a, n) for local, _, _ in pieces for a, n in local]
    rebuilt = []  # consecutive sub-stretches of one stretch join up again
    for a, n in flat:
        if rebuilt and rebuilt[-1][0] + rebuilt[-1][1] == a:
            rebuilt[-1] = (rebuilt[-1][0], rebuilt[-1][1] + n)
        else:
            rebuilt.append((a, n))
    assert rebuilt == stretches
    assert all(len(local) <= 3 and n <= 16 and n == sum(k for _, k in local) for local, _, n in pieces)
    starts = [r for _, r, _ in pieces]
    assert starts[0] == 5_000_000 and all(b - a == n for a, b, (_, _, n) in zip(starts, starts[1:], pieces))


def test_a_huge_number_of_tiny_stretches_is_left_to_the_shared_path():
    x = torch.zeros(process_copy.MAX_SEGMENTS + 1, 2)
    assert not process_copy.direct_ok(x[:, :1]) and process_copy.segments(x[:, :1]) is None
    assert process_copy.direct_ok(x[:, :2]) and process_copy.direct_ok(x[:10, :1])


def test_a_bad_address_is_an_error_not_a_crash():
    with pytest.raises(OSError, match="process"):
        process_copy.write([(os.getpid(), 8, torch.ones(1000))])
