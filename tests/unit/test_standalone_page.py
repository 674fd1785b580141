"""A player as one self-contained HTML page (``widgets/standalone_page.py``): module inlined, state as JSON, atomic write."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from html.parser import HTMLParser

import pytest

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.widgets import standalone_page as sp
from jupyter_mgpu.widgets.transport import module_source


class _Page(HTMLParser):
    """The page's title, its scripts (by id, or in order) and the elements it has."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.title = ""
        self.tags: list[str] = []
        self._in: tuple[str, dict[str, str | None]] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag in ("script", "title"):
            self._in = (tag, dict(attrs))
            if tag == "script":
                self.scripts.append((dict(attrs), ""))

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in and self._in[0] == "title":
            self.title += data
        elif self._in and self._in[0] == "script":
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


ESM = "export function helper() { return 1; }\nfunction render({ model, el }) { el.textContent = model.get('x'); }\nexport default { render };\n"


@pytest.mark.parametrize(
    "state",
    [
        {"x": 1},
        {"frames": [[1, 2], [3]], "title": "a </script><script>alert(1)</script> b", "note": "<!-- -->"},
        {"unicode": "rank 0 → rank 1 · ümlaut", "nested": {"a": [None, True, 1.5]}},
    ],
)
def test_the_state_reads_back_from_the_page_whatever_its_strings_hold(state):
    page = _Page(sp.page(ESM, state, "t"))
    (data,) = [text for attrs, text in page.scripts if attrs.get("id") == "mgpu-state"]
    assert json.loads(data) == state
    assert len(page.scripts) == 2  # the state and the code: nothing in the state opened a script of its own


def test_the_title_is_escaped_and_the_root_is_there():
    title = "trace <b>&amp; 'x'</b>"
    text = sp.page(ESM, {}, title)
    page = _Page(text)
    assert page.title == title
    assert text.startswith("<!DOCTYPE html>") and 'id="mgpu-root"' in text and "<b>" not in text


def test_the_module_is_inlined_as_a_plain_script_that_renders_into_the_root():
    page = _Page(sp.page(ESM, {"x": 2}, "t"))
    (code,) = [text for attrs, text in page.scripts if "id" not in attrs]
    assert "export" not in code
    assert "function helper()" in code and "function render(" in code
    assert 'render({ model, el: document.getElementById("mgpu-root") })' in code


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
@pytest.mark.parametrize("player", ["placement.js", "schedule.js"])
def test_a_real_players_page_script_is_valid_javascript(player, tmp_path):
    page = _Page(sp.page(module_source(player), {"data": {}}, "t"))
    (code,) = [text for attrs, text in page.scripts if "id" not in attrs]
    assert not re.search(r"^\s*export\b", code, flags=re.M)
    path = tmp_path / "page.cjs"  # a classic script, as the page's <script> runs it
    path.write_text(code, encoding="utf-8")
    done = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def _leftovers(folder) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(".mgpu-")]


def test_write_puts_the_text_in_place_readable_by_all(tmp_path):
    path = tmp_path / "trace.html"
    assert sp.write("<p>one</p>", path) == str(path)
    path_again = sp.write("<p>two ü</p>", str(path))
    assert path_again == str(path) and path.read_text(encoding="utf-8") == "<p>two ü</p>"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert _leftovers(tmp_path) == []


def test_write_into_a_missing_folder_says_so_and_leaves_nothing(tmp_path):
    path = tmp_path / "nowhere" / "trace.html"
    with pytest.raises(MgpuError, match="does not exist") as err:
        sp.write("x", path)
    assert str(tmp_path / "nowhere") in str(err.value)
    assert not (tmp_path / "nowhere").exists()


def test_a_failed_write_keeps_what_was_there_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "taken"
    target.mkdir()
    (target / "keep.txt").write_text("kept")
    with pytest.raises(MgpuError, match="cannot write"):
        sp.write("x", target)
    assert (target / "keep.txt").read_text() == "kept"
    assert _leftovers(tmp_path) == []
