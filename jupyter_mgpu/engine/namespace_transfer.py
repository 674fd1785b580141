"""Rank side of ``%mgpu_push`` and ``%mgpu_pull``: notebook values put into, and read from, this
rank's namespace (the one ``%%mgpu`` cells run in) by name."""

from __future__ import annotations

import sys
from typing import Any


def _user_ns() -> dict[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__  # type: ignore[no-any-return]


def put(values: dict[str, Any]) -> list[str]:
    """Bind ``values`` in this rank's namespace; the names that were already defined there."""
    ns = _user_ns()
    replaced = sorted(name for name in values if name in ns)
    ns.update(values)
    return replaced


def get(name: str) -> Any:
    """The value ``name`` has in this rank's namespace; one sentence when the rank has no such name."""
    from jupyter_mgpu.engine import state as rank_state

    ns = _user_ns()
    if name not in ns:
        raise NameError(f"name {name!r} is not defined on rank {rank_state.get().rank}")
    return ns[name]
