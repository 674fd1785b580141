"""One way to send a user's function to the ranks, used by every entry point (``Session.run``,
``mg.map``, ``mg.collective``, ``%mgpu_collective --inputs``).

Notebook functions, lambdas and closures travel *by value* (cloudpickle) with everything they
reference from the notebook — other notebook functions included, so ``image(rank)`` calling
``disk(...)`` works on the ranks as it does in the notebook. On the rank a notebook function runs in
the rank's own namespace, as ipyparallel runs one (see ``engine/execution/rank_namespace.py``): names it
declares ``global`` are read and written there, names the rank defines are the rank's, and what it
references from the notebook fills in the names the rank lacks. Functions of importable modules
travel by reference, with a by-value copy for ranks that cannot import the module (a ``.py`` file
beside the notebook). A function that cannot be sent is refused in one sentence naming what it
references. The source lines of every cell the function's code comes from travel too, with the code's
own file names (whatever cloudpickle does to them), so an error on a rank quotes the user's line.
"""

from __future__ import annotations

import functools
import io
import linecache
import pickle
import sys
import types
from collections.abc import Callable
from typing import Any

from jupyter_mgpu.engine.execution import rank_namespace

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
        except Exception:
            return f"{n} (a {type(value).__name__})"
    return None


def _refuse(fn: Any, exc: BaseException | None) -> Exception:
    from jupyter_mgpu.errors import MgpuError

    reason = str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else "cannot be pickled"
    culprit = _culprit(fn) if exc is not None else None
    what = f"it references {culprit}, which cannot be pickled" if culprit else reason
    return MgpuError(
        f"{function_name(fn)} cannot be sent to the ranks ({what}); define it with def at the top level of a "
        "notebook cell or a module, and pass what it needs as arguments instead of capturing "
        "open files, locks, sessions or DistTensors"
    )


def _named_code(filename: str, make: Callable[..., types.CodeType], args: tuple[Any, ...]) -> types.CodeType:
    """A code object rebuilt on the rank under the file name it had in the notebook."""
    code = make(*args)
    return code if code.co_filename == filename else code.replace(co_filename=filename)


@functools.lru_cache(maxsize=1)
def _source_pickler() -> type:
    """cloudpickle's pickler, keeping each code object's file name and noting which files it saw.

    cloudpickle >= 3.1.3 names every code object it pickles ``<dynamic-code>``; the rank needs the
    real name to find the shipped source lines (tracebacks, error messages)."""
    import cloudpickle

    code_reduce = cloudpickle.Pickler.dispatch_table[types.CodeType]

    class SourcePickler(cloudpickle.Pickler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.filenames: set[str] = set()

        def reducer_override(self, obj: Any) -> Any:
            if type(obj) is types.CodeType:
                self.filenames.add(obj.co_filename)
                make, args = code_reduce(obj)
                return _named_code, (obj.co_filename, make, args)
            return super().reducer_override(obj)

    return SourcePickler


def dumps_by_value(obj: Any) -> tuple[bytes, set[str]]:
    """``obj`` pickled by cloudpickle with its code's file names kept, and the file names it holds."""
    import cloudpickle

    buffer = io.BytesIO()
    pickler = _source_pickler()(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL)
    pickler.dump(obj)
    return buffer.getvalue(), pickler.filenames


def pickle_function(fn: Callable[..., Any], by_value: bool = False) -> bytes:
    """``fn`` as bytes the ranks can load: by value for notebook functions, lambdas and closures (or
    with ``by_value``), by reference for functions of importable modules."""
    return _pickle_function(fn, by_value)[0]


def _pickle_function(fn: Callable[..., Any], by_value: bool = False) -> tuple[bytes, set[str]]:
    """:func:`pickle_function`, with the file names of the code it pickled by value."""
    import cloudpickle

    from jupyter_mgpu.errors import MgpuError

    if not callable(fn):
        raise MgpuError(f"this needs a function to call on the ranks, got {type(fn).__name__}")
    module = getattr(fn, "__module__", None) or "__main__"
    if by_value and module != "__main__" and module in sys.modules:
        cloudpickle.register_pickle_by_value(sys.modules[module])
        try:
            return dumps_by_value(fn)
        except Exception as exc:
            raise _refuse(fn, exc) from None
        finally:
            cloudpickle.unregister_pickle_by_value(sys.modules[module])
    if module != "__main__" and not _nested(fn):
        try:
            return pickle.dumps(fn), set()
        except Exception:
            pass
    try:
        return dumps_by_value(fn)
    except Exception as exc:
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


def _engine_namespace() -> dict[str, Any]:
    """The rank's user namespace: what ``%%mgpu`` cells defined there."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            ns: dict[str, Any] = shell.user_ns
            return ns
    except Exception:
        pass
    return sys.modules["__main__"].__dict__


def _source_lines(filenames: set[str]) -> dict[str, list[str]]:
    """The lines of the cells and files the shipped code comes from, as this kernel's linecache has them."""
    found = {}
    for name in sorted(filenames):
        lines = linecache.getlines(name)
        if lines:
            found[name] = lines
    return found


class ShippedFunction:
    """A user function on its way to the ranks; called there like the function itself."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.__name__ = function_name(fn)
        self.module = getattr(fn, "__module__", None) or "__main__"
        self.blob, filenames = _pickle_function(fn)
        self.by_value = self.module == "__main__" or _nested(fn)
        self.fallback: bytes | None = None
        if not self.by_value and _user_module(self.module):
            try:
                self.fallback, filenames = _pickle_function(fn, by_value=True)
            except Exception:
                self.fallback = None
        self.sources = _source_lines(filenames)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_loaded", None)
        state.pop("_namespace", None)
        return state

    def load(self) -> Callable[..., Any]:
        """The function itself (rank side), unpickled once; a notebook function is bound to the rank's
        namespace (see :func:`running` for the names it takes from the notebook)."""
        fn = self.__dict__.get("_loaded")
        if fn is not None:
            loaded: Callable[..., Any] = fn
            return loaded
        try:
            fn = pickle.loads(self.blob)
        except (ImportError, AttributeError):
            if self.fallback is None:
                raise
            fn = pickle.loads(self.fallback)
            self.by_value = True
        for filename, lines in self.sources.items():
            if filename not in linecache.cache:
                linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
        self._namespace = None
        if self.by_value:
            rank_ns = _engine_namespace()
            if getattr(fn, "__module__", None) == "__main__" and isinstance(getattr(fn, "__globals__", None), dict):
                self._namespace = rank_namespace.RankBinding(fn, rank_ns)
                fn = self._namespace.function
            else:  # a closure of a module: its own globals, with the rank's names for what the module lacks
                globs = getattr(fn, "__globals__", None)
                if isinstance(globs, dict):
                    for name, value in rank_ns.items():
                        if not name.startswith("__"):
                            globs.setdefault(name, value)
        self._loaded = fn
        return fn

    def running(self) -> rank_namespace.Running:
        """``with shipped.running() as fn:`` — the function, with the notebook's values it needs in the
        rank's namespace for the duration of the call (a plain context for other functions)."""
        fn = self.load()
        return rank_namespace.Running(fn, self.__dict__.get("_namespace"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.running() as fn:
            return fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self.__name__} shipped to the ranks>"


def ship(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` ready to travel: library functions as they are, user functions as a :class:`ShippedFunction`."""
    if isinstance(fn, ShippedFunction):
        return fn
    module = getattr(fn, "__module__", None) or "__main__"
    if module.startswith(LIBRARY_PREFIXES) and not _nested(fn):
        return fn
    return ShippedFunction(fn)
