"""Engines the hub registered that a client never heard of, while a cluster starts.

ipyparallel's client learns of each engine from a notification the controller publishes; it subscribes
to them only after its connection request was answered (with the engines registered so far), so an
engine that registers in between is never in ``client.ids``, and a start waiting for it waited out its
timeout ("only 1 of 2 engines registered within 60 s", seen once with engines started over SSH before
the client). The hub's own list (``queue_status``, a request and its reply) tells; a new client's
connection reply then lists every engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHECK_EVERY_S = 1.0  # while engines are still missing: one request to the hub per second


def caught_up(client: Any, client_file: str | Path, timeout: float) -> Any:
    """``client``, or a new client of the same controller (``client`` closed) when the hub has registered
    engines that ``client`` missed."""
    registered = [k for k in client.queue_status() if isinstance(k, int)]
    if not set(registered) - set(client.ids):
        return client
    import ipyparallel as ipp

    fresh = ipp.Client(str(client_file), timeout=timeout)
    client.close()
    return fresh
