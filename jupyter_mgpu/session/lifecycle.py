"""The notebook's current session: ``mg.init`` starts one and makes it current, ``mg.current`` and
``mg.shutdown`` find and end it (also at interpreter exit)."""

from __future__ import annotations

import atexit
from typing import Any

from jupyter_mgpu import launch
from jupyter_mgpu.cluster.local import Cluster, discard_spare
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.session.core import Session
from jupyter_mgpu.session.options import build_spec, check_options, launch_options

_current: Session | None = None


def start_session(n: int | None = None, **options: Any) -> Session:
    """Start a new cluster and return its session, without making it current (see :func:`init`)."""
    if launch.requested(options):  # engines from ipyparallel's launchers, on this host or several
        discard_spare()  # %load_ext's spare controller and supervisor serve local starts only
        return Session(launch.start(n, **launch_options(options)))
    for key in launch.OPTION_NAMES:
        if options.pop(key, None) not in (None, "", [], ()):
            raise MgpuError(f"--{key.replace('_', '-')} goes with --launcher, --hosts or --connect")
    return Session(Cluster.start(build_spec(n, **options)))


def init(
    n: int | None = None,
    *,
    cpu: bool = False,
    devices: list[int] | str | None = None,
    backend: str | None = None,
    mem_per_device: str | int | None = None,
    timeout: float | None = None,
    restart: bool = False,
    telemetry_period: float = 0.1,
    **launch: Any,
) -> Session:
    """Start a cluster of ``n`` engines, one per device, joined in a process group; make it current.

    Mirrors ``%mgpu_init``: ``mg.init(4, cpu=True, backend="gloo", mem_per_device="2GiB", timeout=60)``.
    Arguments are checked before a running cluster is replaced, so a typo never costs the old one.
    ``launcher=`` (local, ssh, mpi, slurm, pbs), ``hosts=``, ``per_host=``, ``interface=``, ``connect=``,
    ``partition=``, ``time=``, ``account=``, ``launcher_args=`` start the engines through ipyparallel's
    launchers instead, on one host or several (see docs/multihost.md).
    """
    global _current
    options = dict(
        cpu=cpu,
        devices=devices,
        backend=backend,
        mem_per_device=mem_per_device,
        timeout=timeout,
        telemetry_period=telemetry_period,
        **launch,
    )
    if _current is not None and _current.alive:
        if not restart:
            raise MgpuError(
                f"a cluster is already running ({_current.world_size} × {_current.device_kind}); "
                "use %mgpu_init --restart (mg.init(..., restart=True)) to replace it, or %mgpu_shutdown first"
            )
        check_options(n, options)  # refuse bad arguments while the old cluster still runs
        _current.shutdown()
    _current = start_session(n, **options)  # the default budget is a share of the RAM free now
    return _current


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
