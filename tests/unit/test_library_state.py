"""accelerate's and Lightning's process-wide state around a run (``engine/program/library_state.py``): saved
and emptied as a new process has it, the cells' put back after, and a library the run loaded first emptied."""

from __future__ import annotations

import accelerate.state as acc
import pytest
from lightning_utilities.core import rank_zero

from jupyter_mgpu.engine.program import library_state as ls

CLASSES = (acc.PartialState, acc.AcceleratorState, acc.GradientState)
RANK_KEYS = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


@pytest.fixture(autouse=True)
def _process_state(monkeypatch):
    """This process's accelerate singletons and Lightning rank as before the test, whatever it did."""
    shared = [(cls, dict(cls._shared_state)) for cls in CLASSES]
    had_rank, rank = "rank" in vars(rank_zero.rank_zero_only), vars(rank_zero.rank_zero_only).get("rank")
    for key in RANK_KEYS:
        monkeypatch.delenv(key, raising=False)
    try:
        yield
    finally:
        for cls, state in shared:
            cls._shared_state.clear()
            cls._shared_state.update(state)
        vars(rank_zero.rank_zero_only).pop("rank", None)
        if had_rank:
            rank_zero.rank_zero_only.rank = rank


def _empty_accelerate() -> None:
    for cls in CLASSES:
        cls._shared_state.clear()


def test_both_libraries_count_as_loaded_once_imported():
    assert [type(lib) for lib in ls.SUPPORTED] == [ls.AccelerateState, ls.LightningState]
    assert all(lib.loaded() for lib in ls.SUPPORTED)

    class NotImported(ls.LibraryState):
        module = "jupyter_mgpu_no_such_library.state"

    assert not NotImported().loaded()
    for method, args in (("save", ()), ("reset", ()), ("restore", (None,))):
        with pytest.raises(NotImplementedError):
            getattr(NotImported(), method)(*args)


def test_a_run_gets_an_empty_accelerate_state_and_the_cells_get_theirs_back(monkeypatch):
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cpu")  # the run's state below stays off any GPU
    _empty_accelerate()
    cells = acc.PartialState(cpu=True)  # the cells made one: a process-wide singleton
    acc.GradientState()
    assert acc.PartialState()._cpu is True  # every later one is the cells', whatever it asks for
    cells_state = {cls: dict(cls._shared_state) for cls in CLASSES}

    saved = ls.save_and_reset()
    assert {type(lib) for lib, _ in saved} == {ls.AccelerateState, ls.LightningState}
    assert all(cls._shared_state == {} for cls in CLASSES)
    run = acc.PartialState()  # as in a new process: the run's state is built from its own arguments
    assert run._cpu is False and run.initialized and run.device.type == "cpu"

    ls.restore(saved)
    assert {cls: dict(cls._shared_state) for cls in CLASSES} == cells_state
    assert cells._cpu is True and acc.PartialState()._cpu is True
    assert all(acc.PartialState._shared_state[k] is v for k, v in cells_state[acc.PartialState].items())


def test_lightning_rank_is_taken_from_the_environment_as_its_import_does(monkeypatch):
    rank_zero.rank_zero_only.rank = 7  # what the cells' last strategy set
    monkeypatch.setenv("LOCAL_RANK", "2")
    saved = ls.save_and_reset()
    assert rank_zero.rank_zero_only.rank == 2
    ls.restore(saved)
    assert rank_zero.rank_zero_only.rank == 7

    monkeypatch.setenv("RANK", "5")  # RANK first, as Lightning's _get_rank reads them
    saved = ls.save_and_reset()
    assert rank_zero.rank_zero_only.rank == 5
    ls.restore(saved)
    assert rank_zero.rank_zero_only.rank == 7


def test_a_lightning_rank_the_cells_never_had_is_removed_again(monkeypatch):
    vars(rank_zero.rank_zero_only).pop("rank", None)
    saved = ls.save_and_reset()
    rank_zero.rank_zero_only.rank = 3  # the run's strategy set it
    ls.restore(saved)
    assert "rank" not in vars(rank_zero.rank_zero_only)


def test_without_a_rank_in_the_environment_lightning_keeps_its_rank():
    rank_zero.rank_zero_only.rank = 4
    saved = ls.save_and_reset()
    assert rank_zero.rank_zero_only.rank == 4
    ls.restore(saved)
    assert rank_zero.rank_zero_only.rank == 4


def test_state_of_a_library_the_run_loaded_first_is_emptied():
    _empty_accelerate()
    acc.PartialState(cpu=True)  # as if the run imported accelerate and made its state
    ls.restore([])  # the cells had no library loaded: nothing saved
    assert all(cls._shared_state == {} for cls in CLASSES)
