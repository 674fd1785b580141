"""Rank side of scatter and gather for ranks the kernel cannot reach by memory (another host).

The kernel opens a listener for one transfer (``tensors/sockets.py``) and sends each such rank its
address and the transfer's id; the rank connects, both prove they hold the cluster's link key
(``engine/wire/link.py``), then the shard's bytes go over the socket straight into their place: received
into the new shard's memory, sent from the shard's. Ranks on the kernel's host take today's path in
the same call (``rank_tensor.scatter_place`` / ``gather_address``: the kernel copies by address).
"""

from __future__ import annotations

import ctypes
import socket
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.engine.shards import shard_store as store
from jupyter_mgpu.engine.startup import launched_setup
from jupyter_mgpu.engine.wire import link
from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import dist_tensor as rank_tensor

CONNECT_TIMEOUT = 30.0


def raw(t: Any) -> memoryview:
    """The bytes of a contiguous CPU tensor, writable, without a copy."""
    nbytes = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B")


def open_stream(where: dict[str, Any], rank: int) -> socket.socket:
    """Connect to the kernel's listener of one transfer and authenticate."""
    sock = socket.create_connection((where["address"], int(where["port"])), timeout=CONNECT_TIMEOUT)
    try:
        link.client_handshake(
            sock, launched_setup.link_key(), {"role": "data", "transfer": where["transfer"], "rank": rank}
        )
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return sock


def recv_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        k = sock.recv_into(view[got:], len(view) - got)
        if k == 0:
            raise ConnectionError("the notebook's host closed the transfer early")
        got += k


def scatter(
    hid: str, shape: tuple[int, ...], placement: pl.Placement, dtype: str, streams: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """This rank's shard of a scatter: over the transfer's socket if listed in ``streams``, else placed
    for the kernel to write by address (returns where)."""
    import torch

    st = rank_state.get()
    if st.rank not in streams:
        return rank_tensor.scatter_place(hid, shape, placement, dtype)
    me = pl.shard_table(shape, placement, st.world_size)[st.rank]
    out = torch.empty(me.shape, dtype=rank_tensor.dtype_of(dtype))
    if out.numel():
        with open_stream(streams[st.rank], st.rank) as sock:
            recv_into(sock, raw(out))
            sock.sendall(b"k")  # the kernel's send ends only when every byte landed
    if st.device.type != "cpu":
        out = out.to(st.device)
    store.put(hid, out)
    if etrace.active():
        rank_tensor._trace_one("scatter", hid, shape, out, me.ranges, "recv", etrace.HOST)
    return {}


def gather(
    hid: str, shape: tuple[int, ...], placement: pl.Placement, streams: dict[int, dict[str, Any]], by_address: list[int]
) -> dict[str, Any] | None:
    """Say where the kernel can read this rank's shard (ranks in ``by_address``, on the kernel's host), or
    send it over the transfer's socket (the others, and a local shard the kernel cannot read in place)."""
    st = rank_state.get()
    local = store.get(hid)
    if st.rank in by_address:
        where = rank_tensor.gather_address(hid, shape, placement)  # traces the gather
        if where is not None:
            return where
    else:
        rank_tensor._trace_gather(hid, shape, placement, local)
    if (isinstance(placement, pl.Replicate) and st.rank != 0) or not local.numel():
        return {}
    data = local.detach().to("cpu").contiguous()
    with open_stream(streams[st.rank], st.rank) as sock:
        sock.sendall(raw(data))
        sock.recv(1)  # the kernel has every byte
    return {}
