"""Where a launched cluster listens on the notebook's host: the interface and address of its
controller and relay (``--interface``, the user's ipyparallel configuration, the route to the
engines' hosts, or the default route)."""

from __future__ import annotations

from jupyter_mgpu.engine.wire import netif
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import ipp_cluster
from jupyter_mgpu.launch.launcher_options import LaunchOptions


def default_route_interface() -> str | None:
    """The interface of this host's default route (``/proc/net/route``), if any."""
    try:
        with open("/proc/net/route") as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if len(parts) > 2 and parts[1] == "00000000":
                    return parts[0]
    except OSError:
        pass
    return None


def choose_address(opts: LaunchOptions, host: str, controller: str | None = None) -> tuple[str, str]:
    """``(interface, address)`` on this host for the controller and the relay."""
    if opts.interface:
        address = netif.address_of(opts.interface)
        if address is None:
            raise MgpuError(
                f"there is no interface {opts.interface} with an IPv4 address on {host} (the notebook's "
                f"host); it has {netif.describe()}"
            )
        return opts.interface, address
    configured = ipp_cluster.configured_controller_ip()
    configured_iface = netif.interface_of(configured) if configured else None
    if configured and configured_iface:  # the user's ipyparallel config names the controller's
        return configured_iface, configured
    target = opts.host_names[0] if opts.hosts else controller
    if target:
        route = netif.route_to(target)
        if route is None:
            raise MgpuError(
                f"{target} cannot be reached from {host}: no address or no route; check the name, or give --interface"
            )
        return route
    if opts.launcher == "local":
        return "lo", "127.0.0.1"
    name = default_route_interface()
    address = netif.address_of(name) if name else None
    return (name, address) if name and address else ("lo", "127.0.0.1")
