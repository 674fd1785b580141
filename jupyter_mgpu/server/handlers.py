"""Thin, authenticated tornado handlers over :class:`ClusterManager`, mounted under the server's base_url.

``GET  {base_url}mgpu/api/devices``          the host's devices (NVML GPUs, else clusters' CPU devices)
``GET  {base_url}mgpu/api/clusters``         this user's running clusters, their ranks and memory
``GET  {base_url}mgpu/api/clusters/<id>``    one of them
``DELETE {base_url}mgpu/api/clusters/<id>``  stop it (404 with a message when it is not this user's)
``GET  {base_url}mgpu/api/clusters/<id>/profile``  its last ``mg.profile()`` (the stream carries it too)
``GET  {base_url}mgpu/api/clusters/<id>/where``    every rank's stack now, as one tree (``rank_stacks.py``)
``WS   {base_url}mgpu/api/stream``           snapshots pushed at the rate the client asks for

Stream protocol (JSON text frames). Client → server: ``{"type": "configure", "interval": 1.0,
"paused": false}`` (either key optional), ``{"type": "pause"}``, ``{"type": "resume"}``,
``{"type": "refresh"}``. Server → client: ``{"type": "snapshot", "time", "clusters", "devices",
"interval", "paused"}`` (a cluster whose last profile this connection has not carried yet has it as
``profile``, the payload of the profile route; ``devices`` holds NVML's GPUs only, never the clusters'
ranks again) and, for a malformed message, ``{"type": "error", "message": "..."}`` (the
stream stays open). Closing the socket ends its loop at once; nothing keeps running.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import tornado.web
import tornado.websocket
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.utils import url_path_join

from jupyter_mgpu.server import rank_stacks
from jupyter_mgpu.server.kernels import kernel_pids
from jupyter_mgpu.server.manager import ClusterManager, ClusterNotFound

MIN_INTERVAL = 0.2
MAX_INTERVAL = 60.0
DEFAULT_INTERVAL = 1.0
STREAMS_KEY = "mgpu_streams"
MANAGER_KEY = "mgpu_manager"


class _ManagerMixin:
    settings: dict[str, Any]

    @property
    def manager(self) -> ClusterManager:
        manager: ClusterManager = self.settings[MANAGER_KEY]
        return manager


class DevicesHandler(_ManagerMixin, APIHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        loop = asyncio.get_running_loop()
        self.finish(json.dumps(await loop.run_in_executor(None, self.manager.devices)))


class ClustersHandler(_ManagerMixin, APIHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        loop = asyncio.get_running_loop()
        self.finish(json.dumps(await loop.run_in_executor(None, self.manager.clusters)))


class ClusterHandler(_ManagerMixin, APIHandler):
    @tornado.web.authenticated
    async def get(self, cluster_id: str) -> None:
        try:
            payload = self.manager.cluster(cluster_id)
        except ClusterNotFound as exc:
            raise tornado.web.HTTPError(404, str(exc)) from None
        self.finish(json.dumps(payload))

    @tornado.web.authenticated
    async def delete(self, cluster_id: str) -> None:
        try:
            self.manager.locate(cluster_id)  # 404 before anything is signalled
        except ClusterNotFound as exc:
            raise tornado.web.HTTPError(404, str(exc)) from None
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(None, self.manager.stop, cluster_id)
        except ClusterNotFound as exc:  # it ended between the check and the stop
            raise tornado.web.HTTPError(404, str(exc)) from None
        self.log.info("jupyter_mgpu: stopped cluster %s (pids %s)", cluster_id, result.signalled)
        self.finish(json.dumps(result.to_dict()))


class ProfileHandler(_ManagerMixin, APIHandler):
    @tornado.web.authenticated
    async def get(self, cluster_id: str) -> None:
        try:
            payload = self.manager.profile(cluster_id)
        except ClusterNotFound as exc:
            raise tornado.web.HTTPError(404, str(exc)) from None
        self.finish(json.dumps(payload))


class WhereHandler(_ManagerMixin, APIHandler):
    @tornado.web.authenticated
    async def get(self, cluster_id: str) -> None:
        try:
            path, state = self.manager.locate(cluster_id)
        except ClusterNotFound as exc:
            raise tornado.web.HTTPError(404, str(exc)) from None
        loop = asyncio.get_running_loop()  # the ranks answer within seconds: off the server's loop
        payload = await loop.run_in_executor(None, rank_stacks.where, path, state)
        self.finish(json.dumps(payload))


def parse_stream_message(text: str | bytes, interval: float, paused: bool) -> tuple[float, bool, bool]:
    """Apply one client message; returns (interval, paused, send_now). Raises ValueError with a reason."""
    try:
        msg = json.loads(text)
    except (TypeError, ValueError):
        raise ValueError('the message is not JSON; send e.g. {"type": "configure", "interval": 1.0}') from None
    if not isinstance(msg, dict):
        raise ValueError('the message must be a JSON object with a "type" key')
    kind = msg.get("type")
    if kind == "pause":
        return interval, True, False
    if kind == "resume":
        return interval, False, True
    if kind == "refresh":
        return interval, paused, True
    if kind != "configure":
        raise ValueError(f"unknown message type {kind!r}; use configure, pause, resume or refresh")
    unknown = set(msg) - {"type", "interval", "paused"}
    if unknown:
        raise ValueError(f"configure has unknown key(s) {', '.join(sorted(unknown))}; use interval and paused")
    if "interval" in msg:
        value = msg["interval"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise ValueError(f"interval must be a number of seconds, got {value!r}")
        if not MIN_INTERVAL <= value <= MAX_INTERVAL:
            raise ValueError(f"interval must be between {MIN_INTERVAL} and {MAX_INTERVAL:.0f} seconds, got {value}")
        interval = float(value)
    if "paused" in msg:
        if not isinstance(msg["paused"], bool):
            raise ValueError(f"paused must be true or false, got {msg['paused']!r}")
        paused = msg["paused"]
    return interval, paused, not paused


class StreamHandler(_ManagerMixin, WebSocketMixin, tornado.websocket.WebSocketHandler, JupyterHandler):
    """Pushes snapshots every ``interval`` seconds until paused or closed."""

    interval = DEFAULT_INTERVAL
    paused = False
    _task: asyncio.Task[None] | None = None
    _wake: asyncio.Event | None = None
    _force = False  # a refresh asked for while paused

    async def get(self, *args: Any, **kwargs: Any) -> None:
        if self.current_user is None:  # a websocket cannot be redirected to a login page
            raise tornado.web.HTTPError(403, "authentication required")
        await super().get(*args, **kwargs)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """A refused handshake answers in JSON like the REST handlers, not with the server's HTML error page."""
        # APIHandler's JSON writer uses only what every JupyterHandler has (status, reason, request)
        APIHandler.write_error(cast(APIHandler, self), status_code, **kwargs)

    def open(self, *args: Any, **kwargs: Any) -> None:
        super().open(*args, **kwargs)
        self._wake = asyncio.Event()
        self._task = asyncio.ensure_future(self._loop())
        self.settings.setdefault(STREAMS_KEY, set()).add(self)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        profiles_sent: dict[str, float] = {}  # each cluster's last profile goes out once per connection
        while True:
            if not self.paused or self._force:
                self._force = False
                try:
                    snap = await loop.run_in_executor(None, self.manager.snapshot, profiles_sent)
                    if self.ws_connection is None:
                        return
                    await self.write_message(
                        json.dumps({"type": "snapshot", **snap, "interval": self.interval, "paused": self.paused})
                    )
                except tornado.websocket.WebSocketClosedError:
                    return
                except Exception as exc:  # a bad read must not kill the stream or spam the log
                    self.log.debug("jupyter_mgpu stream: %s", exc)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), None if self.paused else self.interval)
            except asyncio.TimeoutError:
                pass

    def on_message(self, message: str | bytes) -> None:
        try:
            self.interval, self.paused, send_now = parse_stream_message(message, self.interval, self.paused)
        except ValueError as exc:
            self.write_message(json.dumps({"type": "error", "message": str(exc)}))
            return
        if send_now and self._wake is not None:
            self._force = True
            self._wake.set()

    def on_close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.settings.get(STREAMS_KEY, set()).discard(self)
        super().on_close()


def setup_handlers(web_app: Any, manager: ClusterManager | None = None) -> None:
    """Mount the handlers under the server's base_url and share one manager between them; the default
    manager names each cluster's kernel among the server's (``kernel_id``)."""
    settings = web_app.settings
    web_app.settings[MANAGER_KEY] = manager or ClusterManager(
        kernels=lambda: kernel_pids(settings.get("kernel_manager"))
    )
    web_app.settings.setdefault(STREAMS_KEY, set())
    base = url_path_join(web_app.settings["base_url"], "mgpu", "api")
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "devices"), DevicesHandler),
            (url_path_join(base, "clusters"), ClustersHandler),
            (url_path_join(base, "clusters", r"([^/]+)"), ClusterHandler),
            (url_path_join(base, "clusters", r"([^/]+)", "profile"), ProfileHandler),
            (url_path_join(base, "clusters", r"([^/]+)", "where"), WhereHandler),
            (url_path_join(base, "stream"), StreamHandler),
        ],
    )
