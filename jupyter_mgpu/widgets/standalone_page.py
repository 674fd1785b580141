"""A player widget as one self-contained HTML page: its ES module inlined, a small in-page model in
place of the kernel's, the data as JSON. Placement traces and pipeline schedules both save this way."""

from __future__ import annotations

import html
import json
import os
import tempfile
from typing import Any

from jupyter_mgpu.errors import MgpuError


def page(esm: str, state: dict[str, Any], title: str) -> str:
    """The page: ``esm`` (an anywidget module exporting ``render``) rendering ``state``."""
    js = esm.replace("export function ", "function ").replace("export default { render };", "")
    payload = json.dumps(state, separators=(",", ":")).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>
<body style="margin:12px">
<div id="mgpu-root"></div>
<script id="mgpu-state" type="application/json">{payload}</script>
<script>
{js}
(function () {{
  const state = JSON.parse(document.getElementById("mgpu-state").textContent);
  const handlers = {{}};
  const model = {{
    get: (k) => state[k],
    set: (k, v) => {{ const old = state[k]; state[k] = v; if (old !== v) (handlers["change:" + k] || []).forEach(f => f()); }},
    on: (e, f) => {{ (handlers[e] = handlers[e] || []).push(f); }},
    save_changes: () => {{}}
  }};
  window.mgpuModel = model;
  render({{ model, el: document.getElementById("mgpu-root") }});
}})();
</script></body></html>
"""


def write(text: str, path: str | os.PathLike[str]) -> str:
    """Write ``text`` to ``path`` atomically (a failure leaves nothing behind); returns the path."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise MgpuError(f"cannot write {path}: the folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mgpu-", suffix=".html.part", dir=folder)
    except OSError as exc:
        raise MgpuError(f"cannot write {path}: {exc.strerror or exc} (choose a folder you can write to)") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise MgpuError(f"cannot write {path}: {exc.strerror or exc} (choose a path you can write to)") from None
    return path
