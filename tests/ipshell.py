"""The one global IPython shell the tests drive magics through (globalipapp starts it once per process)."""

from __future__ import annotations

from typing import Any


def shell() -> Any:
    """The global test shell with ``jupyter_mgpu`` loaded."""
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython() or get_ipython()  # start_ipython returns None once it has run
    ip.run_line_magic("load_ext", "jupyter_mgpu")
    return ip
