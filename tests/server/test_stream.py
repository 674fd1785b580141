"""The /mgpu/api/stream websocket: client-set rate, pause, clear errors, auth, and no leaked loops."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_mgpu.server.handlers import STREAMS_KEY


async def recv(ws, timeout=5.0):
    msg = await asyncio.wait_for(ws.read_message(), timeout)
    assert msg is not None, "the server closed the stream"
    return json.loads(msg)


async def test_stream_sends_snapshots_at_the_clients_rate(jp_ws_fetch, fake_clusters):
    fake_clusters.make("444-dddd0001", world_size=2)
    ws = await jp_ws_fetch("mgpu", "api", "stream")
    first = await recv(ws)
    assert first["type"] == "snapshot" and first["interval"] == 1.0
    assert [c["cluster_id"] for c in first["clusters"]] == ["444-dddd0001"]
    assert first["devices"]["source"] == "clusters"
    ws.write_message(json.dumps({"type": "configure", "interval": 0.2}))
    msgs = []
    start = time.monotonic()
    while len(msgs) < 6:
        msgs.append(await recv(ws))
    elapsed = time.monotonic() - start
    assert all(m["interval"] == 0.2 for m in msgs[1:])
    assert elapsed < 4.0  # 1 s would take >= 5 s for 6 frames
    ws.close()


async def test_pause_stops_frames_and_resume_restarts(jp_ws_fetch, mgpu_root):
    ws = await jp_ws_fetch("mgpu", "api", "stream")
    await recv(ws)
    ws.write_message(json.dumps({"type": "configure", "interval": 0.2, "paused": True}))
    # drain what was in flight, then expect silence
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(ws.read_message(), 0.3)
        except asyncio.TimeoutError:
            break
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(ws.read_message(), 1.0)
    ws.write_message(json.dumps({"type": "resume"}))
    msg = await recv(ws, 2.0)
    assert msg["type"] == "snapshot" and msg["paused"] is False
    ws.close()


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"type": "explode"}', "unknown message type"),
        ('{"type": "configure", "interval": "fast"}', "interval must be a number"),
        ('{"type": "configure", "interval": 0.001}', "between"),
        ('{"type": "configure", "paused": "yes"}', "paused must be true or false"),
        ('{"type": "configure", "rate": 1}', "unknown key"),
    ],
)
async def test_malformed_message_gets_a_clear_error_and_the_stream_lives(jp_ws_fetch, mgpu_root, raw, needle):
    ws = await jp_ws_fetch("mgpu", "api", "stream")
    await recv(ws)
    ws.write_message(json.dumps({"type": "pause"}))
    ws.write_message(raw)
    msg = await recv(ws)
    while msg["type"] == "snapshot":
        msg = await recv(ws)
    assert msg["type"] == "error" and needle in msg["message"]
    ws.write_message(json.dumps({"type": "refresh"}))
    assert (await recv(ws))["type"] == "snapshot"
    ws.close()


async def test_stream_needs_auth(jp_ws_fetch, mgpu_root):
    with pytest.raises(HTTPClientError) as err:
        await jp_ws_fetch("mgpu", "api", "stream", headers={"Authorization": ""})
    assert err.value.code == 403
    # a short JSON refusal, not the server's HTML error page
    assert err.value.response.headers["Content-Type"] == "application/json"
    assert json.loads(err.value.response.body)["message"] == "authentication required"


async def test_closing_the_stream_ends_its_loop(jp_ws_fetch, jp_serverapp, mgpu_root):
    streams = jp_serverapp.web_app.settings[STREAMS_KEY]
    sockets = [await jp_ws_fetch("mgpu", "api", "stream") for _ in range(3)]
    for ws in sockets:
        await recv(ws)
    assert len(streams) == 3
    tasks = [h._task for h in streams]
    for ws in sockets:
        ws.close()
    for _ in range(50):
        if not streams and all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.05)
    assert not streams
    assert all(t.done() for t in tasks)


async def test_a_new_profile_rides_the_next_snapshot_once(jp_ws_fetch, fake_clusters):
    """The sidebar gets each profile with the snapshot that first lists it (never by a second request that a
    cluster ending in between would answer with a 404), once per connection, and again after a newer one."""
    import os

    from jupyter_mgpu import rundir as rd

    path = fake_clusters.make("444-dddd0002", world_size=2)
    ws = await jp_ws_fetch("mgpu", "api", "stream")
    assert "profile" not in (await recv(ws))["clusters"][0]
    ws.write_message(json.dumps({"type": "configure", "interval": 0.2}))
    data = {"profiled_at": 1.0, "window_ms": 10.0, "ranks": [], "summary": []}
    rd.write_json(path / rd.PROFILE_FILE, data)
    frames = [await recv(ws) for _ in range(5)]
    carried = [f["clusters"][0]["profile"] for f in frames if "profile" in f["clusters"][0]]
    assert carried == [data]
    newer = {**data, "profiled_at": 2.0}
    rd.write_json(path / rd.PROFILE_FILE, newer)
    os.utime(path / rd.PROFILE_FILE, (time.time() + 5, time.time() + 5))  # a later mtime, whatever the clock's grain
    frames = [await recv(ws) for _ in range(5)]
    assert [f["clusters"][0]["profile"] for f in frames if "profile" in f["clusters"][0]] == [newer]
    ws.close()
    again = await jp_ws_fetch("mgpu", "api", "stream")  # a new page gets the last profile at once
    assert (await recv(again))["clusters"][0]["profile"] == newer
    again.close()
