"""This host's network interfaces (``engine/wire/netif.py``): addresses by interface, and the route to a host."""

from __future__ import annotations

import ipaddress
import socket
from types import SimpleNamespace

import psutil

from jupyter_mgpu.engine.wire import netif


def test_every_interface_listed_has_ipv4_addresses_and_loopback_is_one():
    found = netif.addresses()
    assert "127.0.0.1" in found.get("lo", [])
    for name, addrs in found.items():
        assert addrs and all(isinstance(ipaddress.ip_address(a), ipaddress.IPv4Address) for a in addrs), name


def test_an_interface_and_its_address_find_each_other():
    assert netif.address_of("lo") == "127.0.0.1"
    assert netif.interface_of("127.0.0.1") == "lo"
    for name, addrs in netif.addresses().items():
        assert netif.address_of(name) == addrs[0]
        assert all(netif.interface_of(a) == name for a in addrs)


def test_names_and_addresses_this_host_lacks_give_none():
    assert netif.address_of("no-such-if0") is None
    assert netif.interface_of("198.51.100.77") is None  # TEST-NET-2: no host holds it


def _nic(family, address):
    return SimpleNamespace(family=family, address=address)


def test_only_interfaces_that_are_up_and_have_an_ipv4_address_count(monkeypatch):
    addrs = {
        "lo": [_nic(socket.AF_INET, "127.0.0.1"), _nic(socket.AF_INET6, "::1")],
        "eth0": [_nic(socket.AF_INET, "10.0.0.5"), _nic(socket.AF_INET, "10.0.0.6")],
        "down0": [_nic(socket.AF_INET, "10.9.9.9")],
        "v6only": [_nic(socket.AF_INET6, "fe80::1")],
        "nostats": [_nic(socket.AF_INET, "10.1.1.1")],  # psutil knows no state for it: counted
    }
    stats = {n: SimpleNamespace(isup=n != "down0") for n in ("lo", "eth0", "down0", "v6only")}
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: addrs)
    monkeypatch.setattr(psutil, "net_if_stats", lambda: stats)
    assert netif.addresses() == {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5", "10.0.0.6"], "nostats": ["10.1.1.1"]}
    assert netif.address_of("eth0") == "10.0.0.5" and netif.interface_of("10.0.0.6") == "eth0"
    assert netif.address_of("down0") is None and netif.interface_of("10.9.9.9") is None
    assert netif.describe() == "eth0, lo, nostats"


def test_describe_lists_this_hosts_interfaces_in_order():
    text = netif.describe()
    assert text.split(", ") == sorted(netif.addresses()) and "lo" in text.split(", ")


def test_describe_says_none_without_interfaces(monkeypatch):
    monkeypatch.setattr(netif, "addresses", dict)
    assert netif.describe() == "none"


def test_the_route_to_loopback_is_loopback():
    assert netif.route_to("127.0.0.1") == ("lo", "127.0.0.1")


def test_a_host_that_does_not_resolve_has_no_route(monkeypatch):
    def unknown(host):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "gethostbyname", unknown)
    assert netif.route_to("no-such-host.invalid") is None


def test_a_route_from_an_address_no_interface_holds_is_none(monkeypatch):
    monkeypatch.setattr(netif, "addresses", lambda: {"eth9": ["10.200.0.1"]})
    assert netif.route_to("127.0.0.1") is None
