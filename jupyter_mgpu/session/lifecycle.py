"""The notebook's current session: ``mg.init`` starts one and makes it current, ``mg.current`` and
``mg.shutdown`` find and end it (also at interpreter exit)."""

from __future__ import annotations

import atexit
from typing import Any, Literal, overload

from jupyter_mgpu import launch
from jupyter_mgpu.cluster.local import Cluster
from jupyter_mgpu.cluster.spare import discard_spare
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.init_options import InitOptions, keyword_signature
from jupyter_mgpu.session.core import Session
from jupyter_mgpu.session.options import check, launch_request, local_spec

_current: Session | None = None


def start(opts: InitOptions) -> Session:
    """Start a new cluster for ``opts`` and return its session, without making it current."""
    if opts.launched:  # engines from ipyparallel's launchers, on this host or several
        request, checked_opts = launch_request(opts)
        discard_spare()  # %load_ext's spare controller and supervisor serve local starts only
        return Session(launch.start(request, checked_opts))
    return Session(Cluster.start(local_spec(opts)))


def start_session(n: int | None = None, **options: Any) -> Session:
    """Start a new cluster and return its session, without making it current (see :func:`init`)."""
    return start(InitOptions.from_keywords(n, **options))


def init(n: int | None = None, **options: Any) -> Session:
    """Start a cluster of ``n`` engines, one per device, joined in a process group; make it current.

    Mirrors ``%mgpu_init``: ``mg.init(4, cpu=True, backend="gloo", mem_per_device="2GiB", timeout=60)``.
    Arguments are checked before a running cluster is replaced, so a typo never costs the old one.
    ``launcher=`` (local, ssh, mpi, slurm, pbs), ``hosts=``, ``per_host=``, ``interface=``, ``connect=``,
    ``partition=``, ``time=``, ``account=``, ``launcher_args=`` start the engines through ipyparallel's
    launchers instead, on one host or several (see docs/multihost.md). Every option, with its meaning,
    is a field of :class:`jupyter_mgpu.init_options.InitOptions`.
    """
    return init_with(InitOptions.from_keywords(n, **options))


init.__signature__ = keyword_signature("Session")  # type: ignore[attr-defined]  # mg.init? lists every option


def init_with(opts: InitOptions) -> Session:
    """:func:`init` for a request already made (``%mgpu_init`` builds one from its arguments)."""
    global _current
    if _current is not None and _current.alive:
        if not opts.restart:
            raise MgpuError(
                f"a cluster is already running ({_current.world_size} × {_current.device_kind}); "
                "use %mgpu_init --restart (mg.init(..., restart=True)) to replace it, or %mgpu_shutdown first"
            )
        check(opts)  # refuse bad arguments while the old cluster still runs
        _current.shutdown()
    _current = start(opts)  # the default budget is a share of the RAM free now
    return _current


@overload
def current(required: Literal[True] = True) -> Session: ...
@overload
def current(required: bool) -> Session | None: ...


def current(required: bool = True) -> Session | None:
    """The current session; raises a clear error when there is none and ``required``."""
    if (_current is None or not _current.alive) and required:
        raise MgpuError("no multi-GPU session is running; start one with %mgpu_init N or mg.init(N)")
    return _current if (_current is not None and _current.alive) else None


def shutdown() -> None:
    """Shut down the current session, if any."""
    global _current
    if _current is not None:
        _current.shutdown()
        _current = None


@atexit.register
def _shutdown_at_exit() -> None:
    try:
        shutdown()
    except Exception:
        pass
