"""The direct channel's framing and value encoding, over a real socket pair."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest
import torch

from jupyter_mgpu.engine.execution import direct_channel


@pytest.mark.parametrize(
    "parts",
    [
        [b"head"],
        [b"", b"x", bytearray(b"y" * 10)],
        [b"%d" % i for i in range(direct_channel.IOV_MAX * 2 + 3)],  # more parts than one sendmsg takes
        [b"h", bytes(range(256)) * (1 << 14)],  # 4 MiB: more than the socket buffer, sent in pieces
    ],
)
def test_frames_arrive_whole_and_in_order(parts):
    a, b = socket.socketpair()
    sender = threading.Thread(target=direct_channel.send_frames, args=(a, parts))
    sender.start()
    got = direct_channel.recv_frames(b)
    sender.join()
    assert [bytes(p) for p in got] == [bytes(p) for p in parts]
    a.close()
    with pytest.raises(EOFError):
        direct_channel.recv_frames(b)


def _roundtrip(value):
    return direct_channel.load_value(
        [
            bytes(p) if i == 0 else bytearray(memoryview(p).cast("B"))
            for i, p in enumerate(direct_channel.dump_value(value))
        ]
    )


@pytest.mark.parametrize(
    "t",
    [
        torch.arange(12, dtype=torch.float32).view(3, 4),
        torch.randn(5, 3).to(torch.bfloat16),
        torch.tensor([True, False, True]),
        torch.randn(4, dtype=torch.complex64),
        torch.tensor(7, dtype=torch.int64),  # 0-d
        torch.empty(0, 5),
        torch.arange(20.0).view(4, 5).t(),  # not contiguous
        torch.arange(10**6, dtype=torch.float64)[10:20],  # a slice: only its bytes travel
    ],
)
def test_cpu_tensors_travel_as_raw_buffers_and_come_back_equal(t):
    parts = direct_channel.dump_value({"ok": True, "value": [t, "x"]})
    assert bytes(parts[0]) == b"P"
    assert sum(memoryview(p).nbytes for p in parts[2:]) == t.numel() * t.element_size()
    back = _roundtrip({"ok": True, "value": [t, "x"]})["value"]
    assert back[1] == "x" and back[0].dtype == t.dtype and back[0].shape == t.shape
    assert torch.equal(back[0], t)


def test_values_plain_pickle_cannot_carry_fall_back_to_ipyparallel_canning():
    parts = direct_channel.dump_value({"f": lambda x: x + 1})
    assert bytes(parts[0]) == b"I"
    assert _roundtrip({"f": lambda x: x + 1})["f"](1) == 2
    grad = torch.ones(2, requires_grad=True)  # left to torch's own pickling
    assert torch.equal(_roundtrip(grad).detach(), grad.detach())


def test_ipyparallel_s_lazy_canning_set_up_is_done_once_before_threads_pack_calls(monkeypatch):
    # ipyparallel imports its canning maps' classes on the first can/uncan, rewriting a shared dict: two threads
    # packing a session's first calls at once failed with KeyError: 'numpy.ndarray'
    from ipyparallel.serialize import canning

    monkeypatch.setattr(canning, "can_map", dict(canning._original_can_map))
    monkeypatch.setattr(canning, "uncan_map", dict(canning._original_uncan_map))
    assert any(isinstance(k, str) for k in canning.can_map)
    direct_channel.prime_canning()
    assert not [k for k in [*canning.can_map, *canning.uncan_map] if isinstance(k, str)]


def test_the_package_s_own_functions_travel_by_name_and_a_notebook_s_as_code():
    from ipyparallel.serialize import pack_apply_message, unpack_apply_message

    from jupyter_mgpu.engine.execution import calls

    ref = direct_channel.by_name(calls.run_cell)
    assert isinstance(ref, direct_channel.ByName) and (ref.module, ref.name) == (
        "jupyter_mgpu.engine.execution.calls",
        "run_cell",
    )
    named, as_code = (pack_apply_message(f, ("pass\n",), {}) for f in (ref, calls.run_cell))
    assert sum(map(len, named)) < sum(map(len, as_code)) / 3  # a name, not the function's code and globals
    f, args, _ = unpack_apply_message(named, {}, copy=False)
    assert f(*args)["ok"] is True

    def mine(x):
        return x

    assert (
        direct_channel.by_name(mine) is mine
    )  # a notebook's function is not importable on the ranks: sent as ipyparallel sends it


@pytest.mark.timeout(60)
def test_the_engine_drops_a_peer_that_stops_mid_frame_either_way_and_still_serves_the_next(tmp_path, monkeypatch):
    import asyncio
    import select
    import struct

    from ipyparallel.serialize import pack_apply_message

    monkeypatch.setattr(direct_channel, "_TIMEOUT", struct.pack("ll", 0, 300_000))  # 0.3 s, not 30
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = direct_channel.Server(str(tmp_path), 0, {})
    stalled, deaf, good = (socket.socket(socket.AF_UNIX) for _ in range(3))
    try:
        stalled.connect(str(server.path))
        stalled.sendall(b"\x00\x00\x00\x03")  # a frame of three parts, and then nothing
        deaf.connect(str(server.path))  # asks for 8 MB and never reads the answer
        direct_channel.send_frames(deaf, [b'{"id": 6}', *pack_apply_message(bytes, (8 << 20,), {})])
        good.connect(str(server.path))
        direct_channel.send_frames(good, [b'{"id": 7}', *pack_apply_message(divmod, (7, 2), {})])
        good.settimeout(10)
        stalled.settimeout(10)
        replies: list = []
        end = loop.time() + 5
        while not replies and loop.time() < end:  # the engine's loop, as it runs between cells
            loop.run_until_complete(asyncio.sleep(0.05))
            if select.select([good], [], [], 0)[0]:
                replies.append(direct_channel.recv_frames(good))
        assert replies and direct_channel.load_value(replies[0][1:]) == (3, 1)
        assert stalled.recv(1) == b""  # dropped after the partial frame's timeout, not held forever
        deaf.settimeout(10)
        got = 0
        while chunk := deaf.recv(1 << 20):
            got += len(chunk)
        assert got < 8 << 20  # the reply was cut off when it stalled: the connection dropped, not finished
    finally:
        for sock in (stalled, deaf, good, server.listener):
            sock.close()
        loop.close()
        asyncio.set_event_loop(None)


@pytest.mark.timeout(60)
def test_a_call_whose_caller_hung_up_before_it_was_read_never_runs(tmp_path):
    """The kernel closes its connection on the stop button, then signals the ranks; a rank busy elsewhere reads
    the request only later, when nobody waits for it: it must not run (it could spin forever, or write)."""
    import asyncio

    from ipyparallel.serialize import pack_apply_message

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = direct_channel.Server(str(tmp_path), 0, {})
    gone, kept = (socket.socket(socket.AF_UNIX) for _ in range(2))
    try:
        for sock, rid in ((gone, 1), (kept, 2)):
            sock.connect(str(server.path))
            request = pack_apply_message((tmp_path / f"ran{rid}").touch, (), {})
            direct_channel.send_frames(sock, [b'{"id": %d}' % rid, *request])
        gone.close()  # the stop button, before the engine looked
        kept.settimeout(10)
        end = loop.time() + 5
        while not (tmp_path / "ran2").exists() and loop.time() < end:  # the engine's loop, once it is free
            loop.run_until_complete(asyncio.sleep(0.05))
        assert direct_channel.recv_frames(kept)[0] == b'{"id": 2}'
        assert sorted(p.name for p in tmp_path.glob("ran*")) == ["ran2"]  # the abandoned call did not run
    finally:
        for sock in (gone, kept, server.listener):
            sock.close()
        loop.close()
        asyncio.set_event_loop(None)


def _in_call_says() -> bool:
    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.watch import collective_guard

    return bool(collective_guard.progress(rank_state.STATE)["in_call"])


@pytest.mark.timeout(60)
def test_a_rank_that_read_a_request_is_in_a_call_before_its_call_begins(tmp_path, monkeypatch):
    """The stop button asks the ranks whether they are in a call: one that has read the request but has not begun
    the call yet (its arguments still unpacking) must not say idle, or the kernel rebuilds the group under it."""
    import asyncio
    import types

    from ipyparallel.serialize import pack_apply_message

    from jupyter_mgpu.engine import state as rank_state

    monkeypatch.setattr(rank_state, "STATE", types.SimpleNamespace(rank=0, pg_generation=0, call_depth=0))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = direct_channel.Server(str(tmp_path), 0, {})
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect(str(server.path))
        direct_channel.send_frames(sock, [b'{"id": 1}', *pack_apply_message(_in_call_says, (), {})])
        sock.settimeout(0.05)
        reply = None
        end = loop.time() + 5
        while reply is None and loop.time() < end:  # the engine's loop, as it runs between cells
            loop.run_until_complete(asyncio.sleep(0.05))
            with contextlib.suppress(TimeoutError):
                reply = direct_channel.recv_frames(sock)
        assert reply is not None and direct_channel.load_value(reply[1:]) is True  # no call scope: only the read
        assert _in_call_says() is False  # answered: idle again
    finally:
        for s in (sock, server.listener):
            s.close()
        loop.close()
        asyncio.set_event_loop(None)
