"""Network interfaces of this host: a name's IPv4 address, the interface that reaches an address.

Used on both ends of a cluster that spans hosts: the kernel binds its controller and relay on one
interface, each engine binds gloo and (rank 0) the rendezvous store on its own address of the same
interface, or of the interface that reaches the controller when none is named.
"""

from __future__ import annotations

import socket


def addresses() -> dict[str, list[str]]:
    """Interface name -> its IPv4 addresses (interfaces that are up and have one)."""
    import psutil

    stats = psutil.net_if_stats()
    out: dict[str, list[str]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        ipv4 = [a.address for a in addrs if a.family == socket.AF_INET]
        if ipv4 and (name not in stats or stats[name].isup):
            out[name] = ipv4
    return out


def address_of(interface: str) -> str | None:
    """The first IPv4 address of ``interface`` on this host, or None if it has none or does not exist."""
    found = addresses().get(interface)
    return found[0] if found else None


def interface_of(address: str) -> str | None:
    """The interface that holds ``address`` on this host (None if none does)."""
    for name, addrs in addresses().items():
        if address in addrs:
            return name
    return None


def route_to(host: str) -> tuple[str, str] | None:
    """``(interface, source address)`` this host would use to reach ``host`` (no packet is sent)."""
    try:
        target = socket.gethostbyname(host)
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((target, 9))  # a UDP connect only picks the route
        except OSError:
            return None
        source = s.getsockname()[0]
    name = interface_of(source)
    return (name, source) if name else None


def describe() -> str:
    """``lo, eth0`` — this host's interfaces, for error messages."""
    return ", ".join(sorted(addresses())) or "none"
