"""Talking to a user's Jupyter server through the hub's proxy: run code in a kernel, read the mgpu stream.

Both are websockets (tornado's client): the kernel's ``api/kernels/<id>/channels`` (Jupyter messaging
as JSON frames) and ``mgpu/api/stream``. Every read has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

import requests
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect


def ws_url(http_url: str) -> str:
    return "ws" + http_url[len("http") :] if http_url.startswith("http") else http_url


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"token {token}"} if token else {}


@dataclass
class Execution:
    status: str
    text: str
    errors: list[str] = field(default_factory=list)


def start_kernel(server_url: str, token: str) -> str:
    r = requests.post(f"{server_url}api/kernels", json={"name": "python3"}, headers=_headers(token), timeout=60)
    assert r.status_code == 201, f"{r.status_code} {r.text[:500]}"
    return r.json()["id"]


def stop_kernel(server_url: str, token: str, kernel_id: str) -> None:
    requests.delete(f"{server_url}api/kernels/{kernel_id}", headers=_headers(token), timeout=60)


async def _execute(server_url: str, token: str, kernel_id: str, code: str, timeout: float) -> Execution:
    request = HTTPRequest(f"{ws_url(server_url)}api/kernels/{kernel_id}/channels", headers=_headers(token))
    conn = await asyncio.wait_for(websocket_connect(request), timeout)
    msg_id = uuid.uuid4().hex
    await conn.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "username": "mgpu-tests",
                    "session": uuid.uuid4().hex,
                    "msg_type": "execute_request",
                    "version": "5.3",
                    "date": datetime.now(timezone.utc).isoformat(),
                },
                "parent_header": {},
                "metadata": {},
                "channel": "shell",
                "buffers": [],
                "content": {
                    "code": code,
                    "silent": False,
                    "store_history": False,
                    "user_expressions": {},
                    "allow_stdin": False,
                    "stop_on_error": True,
                },
            }
        )
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    text, errors, status = [], [], None
    idle = False  # iopub's idle for our request: every output has come (the shell reply may come first)
    try:
        while status is None or not idle:
            raw = await asyncio.wait_for(conn.read_message(), max(0.1, deadline - loop.time()))
            if raw is None:
                raise AssertionError("the kernel's websocket closed before the execution finished")
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                text.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                text.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
            elif kind == "execute_reply" and msg.get("channel") == "shell":
                status = content["status"]
    finally:
        conn.close()
    return Execution(status, "".join(text), errors)


def execute(server_url: str, token: str, kernel_id: str, code: str, timeout: float = 120) -> Execution:
    """Run ``code`` in the kernel and wait for its reply (``timeout`` seconds at most)."""
    return asyncio.run(_execute(server_url, token, kernel_id, code, timeout))


@dataclass
class StreamResult:
    """What a stream connection got: the handshake's HTTP status (101 when it opened), frames, body."""

    status: int
    frames: list[dict]
    body: str
    content_type: str | None


async def _stream(server_url: str, headers: dict[str, str], frames: int, timeout: float) -> StreamResult:
    request = HTTPRequest(f"{ws_url(server_url)}mgpu/api/stream", headers=headers, follow_redirects=False)
    try:
        conn = await asyncio.wait_for(websocket_connect(request), timeout)
    except HTTPClientError as exc:
        body = exc.response.body.decode(errors="replace") if exc.response is not None else ""
        ctype = exc.response.headers.get("Content-Type") if exc.response is not None else None
        return StreamResult(exc.code, [], body, ctype)
    got = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        await conn.write_message(json.dumps({"type": "configure", "interval": 0.5}))
        while len(got) < frames:
            raw = await asyncio.wait_for(conn.read_message(), max(0.1, deadline - loop.time()))
            if raw is None:
                break
            got.append(json.loads(raw))
    finally:
        conn.close()
    return StreamResult(101, got, "", None)


def read_stream(
    server_url: str,
    token: str | None = None,
    frames: int = 2,
    timeout: float = 30,
    headers: dict[str, str] | None = None,
) -> StreamResult:
    """Open ``mgpu/api/stream`` (with ``token``, or bare ``headers``), read ``frames`` snapshots, close."""
    return asyncio.run(_stream(server_url, headers if headers is not None else _headers(token), frames, timeout))
