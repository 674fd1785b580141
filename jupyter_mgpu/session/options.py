"""The options of ``%mgpu_init`` and ``mg.init``, checked in one place before anything starts: a local
cluster's spec (devices, backend, budget, timeouts), or the keyword arguments of ipyparallel's launchers."""

from __future__ import annotations

from typing import Any

from jupyter_mgpu import devices as devmod
from jupyter_mgpu import launch
from jupyter_mgpu.cluster.local import ClusterSpec
from jupyter_mgpu.engine import process_group
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.units import parse_size


def build_spec(
    n: int | None = None,
    *,
    cpu: bool = False,
    devices: list[int] | str | None = None,
    backend: str | None = None,
    mem_per_device: str | int | None = None,
    timeout: float | None = None,
    telemetry_period: float = 0.1,
) -> ClusterSpec:
    """Check every argument of :func:`init` and pick the devices; starts nothing."""
    if isinstance(devices, str):
        try:
            devices = [int(d) for d in devices.split(",") if d.strip()]
        except ValueError:
            raise MgpuError(f"--devices takes indices such as 0,2, got {devices!r}") from None
    budget = parse_size(mem_per_device) if mem_per_device is not None else None
    timeout = process_group.check_timeout(timeout)
    if (
        isinstance(telemetry_period, bool)
        or not isinstance(telemetry_period, (int, float))
        or not 0 <= telemetry_period <= 60
    ):
        raise MgpuError(f"telemetry_period must be between 0 and 60 seconds, got {telemetry_period!r}")
    devs = devmod.discover(n, cpu=cpu, devices=devices, mem_per_device=budget)
    chosen = process_group.choose_backend(backend, devs[0].kind)
    return ClusterSpec(devs, chosen, timeout, mem_per_device=budget, telemetry_period=telemetry_period)


def launch_options(options: dict[str, Any]) -> dict[str, Any]:
    """The checked keyword arguments of ``launch.start`` (the same checks as :func:`build_spec`)."""
    out = dict(options)
    if out.get("mem_per_device") is not None:
        out["mem_per_device"] = parse_size(out["mem_per_device"])
    out["timeout"] = process_group.check_timeout(out.get("timeout"))
    if out.get("devices") is not None:
        raise MgpuError(
            "--devices picks devices on this host; with a launcher each engine takes its host's "
            "device of its local rank"
        )
    out.pop("devices", None)
    return out


def check_options(n: int | None, options: dict[str, Any]) -> None:
    """Every check of the arguments that can run before anything starts."""
    if launch.requested(options):
        checked = launch_options(options)
        launch.parse(n, **{k: checked.get(k) for k in launch.OPTION_NAMES})
    else:
        build_spec(n, **{k: v for k, v in options.items() if k not in launch.OPTION_NAMES})
