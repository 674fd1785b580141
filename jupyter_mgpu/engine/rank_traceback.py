"""A rank's failure as a person reads it: the frames of the code the user ran, never runpy's or ours.

The code the user ran is their cells, scripts, helpers and notebook functions, and the *entry* they
ran — a ``%%mgpu`` cell, a script, or a ``-m`` module even when it lives in site-packages. Library
frames (the standard library, site-packages) are not theirs, except the entry's own. :func:`user_frames`
lists those frames, marking the entry's, so the one-line error can name the deepest frame and the
entry line that led there; :func:`format_traceback` is the whole traceback, coloured as IPython
colours one, without runpy's frames or ours. ``engine/execution/calls.py`` reports failures with these; the
controller shows them (``session/rank_errors.py``, ``magics/rank_tracebacks.py``).
"""

from __future__ import annotations

import os
import re
import site
import sysconfig
import traceback
import types
from functools import lru_cache
from typing import Any

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # jupyter_mgpu/
CELL_FILE = re.compile(r"<mgpu-cell-\d+>")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Where the standard library and installed packages live (longest first)."""
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path))
    for path in [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]:
        roots.add(os.path.realpath(path))
    return tuple(sorted(roots, key=len, reverse=True))


@lru_cache(maxsize=4096)
def _real(path: str) -> str:
    return os.path.realpath(path)


def is_internal(filename: str) -> bool:
    """A frame of ours, of runpy, or code ipyparallel runs from a string: never shown as the user's."""
    if filename.startswith("<frozen runpy") or os.path.basename(filename) == "runpy.py" or filename == "<string>":
        return True
    return not filename.startswith("<") and _real(filename).startswith(PACKAGE_DIR + os.sep)


def library_root(filename: str) -> str | None:
    """The library directory ``filename`` lies in (site-packages, the standard library), or None."""
    if filename.startswith("<frozen "):
        return "<frozen>"
    if filename.startswith("<"):
        return None
    real = _real(filename)
    for root in _library_roots():
        if real.startswith(root + os.sep):
            return root
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in real:
            return real[: real.index(marker) + len(marker) - 1]
    return None


def display_path(filename: str) -> str:
    """How a message names a file: relative to the working directory when under it, a library file
    from its package down (``accelerate/utils/ops.py``), otherwise as it is."""
    if filename.startswith("<"):
        return filename
    root = library_root(filename)
    real = _real(filename)
    if root and root != "<frozen>":
        return os.path.relpath(real, root)
    try:
        here = os.getcwd()
    except OSError:
        return filename
    return os.path.relpath(real, here) if real.startswith(here + os.sep) else filename


def _same_file(a: str, b: str | None) -> bool:
    return b is not None and (a == b or (not a.startswith("<") and not b.startswith("<") and _real(a) == _real(b)))


def place(f: dict[str, Any]) -> str:
    """``line 3 of the cell: x = 1/0``, ``line 4 of the cell, in average(): ...`` (a function the cell
    defines: the line is still the cell's) or ``line 7 of check() in helper.py: raise ValueError(...)``, for a
    frame as :func:`user_frames` gives it (``code`` optional)."""
    if f["file"] in ("<cell>",) or CELL_FILE.fullmatch(f["file"]):
        where = "the cell" if f["name"] in ("<module>", "<cell>") else f"the cell, in {f['name']}()"
    elif f["name"] == "<module>":
        where = f["file"]
    else:
        where = f"{f['name']}() in {f['file']}"
    code = f": {f['code']}" if f.get("code") else ""
    return f"line {f['line']} of {where}{code}"


def is_users(filename: str) -> bool:
    """Whether a frame of ``filename`` is the user's own code (not a library's, not ours, not runpy's)."""
    return not is_internal(filename) and library_root(filename) is None


def user_frames(tb: Any, entry: str | None = None) -> list[dict[str, Any]]:
    """The frames of ``tb`` that belong to the code the user ran, outermost first; ``entry`` (a file
    name) is the cell, script or module they ran, whose frames are marked ``"entry": True``."""
    frames = []
    for fs in traceback.extract_tb(tb):
        fname = fs.filename
        is_entry = _same_file(fname, entry)
        if not is_entry and (is_internal(fname) or library_root(fname) is not None):
            continue
        frames.append(
            {
                "file": display_path(fname),
                "line": fs.lineno,
                "name": fs.name,
                "code": (fs.line or "").strip(),
                "entry": is_entry,
            }
        )
    return frames


def without_internal_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A copy of the traceback chain ``tb`` with runpy's frames and ours left out."""
    kept = []
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    chain = None
    for item in reversed(kept):
        chain = types.TracebackType(chain, item.tb_frame, item.tb_lasti, item.tb_lineno)
    return chain


def _formatter() -> Any:
    """IPython's traceback formatter in its Context mode (what a notebook shows), in colour."""
    from IPython.core import ultratb

    try:
        return ultratb.FormattedTB(mode="Context", theme_name="neutral")  # IPython 9
    except TypeError:
        return ultratb.FormattedTB(mode="Context", color_scheme="Linux")  # type: ignore[call-arg]  # IPython 8


def format_traceback(exc: BaseException, tb: Any, quick: bool = False) -> str:
    """The whole traceback of ``exc`` as IPython colours it (ANSI), runpy's frames and ours left out;
    a ``%%mgpu`` cell's frames read ``Cell %%mgpu, line N`` as a notebook cell's read ``Cell In[5]``.
    ``quick``: Python's own text instead (IPython's reads every frame's source file, tens of ms a file)."""
    kept = without_internal_frames(tb)
    try:
        if quick:
            raise RuntimeError("quick")
        text = _formatter().text(type(exc), exc, kept)
    except Exception:  # quick, an unusual exception or a formatter that fails: Python's own text
        text = "".join(traceback.format_exception(type(exc), exc, kept))
    return re.sub(r"File ((?:\x1b\[[0-9;]*m)*)<mgpu-cell-\d+>:(\d+)", r"Cell \1%%mgpu, line \2", text)


def plain(text: str) -> str:
    """``text`` without its ANSI colour codes."""
    return ANSI.sub("", text)
