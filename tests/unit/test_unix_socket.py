"""Unix sockets at paths longer than AF_UNIX holds (a hub user's deep home), and at ordinary ones."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from jupyter_mgpu.engine.wire import unix_socket


@pytest.mark.parametrize("depth", [10, 160])
def test_bind_and_connect_at_a_path_of_any_length(tmp_path, depth):
    folder = tmp_path / ("d" * depth)
    folder.mkdir(mode=0o700)
    path = folder / "direct.0.sock"
    if depth > 100:
        assert len(os.fsencode(path)) > unix_socket.MAX_PATH_BYTES
        with socket.socket(socket.AF_UNIX) as plain, pytest.raises(OSError, match="too long"):
            plain.bind(str(path))
    with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
        unix_socket.bind(server, path)
        server.listen(1)
        assert stat.S_ISSOCK(path.stat().st_mode)  # the socket is the file at that path, in that directory
        unix_socket.connect(client, path)
        conn, _ = server.accept()
        with conn:
            client.sendall(b"ping")
            assert conn.recv(4) == b"ping"
    assert os.listdir(folder) == ["direct.0.sock"]


def test_a_long_path_borrows_no_descriptor(tmp_path):
    folder = tmp_path / ("d" * 160)
    folder.mkdir()
    before = len(os.listdir("/proc/self/fd"))
    with socket.socket(socket.AF_UNIX) as server:
        unix_socket.bind(server, folder / "s.sock")
        assert len(os.listdir("/proc/self/fd")) == before + 1  # the socket itself, not the directory's fd
