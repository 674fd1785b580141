"""The authenticated link between engines on other hosts and the relay (``engine/wire/link.py``), over real sockets."""

from __future__ import annotations

import socket
import threading

import pytest

from jupyter_mgpu.engine.wire import link as lk

KEY = lk.derive_key(b"ipyparallel-session-key", "123-abcd")


def _pair(client_key: bytes, server_key: bytes, check=None):
    """Run both handshakes on a socketpair; (client result or error, server result or error, sockets)."""
    a, b = socket.socketpair()
    out: dict = {}

    def serve():
        try:
            out["server"] = lk.server_handshake(b, server_key, check)
        except Exception as exc:
            out["server"] = exc

    t = threading.Thread(target=serve)
    t.start()
    try:
        out["client"] = lk.client_handshake(a, client_key, {"role": "engine", "rank": 1})
    except Exception as exc:
        out["client"] = exc
        a.shutdown(socket.SHUT_RDWR)  # as a refused client does: the server reads the end
    t.join(10)
    return out["client"], out["server"], a, b


def test_the_key_is_derived_per_cluster_and_never_the_ipyparallel_key():
    assert KEY != b"ipyparallel-session-key" and len(KEY) == 32
    assert lk.derive_key(b"ipyparallel-session-key", "other") != KEY


def test_both_ends_holding_the_key_agree_on_a_session_key():
    client, server, a, b = _pair(KEY, KEY)
    assert not isinstance(client, Exception) and not isinstance(server, Exception)
    assert client[0] == server[0] and server[1] == {"role": "engine", "rank": 1}
    a.close(), b.close()


def test_a_wrong_key_is_refused_on_both_sides():
    client, server, a, b = _pair(lk.derive_key(b"guess", "123-abcd"), KEY)
    assert isinstance(client, lk.AuthError)  # the server's proof does not check out for the client
    assert isinstance(server, (lk.AuthError, EOFError, OSError))
    a.close(), b.close()


def test_an_authenticated_client_can_still_be_refused():
    client, server, a, b = _pair(KEY, KEY, check=lambda hello: "rank 1 is linked already")
    assert isinstance(client, lk.AuthError) and "linked already" in str(client)
    a.close(), b.close()


def _linked():
    client, server, a, b = _pair(KEY, KEY)
    return lk.Link(a, client[0], is_client=True), lk.Link(b, server[0], is_client=False), a, b


def test_frames_travel_both_ways_and_large_data_is_split():
    up, down, a, b = _linked()
    up.send(lk.PUT, lk.pack_path("telemetry/rank1.json", b'{"seq": 1}'))
    channel, kind, payload = down.recv()
    assert (channel, kind) == (0, lk.PUT) and lk.unpack_path(payload) == ("telemetry/rank1.json", None, b'{"seq": 1}')
    big = bytes(range(256)) * (3 * lk.MAX_PAYLOAD // 256 + 7)
    sender = threading.Thread(target=down.send, args=(lk.DATA, big, 5))
    sender.start()
    got = b""
    while len(got) < len(big):
        channel, kind, payload = up.recv()
        assert (channel, kind) == (5, lk.DATA)
        got += payload
    sender.join()
    assert got == big
    with pytest.raises(ValueError):
        up.send(lk.PUT, b"x" * (lk.MAX_PAYLOAD + 1))
    a.close(), b.close()


def test_a_tampered_or_replayed_frame_fails_its_check():
    up, down, a, b = _linked()
    header = lk.HEADER.pack(0, lk.INTERRUPT, 0)
    forged = header + b"" + b"\0" * lk.MAC_BYTES  # no key: a guessed MAC
    a.sendall(forged)
    with pytest.raises(lk.AuthError):
        down.recv()
    a.close(), b.close()
    up, down, a, b = _linked()

    class Recording:  # what an eavesdropper on the wire would capture
        def __init__(self, sock):
            self.sock, self.sent = sock, []

        def sendall(self, data):
            self.sent.append(bytes(data))
            self.sock.sendall(data)

    wire = Recording(a)
    up.sock = wire
    up.send(lk.INTERRUPT)
    assert down.recv()[1] == lk.INTERRUPT
    a.sendall(wire.sent[0])  # the same bytes again: a replay
    with pytest.raises(lk.AuthError):
        down.recv()
    a.close(), b.close()


def test_mirrored_paths_stay_inside_their_folders():
    assert lk.safe_relative("telemetry/rank0.json") and lk.safe_relative("trace/rank2.jsonl")
    for bad in ("/etc/passwd", "../x", "telemetry/../../x", "exits/0.json", "guard.0.sock", "", "trace//x"):
        assert not lk.safe_relative(bad), bad
