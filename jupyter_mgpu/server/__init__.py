"""Jupyter server extension (the sidebar's API): filled in by the labextension issue."""


def _load_jupyter_server_extension(server_app):  # noqa: ANN001
    server_app.log.debug("jupyter_mgpu server extension loaded (no handlers yet)")
