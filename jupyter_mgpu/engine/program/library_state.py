"""The process-wide state of the training libraries we support, emptied for each ``%mgpu_run``.

A library's modules stay loaded between runs (``engine/program/fresh_program.py`` says why), so what they
keep for the whole process would carry one program's choices into the next: accelerate's
``PartialState``, ``AcceleratorState`` and ``GradientState`` are process-wide singletons (a script that
made ``PartialState()`` in mode NO leaves every later ``PartialState(cpu=True)`` in mode NO), and
Lightning's ``rank_zero_only.rank`` is whatever the last strategy set. Each :class:`LibraryState`
saves that state, empties it as a new process has it, and puts the cells' back after the run. A
library that is not loaded has nothing to reset.
"""

from __future__ import annotations

import sys
from typing import Any


class LibraryState:
    """One library's process-wide state: ``save`` it, ``reset`` it to a new process's, ``restore`` it."""

    module = ""  # reset only once this module is loaded

    def loaded(self) -> bool:
        return self.module in sys.modules

    def save(self) -> Any:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def restore(self, saved: Any) -> None:
        raise NotImplementedError


class AccelerateState(LibraryState):
    """accelerate's shared-state singletons (``_shared_state`` dicts of each class)."""

    module = "accelerate.state"

    def _classes(self) -> list[Any]:
        state = sys.modules[self.module]
        return [
            getattr(state, name)
            for name in ("PartialState", "AcceleratorState", "GradientState")
            if hasattr(state, name)
        ]

    def save(self) -> Any:
        return [(cls, dict(cls._shared_state)) for cls in self._classes()]

    def reset(self) -> None:
        for cls in self._classes():
            cls._shared_state.clear()

    def restore(self, saved: Any) -> None:
        for cls, shared in saved:
            cls._shared_state.clear()
            cls._shared_state.update(shared)


class LightningState(LibraryState):
    """Lightning's ``rank_zero_only.rank`` (shared with lightning_utilities), as its import sets it
    from the environment."""

    module = "lightning_utilities.core.rank_zero"

    def _holders(self) -> list[Any]:
        names = (
            "lightning_utilities.core.rank_zero",
            "lightning.fabric.utilities.rank_zero",
            "pytorch_lightning.utilities.rank_zero",
        )
        return list(
            {id(fn): fn for fn in (getattr(sys.modules.get(n), "rank_zero_only", None) for n in names) if fn}.values()
        )

    def save(self) -> Any:
        return [(fn, fn.__dict__.get("rank")) for fn in self._holders()]

    def reset(self) -> None:
        import os

        for fn in self._holders():
            for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):  # Lightning's _get_rank
                if key in os.environ:
                    fn.rank = int(os.environ[key])
                    break

    def restore(self, saved: Any) -> None:
        for fn, rank in saved:
            if rank is None:
                fn.__dict__.pop("rank", None)
            else:
                fn.rank = rank


SUPPORTED: tuple[LibraryState, ...] = (AccelerateState(), LightningState())


def save_and_reset() -> list[tuple[LibraryState, Any]]:
    """Save then empty the state of every supported library that is loaded; what :func:`restore` takes."""
    saved = []
    for lib in SUPPORTED:
        if lib.loaded():
            try:
                saved.append((lib, lib.save()))
                lib.reset()
            except Exception:  # a version whose internals differ: left as it is
                pass
    return saved


def restore(saved: list[tuple[LibraryState, Any]]) -> None:
    """Give the cells back their libraries' state; one the run loaded first is emptied (the cells had none)."""
    had = {id(lib) for lib, _ in saved}
    for lib, state in saved:
        try:
            lib.restore(state)
        except Exception:
            pass
    for lib in SUPPORTED:
        if id(lib) not in had and lib.loaded():
            try:
                lib.reset()
            except Exception:
                pass
