"""Rank 0's rendezvous store once the group met (``engine/group/tcp_rendezvous.py``): newcomers are refused
at once, the ranks' open connections are still served, and the store's event loop stays idle (a shut-down
listener kept libuv's accept loop at 100 % of a core for the session's life)."""

from __future__ import annotations

import resource
import socket
import time
from datetime import timedelta

import pytest

from jupyter_mgpu.engine.group import tcp_rendezvous


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@pytest.fixture
def store(monkeypatch):
    for name in ("_master", "_listen_fd", "_client", "_client_key"):
        monkeypatch.setattr(tcp_rendezvous, name, None)
    monkeypatch.setattr(tcp_rendezvous, "_replaced", [])
    monkeypatch.setattr(tcp_rendezvous, "_exclude_from_release", lambda: None)
    port = tcp_rendezvous.open_master("127.0.0.1", 2, 30)
    yield port
    tcp_rendezvous._master = None


def test_a_closed_store_refuses_newcomers_serves_its_ranks_and_idles(store):
    from torch._C._distributed_c10d import TCPStore

    peer = TCPStore("127.0.0.1", store, 2, False, timedelta(seconds=30))
    assert tcp_rendezvous.listening() and tcp_rendezvous.close_listener() and not tcp_rendezvous.listening()
    assert not tcp_rendezvous.close_listener()  # once
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.settimeout(5)
        s.connect(("127.0.0.1", store))
    before, start = _cpu_s(), time.monotonic()
    time.sleep(0.5)
    used = _cpu_s() - before
    assert used < 0.5 * (time.monotonic() - start), f"{used:.2f} s of CPU in 0.5 s of rest"  # spinning: ~all of it
    peer.set("k", "v")
    assert tcp_rendezvous._master.get("k") == b"v" and peer.get("k") == b"v"


def test_the_listener_that_stands_in_has_nobody_to_accept():
    with tcp_rendezvous._unreachable_listener() as idle:
        assert idle.getsockname().startswith(b"\0")  # an abstract name the OS picked: no file, no port
        with pytest.raises(BlockingIOError):
            idle.accept()
