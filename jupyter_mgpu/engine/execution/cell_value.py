"""A ``%%mgpu`` cell's last value as it leaves a rank: the value itself when it can travel, else what
the rank's display machinery makes of it (the mime bundle a notebook would show); its repr either way.

The notebook shows the value itself where it arrived (so a DataFrame or a plotly figure renders as it
would in the notebook, and ``_`` holds it), formatted there, once: the ranks never pay a formatter's
first-use cost for it (a plotly figure's first bundle imports nbformat and jsonschema, 1 s a process
here, 10 s for 4 ranks on 2 cores). A value that cannot travel — a widget, whose comm lives on the
rank, a value too big to copy, one that does not pickle — is formatted here and shown from that
bundle, and ``_`` holds its repr. See ``session/cell_values.py`` for the notebook's side.
"""

from __future__ import annotations

import pickle
from typing import Any

MAX_TRAVEL_BYTES = 16 << 20  # a bigger last value is shown, not copied: mg.gather or %mgpu_pull copy on purpose


def bundle(value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The value's mime bundle from this process's IPython formatters (a rank's, or the notebook's for a
    value that travelled), without letting an object's own ``_ipython_display_`` publish it here (it
    would show twice)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        shell = None
    if shell is None:
        return {"text/plain": repr(value)}, {}
    formatter = shell.display_formatter
    own_display = formatter.ipython_display_formatter
    enabled = own_display.enabled
    own_display.enabled = False
    try:
        data, metadata = formatter.format(value)
    except Exception:
        data, metadata = {}, {}
    finally:
        own_display.enabled = enabled
    if "text/plain" not in data:
        data["text/plain"] = repr(value)
    return dict(data), dict(metadata)


def _array_bytes(value: Any) -> int:
    """The bytes of a tensor's or an array's elements (0 for other values), known before pickling."""
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return int(value.element_size() * value.nelement())
    except ImportError:
        pass
    nbytes = getattr(value, "nbytes", 0)
    return nbytes if isinstance(nbytes, int) else 0


def _travelling(value: Any) -> bytes | None:
    """The value pickled for the notebook, or None when it cannot travel (or is too big to copy)."""
    if _array_bytes(value) > MAX_TRAVEL_BYTES:
        return None
    if getattr(value, "is_cuda", False):  # the notebook gets a CPU copy (it may have no GPU)
        value = value.cpu()
    try:
        import cloudpickle

        blob = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None
    return blob if len(blob) <= MAX_TRAVEL_BYTES else None


def describe(value: Any) -> dict[str, Any]:
    """{"repr", "data", "metadata", "pickled"}: the last value of a cell, ready to leave this rank
    (``data`` is only its text when it travels: the notebook formats it)."""
    pickled = _travelling(value)
    if pickled is not None:
        text = _repr(value)
        return {"repr": text, "data": {"text/plain": text}, "metadata": {}, "pickled": pickled}
    data, metadata = bundle(value)
    return {"repr": data["text/plain"], "data": data, "metadata": metadata, "pickled": None}


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # the user's __repr__ failed: say so rather than lose the value
        return f"<{type(value).__name__}: repr failed: {type(exc).__name__}>"
