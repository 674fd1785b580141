"""Notebook values a ``%%mgpu`` cell reads travel with it, as they do with a notebook function.

A name the cell reads that the ranks lack but the notebook has (``lr = 3e-4`` in the notebook,
``opt = SGD(model.parameters(), lr)`` on the ranks) goes to the ranks by value and is in their
namespace only while the cell runs (``%mgpu_push`` leaves one there for good). A name defined on
both sides keeps the ranks' value, and the notebook says so once. Functions go as
``Session.run`` sends them (``engine/execution/shipped_function.py``): they run in the ranks' namespace.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.execution import namespace_transfer
from jupyter_mgpu.engine.execution.rank_namespace import both_sides_line

if TYPE_CHECKING:
    from jupyter_mgpu.session.core import Session

# names every rank has (engine/startup/runtime.py namespace) or IPython's own: never sent
_RANK_NAMES = frozenset(
    {"rank", "world_size", "device", "torch", "dist", "mgpu", "In", "Out", "get_ipython", "exit", "quit"}
)
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
CELL = "the %%mgpu cell"


def free_names(source: str) -> set[str]:
    """Names ``source`` reads that it never binds itself (assignment, import, def, class, loop, with),
    and names it updates in place (``total += x``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # the ranks say what is wrong with it
        return set()
    read: set[str] = set()
    bound: set[str] = set()
    updated: set[str] = set()  # ``total += x`` reads ``total`` first
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            updated.add(node.target.id)
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return {
        n
        for n in (read - bound) | updated
        if not n.startswith("_") and n not in _RANK_NAMES and not hasattr(builtins, n)
    }


def _pickled(name: str, value: Any) -> bytes | None:
    """The value as it travels, or None (said on stderr) when it cannot."""
    import cloudpickle

    from jupyter_mgpu.engine.execution.shipped_function import ship

    if isinstance(value, types.FunctionType):
        value = ship(value)
    try:
        return bytes(cloudpickle.dumps(value))
    except Exception as exc:
        print(
            f"mgpu: the notebook's {name!r} cannot travel to the ranks ({exc}); the cell runs without it",
            file=sys.stderr,
        )
        return None


def say_both_sides(said: set[tuple[str, tuple[str, ...]]], reader: str, names: Any) -> None:
    """Once per reader (a notebook function, or the cell) and names: which value of a name both the
    notebook and the ranks define is used."""
    key = (reader, tuple(sorted(names)))
    if key not in said:
        said.add(key)
        print(both_sides_line(reader, sorted(names), cell=reader == CELL), file=sys.stderr)


def lent_values(s: Session, source: str, user_ns: dict[str, Any], ranks: list[int], skip: Any = ()) -> dict[str, bytes]:
    """The pickled notebook values ``source`` needs on ``ranks``: the names some rank lacks (``skip``:
    names that reach the ranks another way, such as DistTensor handles)."""
    found = {n: user_ns[n] for n in sorted(free_names(source) - set(skip)) if n in user_ns}
    if not found:
        return {}
    scalars = {n: v for n, v in found.items() if isinstance(v, _SCALARS)}
    answers = s.run(namespace_transfer.lacking, list(found), scalars, targets=ranks, label="%%mgpu names")
    missing = sorted({n for lacking, _ in answers for n in lacking})
    differing = sorted({n for _, diff in answers for n in diff})
    if differing:
        say_both_sides(s.said_both_sides, CELL, differing)
    out = {}
    for name in missing:
        blob = _pickled(name, found[name])
        if blob is not None:
            out[name] = blob
    return out
