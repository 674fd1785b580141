"""The last failure's frames on a rank (``engine/shards/held_failure.py``), in this process: what they hold
is measured (tensors only they keep, not the namespace's), an out-of-memory failure's are let go even from
reference cycles, and a release gives them back; the error's words for it (``session/rank_errors.py``)."""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import pytest
import torch

from jupyter_mgpu.engine.shards import held_failure
from jupyter_mgpu.session.rank_errors import build_error, held_note

MIB = 1024**2


@pytest.fixture(autouse=True)
def nothing_kept():
    held_failure.keep(None)
    held_failure.settle()
    yield
    held_failure.keep(None)
    held_failure.settle()


def _failed(fn: Any, *args: Any) -> Any:
    try:
        fn(*args)
    except BaseException as exc:
        return exc.__traceback__
    raise AssertionError("it did not fail")


NAMESPACE_TENSOR = torch.zeros(MIB // 4)  # a module's: outlives any failure, never counted as held


def test_a_failure_holds_the_tensors_only_its_frames_keep():
    def inner(big: torch.Tensor) -> None:
        view = big[:10]  # a view of a storage counts once
        pair = [torch.zeros(MIB // 4), {"deep": (torch.zeros(MIB // 4),)}]  # noqa: F841 - held by the frame
        model = torch.nn.Linear(512, 512)  # noqa: F841 - parameters: 512*512*4 + 512*4 bytes
        shared = NAMESPACE_TENSOR  # noqa: F841
        raise ValueError(view.shape)

    def outer() -> None:
        inner(torch.zeros(2 * MIB // 4))

    tb = _failed(outer)
    expected = 2 * MIB + 2 * MIB + 512 * 512 * 4 + 512 * 4
    assert held_failure.measure(tb) == expected
    assert held_failure.keep(tb) == expected and held_failure.held_bytes() == expected
    assert held_failure.state() == "kept" and held_failure.traceback() is tb


def test_a_caught_error_kept_in_a_frame_holds_its_own_frames_too():
    refs: list[Any] = []

    def ran_out() -> None:
        a = torch.zeros(MIB // 4)
        refs.append(weakref.ref(a))
        raise MemoryError("out of memory")

    def rewrapped(keep_it: bool) -> None:
        try:
            ran_out()
        except MemoryError as exc:
            if keep_it:
                saved = exc  # noqa: F841 - a local outlives the except clause, and so do the error's frames
            raise ValueError("could not fit") from exc

    tb = _failed(rewrapped, True)
    assert held_failure.measure(tb) == MIB
    del tb
    tb = _failed(rewrapped, False)  # the chain itself dies with the error: only the kept frames count
    assert held_failure.measure(tb) == 0
    held_failure.keep(tb)
    del tb
    gc.collect()
    assert refs[1]() is None and held_failure.held_bytes() == 0


def test_an_out_of_memory_failure_lets_its_frames_go_at_once_whatever_holds_them():
    """IPython's traceback formatting leaves its frames in reference cycles, and a thread that read the
    main thread's stack may hold a frame a moment longer: their locals go all the same."""
    refs: list[Any] = []

    def ran_out() -> None:
        big = torch.zeros(16)
        refs.append(weakref.ref(big))
        cycle: list[Any] = []
        cycle.append((cycle, sys._getframe()))  # frame -> locals -> list -> frame
        raise MemoryError("out of memory")

    gc.disable()  # as when the collector has not run yet
    try:
        tb = _failed(ran_out)
        another_thread_s = tb.tb_next.tb_frame  # noqa: F841 - as the sampler's where holds one
        assert held_failure.keep(tb, out_of_memory=True) == 0
        assert refs[0]() is None
    finally:
        gc.enable()
    assert held_failure.state() == held_failure.OOM_LET_GO


def test_release_and_the_next_failure_let_the_kept_frames_go(monkeypatch):
    refs: list[Any] = []

    def failing() -> None:
        big = torch.zeros(MIB // 4)
        refs.append(weakref.ref(big))
        raise KeyError("x")

    assert held_failure.keep(_failed(failing)) == MIB
    sys.last_value = ValueError("shown by an excepthook")  # Python's own record holds frames too
    assert held_failure.release() == MIB  # no allocator shim here: the bytes measured
    assert refs[0]() is None and held_failure.held_bytes() == 0
    assert held_failure.state() == held_failure.RELEASED
    assert getattr(sys, "last_value", None) is None
    assert held_failure.release() == 0

    held_failure.keep(_failed(failing))
    held_failure.keep(_failed(lambda: 1 / 0))  # the next failure replaces it
    held_failure.settle()
    assert refs[1]() is None and held_failure.held_bytes() == 0


def test_the_error_says_what_each_rank_keeps():
    def report(rank: int, held: int) -> dict[str, Any]:
        return {"ok": False, "rank": rank, "ename": "ValueError", "evalue": "bad", "frames": [], "held_bytes": held}

    assert held_note({0: report(0, 0), 1: report(1, MIB - 1)}) == ""  # under a MiB: not worth a sentence
    assert held_note({0: report(0, 800_000_000)}) == (
        "rank 0 keeps 762.9 MiB in the failed call's frames for %mgpu_debug; %mgpu_debug --release frees them"
    )
    failures = {0: report(0, 4 * MIB), 1: report(1, 4 * MIB), 2: report(2, 8 * MIB)}
    text = str(build_error(failures))
    assert text.startswith("ValueError on ranks 0, 1, 2: bad")
    assert text.endswith(
        "; ranks 0, 1 keep 4.0 MiB each and rank 2 keeps 8.0 MiB in the failed call's frames for %mgpu_debug; "
        "%mgpu_debug --release frees them"
    )
