"""One way to send a user's function to the ranks, used by every entry point (``Session.run``,
``mg.map``, ``mg.collective``, ``%mgpu_collective --inputs``).

Notebook functions, lambdas and closures travel *by value* (cloudpickle) with everything they
reference from the notebook — other notebook functions included, so ``image(rank)`` calling
``disk(...)`` works on the ranks as it does in the notebook. Names the notebook does not define are
looked up in the rank's own namespace (what ``%%mgpu`` cells defined there). Functions of importable
modules travel by reference, with a by-value copy for ranks that cannot import the module (a ``.py``
file beside the notebook). A function that cannot be sent is refused in one sentence naming what it
references. The cell's source travels too, so an error on a rank can quote the user's line.
"""

from __future__ import annotations

import functools

import linecache
import pickle
import sys
from typing import Any, Callable

LIBRARY_PREFIXES = ("jupyter_mgpu.", "torch.", "numpy.", "builtins")


def function_name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _nested(fn: Any) -> bool:
    qual = getattr(fn, "__qualname__", "") or ""
    return "<locals>" in qual or "<lambda>" in qual


def _culprit(fn: Any) -> str | None:
    """The first global or captured variable of ``fn`` that cannot be pickled, named for the user."""
    import cloudpickle

    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    found: list[tuple[str, Any]] = []
    globs = getattr(fn, "__globals__", {}) or {}
    found += [(n, globs[n]) for n in code.co_names if n in globs]
    cells = getattr(fn, "__closure__", None) or ()
    for n, cell in zip(code.co_freevars, cells):
        try:
            found.append((n, cell.cell_contents))
        except ValueError:  # an empty cell
            pass
    for n, value in found:
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001 - any failure names the culprit
            return f"{n} (a {type(value).__name__})"
    return None


def _refuse(fn: Any, exc: BaseException | None) -> Exception:
    from ..errors import MgpuError

    reason = str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else "cannot be pickled"
    culprit = _culprit(fn) if exc is not None else None
    what = f"it references {culprit}, which cannot be pickled" if culprit else reason
    return MgpuError(f"{function_name(fn)} cannot be sent to the ranks ({what}); define it with def at the top level of a "
                     "notebook cell or a module, and pass what it needs as arguments instead of capturing "
                     "open files, locks, sessions or DistTensors")


def pickle_function(fn: Callable, by_value: bool = False) -> bytes:
    """``fn`` as bytes the ranks can load: by value for notebook functions, lambdas and closures (or
    with ``by_value``), by reference for functions of importable modules."""
    import cloudpickle

    from ..errors import MgpuError

    if not callable(fn):
        raise MgpuError(f"this needs a function to call on the ranks, got {type(fn).__name__}")
    module = getattr(fn, "__module__", None) or "__main__"
    if by_value and module != "__main__" and module in sys.modules:
        cloudpickle.register_pickle_by_value(sys.modules[module])
        try:
            return cloudpickle.dumps(fn)
        except Exception as exc:  # noqa: BLE001
            raise _refuse(fn, exc) from None
        finally:
            cloudpickle.unregister_pickle_by_value(sys.modules[module])
    if module != "__main__" and not _nested(fn):
        try:
            return pickle.dumps(fn)
        except Exception:  # noqa: BLE001 - e.g. a nested function of a module: by value below
            pass
    try:
        return cloudpickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001
        raise _refuse(fn, exc) from None


def _user_module(name: str) -> bool:
    """A module of the user's own (a ``.py`` beside the notebook), which the ranks may fail to import;
    installed packages and the standard library are importable wherever this kernel's Python is."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if module is None or not path or name.startswith(LIBRARY_PREFIXES):
        return False
    return not path.startswith(_installed_paths()) and "site-packages" not in path


@functools.lru_cache(maxsize=1)
def _installed_paths() -> tuple[str, ...]:
    """Where this Python's standard library and installed packages live (asked once: it is not free)."""
    import sysconfig

    return tuple({sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")})


def _engine_namespace() -> dict:
    """The rank's user namespace: what ``%%mgpu`` cells defined there."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            return shell.user_ns
    except Exception:  # noqa: BLE001
        pass
    return sys.modules["__main__"].__dict__


class ShippedFunction:
    """A user function on its way to the ranks; called there like the function itself."""

    def __init__(self, fn: Callable) -> None:
        self.__name__ = function_name(fn)
        self.module = getattr(fn, "__module__", None) or "__main__"
        self.blob = pickle_function(fn)
        self.by_value = self.module == "__main__" or _nested(fn)
        self.fallback: bytes | None = None
        if not self.by_value and _user_module(self.module):
            try:
                self.fallback = pickle_function(fn, by_value=True)
            except Exception:  # noqa: BLE001 - only the by-reference copy then
                self.fallback = None
        code = getattr(fn, "__code__", None)
        self.source: tuple[str, list[str]] | None = None
        if code is not None and self.by_value:
            lines = linecache.getlines(code.co_filename)
            if lines:
                self.source = (code.co_filename, lines)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_loaded", None)
        return state

    def load(self) -> Callable:
        """The function itself (rank side): unpickled once, notebook names first, then the rank's."""
        fn = self.__dict__.get("_loaded")
        if fn is not None:
            return fn
        try:
            fn = pickle.loads(self.blob)
        except (ImportError, AttributeError):
            if self.fallback is None:
                raise
            fn = pickle.loads(self.fallback)
            self.by_value = True
        if self.by_value:
            globs = getattr(fn, "__globals__", None)
            if isinstance(globs, dict):
                for name, value in _engine_namespace().items():
                    if not name.startswith("__"):
                        globs.setdefault(name, value)
        if self.source is not None and self.source[0] not in linecache.cache:
            filename, lines = self.source
            linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
        self._loaded = fn
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self.__name__} shipped to the ranks>"


def ship(fn: Callable) -> Callable:
    """``fn`` ready to travel: library functions as they are, user functions as a :class:`ShippedFunction`."""
    if isinstance(fn, ShippedFunction):
        return fn
    module = getattr(fn, "__module__", None) or "__main__"
    if module.startswith(LIBRARY_PREFIXES) and not _nested(fn):
        return fn
    return ShippedFunction(fn)
