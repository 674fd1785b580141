"""Every check of a start request (:class:`~jupyter_mgpu.init_options.InitOptions`) before anything
starts: the values the user wrote become checked ones (bytes, seconds, device indices), then a local
cluster's spec or the request to ipyparallel's launchers is made from them."""

from __future__ import annotations

from jupyter_mgpu import devices as devmod
from jupyter_mgpu import launch
from jupyter_mgpu.cluster.local import ClusterSpec
from jupyter_mgpu.engine.group import process_group
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.init_options import HANG_AFTER_S, LAUNCH, STATUS_AFTER_S, InitOptions
from jupyter_mgpu.units import parse_size


def checked(opts: InitOptions) -> InitOptions:
    """The options with the values every start shares checked and converted; starts nothing."""
    devices = opts.devices
    if isinstance(devices, str):
        try:
            devices = [int(d) for d in devices.split(",") if d.strip()]
        except ValueError:
            raise MgpuError(f"--devices takes indices such as 0,2, got {devices!r}") from None
    period = opts.telemetry_period
    if isinstance(period, bool) or not isinstance(period, (int, float)) or not 0 <= period <= 60:
        raise MgpuError(f"telemetry_period must be between 0 and 60 seconds, got {period!r}")
    hang_after = HANG_AFTER_S if opts.hang_after is None else opts.hang_after
    if isinstance(hang_after, bool) or not isinstance(hang_after, (int, float)) or not 0 <= hang_after < 86400:
        raise MgpuError(f"hang_after must be a number of seconds, 0 or more, got {hang_after!r}")
    status_after = STATUS_AFTER_S if opts.status_after is None else opts.status_after
    if isinstance(status_after, bool) or not isinstance(status_after, (int, float)) or not 0 <= status_after < 86400:
        raise MgpuError(f"status_after must be a number of seconds, 0 or more, got {status_after!r}")
    return opts.replace(
        hang_after=float(hang_after),
        status_after=float(status_after),
        devices=devices,
        mem_per_device=parse_size(opts.mem_per_device) if opts.mem_per_device is not None else None,
        timeout=process_group.check_timeout(opts.timeout),
    )


def local_spec(opts: InitOptions) -> ClusterSpec:
    """The spec of a cluster on this host: checked options, then the devices picked; starts nothing."""
    for key in opts.given(LAUNCH):
        raise MgpuError(f"--{key.replace('_', '-')} goes with --launcher, --hosts or --connect")
    given_timeout = opts.timeout
    opts = checked(opts)
    budget = opts.mem_per_device
    assert budget is None or isinstance(budget, int)  # checked() made it bytes
    devices = opts.devices
    assert devices is None or isinstance(devices, list)  # checked() made it indices
    devs = devmod.discover(opts.n, cpu=opts.cpu, devices=devices, mem_per_device=budget)
    chosen = process_group.choose_backend(opts.backend, devs[0].kind)
    assert opts.timeout is not None  # checked() gave the default
    return ClusterSpec.of_request(
        devs, chosen, opts.replace(timeout=opts.timeout if given_timeout is not None else None), opts.timeout, budget
    )


def launch_request(opts: InitOptions) -> tuple[launch.LaunchOptions, InitOptions]:
    """What ipyparallel's launchers are asked for, and the checked options they start with (``timeout``
    None when not given: the group then has torch's default)."""
    given_timeout = opts.timeout
    opts = checked(opts)
    if opts.devices is not None:
        raise MgpuError(
            "--devices picks devices on this host; with a launcher each engine takes its host's "
            "device of its local rank"
        )
    return launch.parse(opts.n, **opts.given(LAUNCH)), opts.replace(
        timeout=opts.timeout if given_timeout is not None else None
    )


def check(opts: InitOptions) -> None:
    """Every check of the request that can run before anything starts."""
    if opts.launched:
        launch_request(opts)
    else:
        local_spec(opts)
