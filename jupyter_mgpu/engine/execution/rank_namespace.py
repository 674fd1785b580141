"""A notebook function sent to the ranks runs in the rank's own namespace, as ipyparallel runs one.

The rule, for a function defined in the notebook and called on a rank (``Session.run``, ``mg.map``,
``mg.collective``):

- its globals are the rank's namespace (what ``%%mgpu`` cells define there), so names it declares
  ``global`` are read and written there: ``global model; model = build()`` leaves ``model`` on the
  rank for the next cell or call, ``del`` removes it;
- a name it reads that the rank defines is the rank's — the rank holds the live state a cell or an
  earlier call left (a model being trained, a counter), and ipyparallel users expect exactly that;
- a name the rank lacks comes from the notebook: the values the function references travel with it
  (cloudpickle, as with Dask), and are in the rank's namespace only while the call runs — except
  names the function declares ``global``, whose notebook value seeds the rank's;
- a name defined on both sides with different values is named once (``take_notes`` → the
  controller's one line), so nobody wonders which one was used.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable, Iterator
from typing import Any

_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MISSING = object()
_notes: list[tuple[str, tuple[str, ...]]] = []


def take_notes() -> list[tuple[str, tuple[str, ...]]]:
    """The (function, names defined on both sides) noted since the last call, and forget them."""
    notes = list(_notes)
    _notes.clear()
    return notes


def both_sides_line(function: str, names: list[str], cell: bool = False) -> str:
    """The one line that says which value of a name defined in the notebook and on the ranks is used
    (by a notebook function, or with ``cell`` by a ``%%mgpu`` cell)."""
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    which = "values are" if len(names) > 1 else "value is"
    reader, fix = (
        (function, "%mgpu_push sends the notebook's")
        if cell
        else (f"{function}()", "pass a notebook value as an argument")
    )
    return (
        f"mgpu: {reader} reads {listed}, defined both in the notebook and on the ranks: the ranks' "
        f"{which} used (a name the ranks lack comes from the notebook; {fix})"
    )


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def declared_globals(fn: types.FunctionType) -> set[str]:
    """Names ``fn`` (or a function nested in it) assigns or deletes as globals: its ``global`` names."""
    return {ins.argval for code in _codes(fn.__code__) for ins in dis.get_instructions(code) if ins.opname in _STORES}


def same_value(a: Any, b: Any) -> bool:
    """Whether the rank's and the notebook's values of a name are the same thing (nothing to say)."""
    if a is b:
        return True
    if isinstance(a, types.ModuleType) and isinstance(b, types.ModuleType):
        return a.__name__ == b.__name__
    if isinstance(a, types.FunctionType) and isinstance(b, types.FunctionType):
        return a.__code__.co_code == b.__code__.co_code and a.__code__.co_names == b.__code__.co_names
    if type(a) is type(b) and isinstance(a, _SCALARS):
        return bool(a == b)
    return False


class RankBinding:
    """A notebook function (unpickled on this rank) and the notebook functions it references, rebound
    to the rank's namespace; what it brought from the notebook, and which names it declares global."""

    def __init__(self, fn: types.FunctionType, rank_ns: dict[str, Any]) -> None:
        self.rank_ns = rank_ns
        self.name = fn.__name__
        shipped = fn.__globals__  # cloudpickle's dict: the notebook names the function references
        self.travelled = {k: v for k, v in shipped.items() if not k.startswith("__")}
        self._rebound: dict[int, types.FunctionType] = {}
        self.function = self._rebind(fn, shipped)
        for value in self.travelled.values():
            if isinstance(value, types.FunctionType) and value.__globals__ is shipped:
                self._rebind(value, shipped)
        self.declared: set[str] = set()
        for rebound in self._rebound.values():
            self.declared |= declared_globals(rebound)
        # anything else made with the shipped globals (a notebook class's methods) still finds the rank's names
        for name, value in rank_ns.items():
            if not name.startswith("__"):
                shipped.setdefault(name, value)
        self._noted = False

    def _rebind(self, fn: types.FunctionType, shipped: dict[str, Any]) -> types.FunctionType:
        """``fn`` made anew with the rank's namespace as its globals (closures rebound likewise)."""
        done = self._rebound.get(id(fn))
        if done is not None:
            return done
        new = types.FunctionType(fn.__code__, self.rank_ns, fn.__name__, fn.__defaults__, fn.__closure__)
        self._rebound[id(fn)] = new
        new.__kwdefaults__ = fn.__kwdefaults__
        new.__qualname__ = fn.__qualname__
        new.__doc__ = fn.__doc__
        new.__dict__.update(fn.__dict__)
        new.__annotations__ = dict(getattr(fn, "__annotations__", {}) or {})
        for cell in fn.__closure__ or ():
            try:
                inner = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(inner, types.FunctionType) and inner.__globals__ is shipped:
                cell.cell_contents = self._rebind(inner, shipped)
        return new

    def enter(self) -> dict[str, Any]:
        """Put the notebook's values of names the rank lacks into its namespace; returns what was put."""
        put: dict[str, Any] = {}
        both = []
        for name, value in self.travelled.items():
            here = self.rank_ns.get(name, _MISSING)
            if here is _MISSING:
                value = self._rebound.get(id(value), value)
                self.rank_ns[name] = put[name] = value
            elif not same_value(here, value):
                both.append(name)
        if both and not self._noted:
            _notes.append((self.name, tuple(sorted(both))))
            self._noted = True
        return put

    def leave(self, put: dict[str, Any]) -> None:
        """Take back what :meth:`enter` put, unless the function declared it global or replaced it."""
        for name, value in put.items():
            if name not in self.declared and self.rank_ns.get(name, _MISSING) is value:
                del self.rank_ns[name]


class Running:
    """``with Running(fn, binding) as fn:`` — the notebook's values in place while the call runs."""

    def __init__(self, fn: Callable[..., Any], binding: RankBinding | None) -> None:
        self.fn, self.binding = fn, binding
        self.put: dict[str, Any] = {}

    def __enter__(self) -> Callable[..., Any]:
        if self.binding is not None:
            self.put = self.binding.enter()
        return self.fn

    def __exit__(self, *exc: Any) -> None:
        if self.binding is not None:
            self.binding.leave(self.put)
