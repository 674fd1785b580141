"""Jupyter server extension behind the JupyterLab sidebar: this user's clusters and devices, live.

Enabled on install (``jupyter-config/server-config/jupyter_mgpu.json``); the handlers live in
:mod:`.handlers`, the tornado-free logic in :mod:`.manager`.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.server.manager import ClusterManager, ClusterNotFound

__all__ = ["ClusterManager", "ClusterNotFound"]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from jupyter_mgpu.server.handlers import setup_handlers

    setup_handlers(server_app.web_app)
    server_app.log.info("jupyter_mgpu server extension loaded at %smgpu/api/", server_app.web_app.settings["base_url"])


load_jupyter_server_extension = _load_jupyter_server_extension
