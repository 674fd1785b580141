"""jupyter_mgpu: several GPUs (or CPU virtual devices) usable and visible from one notebook.

``%load_ext jupyter_mgpu`` then ``%mgpu_init 4``; or from Python ``import jupyter_mgpu as mg;
s = mg.init(4)``.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__
from .devices import DeviceInfo
from .errors import (
    CollectiveTimeoutError,
    DeviceOutOfMemoryError,
    EngineDiedError,
    MgpuError,
    RankError,
)
from .session import PendingResult, Session, current, init, shutdown

__all__ = [
    "__version__",
    "CollectiveTimeoutError",
    "DeviceInfo",
    "DeviceOutOfMemoryError",
    "EngineDiedError",
    "MgpuError",
    "PendingResult",
    "RankError",
    "Session",
    "current",
    "init",
    "load_ipython_extension",
    "memory",
    "shutdown",
]


def memory() -> list[dict[str, Any]]:
    """The latest memory sample of every rank of the current session, in rank order."""
    return current().memory()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_mgpu``: register the ``%mgpu_*`` magics."""
    from .magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    shutdown()


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-mgpu"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jupyter_mgpu.server"}]
