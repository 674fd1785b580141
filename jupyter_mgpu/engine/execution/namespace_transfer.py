"""Rank side of ``%mgpu_push`` and ``%mgpu_pull``: notebook values put into, and read from, this
rank's namespace (the one ``%%mgpu`` cells run in) by name."""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.engine.state import user_ns  # the namespace these functions read and write


def put(values: dict[str, Any]) -> list[str]:
    """Bind ``values`` in this rank's namespace; the names that were already defined there."""
    ns = user_ns()
    replaced = sorted(name for name in values if name in ns)
    ns.update(values)
    return replaced


def get(name: str) -> Any:
    """The value ``name`` has in this rank's namespace; one sentence when the rank has no such name."""
    from jupyter_mgpu.engine import state as rank_state

    ns = user_ns()
    if name not in ns:
        raise NameError(f"name {name!r} is not defined on rank {rank_state.get().rank}")
    return ns[name]


def lacking(names: list[str], notebook_scalars: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Of the notebook names a cell reads: those this rank lacks (they travel with the cell), and
    those it defines with another value than the notebook's (``notebook_scalars``: the small ones)."""
    from jupyter_mgpu.engine.execution.rank_namespace import same_value

    ns = user_ns()
    missing = [name for name in names if name not in ns]
    differing = [name for name, value in notebook_scalars.items() if name in ns and not same_value(ns[name], value)]
    return missing, differing


def lend(ns: dict[str, Any], blobs: dict[str, bytes], put: dict[str, Any]) -> None:
    """Put the notebook's values a cell reads (pickled) into ``ns`` for the cell's run, noting them in
    ``put``. A name the rank defined meanwhile keeps the rank's value."""
    import pickle

    from jupyter_mgpu.engine import state as rank_state

    for name, blob in blobs.items():
        if name in ns:
            continue
        try:
            value = pickle.loads(blob)
        except Exception as exc:
            st = rank_state.STATE
            where = f" on rank {st.rank}" if st else ""
            raise NameError(f"the notebook's {name!r} could not be loaded{where}: {exc}") from None
        ns[name] = put[name] = value


def take_back(ns: dict[str, Any], put: dict[str, Any]) -> None:
    """Remove what :func:`lend` put, unless the cell bound the name anew."""
    for name, value in put.items():
        if ns.get(name, put) is value:
            del ns[name]


def names() -> list[str]:
    """The names of the values this rank's namespace holds, modules left out (a restarted rank's missing
    ones are said from these; an import is run again, a value is what was lost)."""
    import types

    return sorted(n for n, v in user_ns().items() if not n.startswith("_") and not isinstance(v, types.ModuleType))
