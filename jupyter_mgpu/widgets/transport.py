"""The frame players' ES modules, each with the shared transport controls (``static/transport.js``)
prepended: two anywidget modules cannot import each other without a bundling step."""

from __future__ import annotations

import pathlib

STATIC = pathlib.Path(__file__).parent / "static"


def module_source(name: str) -> str:
    """``static/transport.js`` followed by ``static/<name>``, as one ES module's source."""
    return (STATIC / "transport.js").read_text(encoding="utf-8") + "\n" + (STATIC / name).read_text(encoding="utf-8")
