"""The controller's ports (``engine/startup/held_ports.py``): a port ipyparallel chooses stays bound from
its choice on, so no other process can take it before the controller binds it, and the controller still can."""

from __future__ import annotations

import errno
import socket

import pytest
import zmq
from ipyparallel import util

from jupyter_mgpu.engine.startup import held_ports


@pytest.fixture
def held(monkeypatch):
    monkeypatch.setattr(util, "select_random_ports", util.select_random_ports)  # restored after the test
    held_ports.hold_chosen_ports()
    yield
    while held_ports._held:
        held_ports._held.pop().close()


def test_a_chosen_port_is_refused_to_others_and_served_by_the_controllers_listener(held):
    ports = util.select_random_ports(3)
    assert len(set(ports)) == 3
    ctx = zmq.Context()
    try:
        for port in ports:
            other = socket.socket()
            with pytest.raises(OSError) as info:
                other.bind(("127.0.0.1", port))
            other.close()
            assert info.value.errno == errno.EADDRINUSE
            listener, client = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
            listener.bind(f"tcp://127.0.0.1:{port}")  # as the controller binds it
            client.connect(f"tcp://127.0.0.1:{port}")
            client.send(b"connection_request")
            assert listener.poll(5000) and listener.recv_multipart()[1] == b"connection_request"
            listener.close(0)
            client.close(0)
    finally:
        ctx.term()


def test_without_the_hold_a_chosen_port_is_free_for_anyone():
    """The race the hold closes: ipyparallel's own choice leaves the port to whoever binds it first."""
    port = util.select_random_ports(1)[0]
    other = socket.socket()
    other.bind(("127.0.0.1", port))
    other.close()
