"""Where a launched cluster listens on the notebook's host (``launch/addresses.py``): interface and address chosen."""

from __future__ import annotations

import io

import pytest

from jupyter_mgpu.engine.wire import netif
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import addresses
from jupyter_mgpu.launch.launcher_options import LaunchOptions

HEAD = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"


def _route_table(monkeypatch, text: str | None) -> None:
    def fake_open(path, *args, **kwargs):
        assert path == "/proc/net/route"
        if text is None:
            raise FileNotFoundError(path)
        return io.StringIO(text)

    monkeypatch.setattr(addresses, "open", fake_open, raising=False)


def test_the_default_route_is_the_line_to_0_0_0_0(monkeypatch):
    _route_table(
        monkeypatch,
        HEAD
        + "eth1\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        + "wlan0\t00000000\t010200C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n",
    )
    assert addresses.default_route_interface() == "wlan0"


@pytest.mark.parametrize("text", [None, HEAD, HEAD + "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"])
def test_no_default_route_or_no_table_gives_none(monkeypatch, text):
    _route_table(monkeypatch, text)
    assert addresses.default_route_interface() is None


@pytest.fixture
def no_config(monkeypatch):
    """No controller address in the user's ipyparallel configuration."""
    monkeypatch.setattr(addresses.ipp_cluster, "configured_controller_ip", lambda: None)


def test_a_named_interface_is_used_with_its_address(no_config):
    assert addresses.choose_address(LaunchOptions("ssh", interface="lo", hosts=[("node1", 2)]), "nb") == (
        "lo",
        "127.0.0.1",
    )


def test_a_named_interface_this_host_lacks_is_refused_with_the_ones_it_has(no_config):
    with pytest.raises(MgpuError) as err:
        addresses.choose_address(LaunchOptions("ssh", interface="nope0"), "nbhost")
    text = str(err.value)
    assert "nope0" in text and "nbhost" in text and netif.describe() in text


def test_the_users_configured_controller_address_wins_over_routes(monkeypatch):
    monkeypatch.setattr(addresses.ipp_cluster, "configured_controller_ip", lambda: "127.0.0.1")
    monkeypatch.setattr(netif, "route_to", lambda host: pytest.fail("no route is needed"))
    opts = LaunchOptions("ssh", hosts=[("u@node1", 2)])
    assert addresses.choose_address(opts, "nb") == ("lo", "127.0.0.1")


def test_a_configured_address_this_host_lacks_is_passed_over(monkeypatch):
    monkeypatch.setattr(addresses.ipp_cluster, "configured_controller_ip", lambda: "198.51.100.77")
    assert addresses.choose_address(LaunchOptions("local"), "nb") == ("lo", "127.0.0.1")


def test_the_route_to_the_first_engine_host_is_used(no_config, monkeypatch):
    asked = []
    monkeypatch.setattr(netif, "route_to", lambda host: asked.append(host) or ("eth7", "10.7.0.1"))
    opts = LaunchOptions("ssh", hosts=[("me@node3", 2), ("node4", 2)])
    assert addresses.choose_address(opts, "nb", controller="ctl") == ("eth7", "10.7.0.1")
    assert asked == ["node3"]  # the host's name, without user@


def test_with_no_hosts_the_route_to_the_controller_is_used(no_config):
    assert addresses.choose_address(LaunchOptions("connect"), "nb", controller="127.0.0.1") == ("lo", "127.0.0.1")


def test_an_unreachable_host_is_refused_by_name(no_config, monkeypatch):
    monkeypatch.setattr(netif, "route_to", lambda host: None)
    with pytest.raises(MgpuError, match="node9 cannot be reached from nb.*--interface"):
        addresses.choose_address(LaunchOptions("ssh", hosts=[("node9", 1)]), "nb")


def test_local_engines_listen_on_loopback(no_config, monkeypatch):
    monkeypatch.setattr(addresses, "default_route_interface", lambda: pytest.fail("loopback needs no route"))
    assert addresses.choose_address(LaunchOptions("local", n=4), "nb") == ("lo", "127.0.0.1")


def test_other_launchers_without_hosts_use_the_default_routes_interface(no_config, monkeypatch):
    monkeypatch.setattr(addresses, "default_route_interface", lambda: "lo")
    assert addresses.choose_address(LaunchOptions("slurm", n=4), "nb") == ("lo", "127.0.0.1")


@pytest.mark.parametrize("default", [None, "no-such-if0"])
def test_without_a_usable_default_route_they_fall_back_to_loopback(no_config, monkeypatch, default):
    monkeypatch.setattr(addresses, "default_route_interface", lambda: default)
    assert addresses.choose_address(LaunchOptions("mpi", n=2), "nb") == ("lo", "127.0.0.1")
