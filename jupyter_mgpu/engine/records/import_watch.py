"""Run a function right after a module is first imported, without importing it now.

``engine/records/dtensor_trace.py`` uses it so that starting a trace does not import
``torch.distributed.tensor`` (a second or more on a busy CPU) yet still wraps it the moment user
code does. The module's own loader is put back once it ran, as if nothing had been there.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from typing import Any


class AfterImport(importlib.abc.MetaPathFinder):
    """A finder that, once added, calls ``then()`` after ``fullname`` is first imported, then removes itself."""

    def __init__(self, fullname: str, then: Callable[[], Any]) -> None:
        self.fullname = fullname
        self.then = then

    def add(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.fullname:
            return None
        spec: Any = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if finder is not self and find is not None else None
            if spec is not None:
                break
        loader: Any = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        watch = self

        class _Loader(importlib.abc.Loader):
            def __getattr__(self, name: str) -> Any:
                return getattr(loader, name)

            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                module.__loader__ = module.__spec__.loader = loader  # as if we had never been there
                watch.remove()
                watch.then()

        spec.loader = _Loader()
        return spec
