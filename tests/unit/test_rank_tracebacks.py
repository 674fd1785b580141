"""The pure parts of a failure as people read it, without engines: which frames are the user's (their
files, the entry they ran even in site-packages; never runpy's or ours), the one line with the calling
line, the IPython-coloured traceback as folded HTML, and the one-line notes of a run."""

from __future__ import annotations

import os
import runpy
import sys
import textwrap

import pytest

from jupyter_mgpu.engine import rank_traceback
from jupyter_mgpu.errors import RankError
from jupyter_mgpu.magics.rank_tracebacks import ansi_to_html, details_html, grouped
from jupyter_mgpu.session import group_notes
from jupyter_mgpu.session.rank_errors import build_error
from jupyter_mgpu.session.scripts import stale_line


def _raise_from(tmp_path, source: str, run_name: str = "__main__") -> BaseException:
    """Run ``source`` as a script with runpy; its exception, whose traceback starts at runpy (this
    function's own frame dropped, as the engine's call machinery is not in a rank's traceback)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    sys.path.insert(0, str(tmp_path))
    try:
        runpy.run_path(str(script), run_name=run_name)
    except Exception as exc:
        return exc.with_traceback(exc.__traceback__.tb_next)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("helper_mod", None)
    raise AssertionError("the script raised nothing")


def test_the_users_frames_leave_out_runpy_and_libraries_and_mark_the_entry(tmp_path):
    (tmp_path / "helper_mod.py").write_text("import json\n\ndef load(text):\n    return json.loads(text)\n")
    exc = _raise_from(tmp_path, "import helper_mod\n\nhelper_mod.load('{')\n")
    frames = rank_traceback.user_frames(exc.__traceback__, entry=str(tmp_path / "script.py"))
    assert [(os.path.basename(f["file"]), f["line"], f["entry"]) for f in frames] == [
        ("script.py", 3, True),
        ("helper_mod.py", 4, False),
    ]
    assert frames[1]["code"] == "return json.loads(text)"  # json's own frames (the standard library) are not the user's


def test_the_entry_counts_as_the_users_even_inside_a_library(tmp_path):
    import json

    library_file = json.__file__
    assert rank_traceback.library_root(library_file) is not None
    exc = _raise_from(tmp_path, "import json\njson.loads('{')\n")
    assert [f["name"] for f in rank_traceback.user_frames(exc.__traceback__, entry=library_file)] == [
        "<module>",
        "loads",
    ]
    assert rank_traceback.display_path(library_file) == "json/__init__.py"


def test_runpy_and_this_package_are_never_the_users():
    assert rank_traceback.is_internal("<frozen runpy>")
    assert rank_traceback.is_internal(runpy.__file__)
    assert rank_traceback.is_internal(rank_traceback.__file__)
    assert not rank_traceback.is_internal("<mgpu-cell-3>")


def test_the_whole_traceback_is_ipythons_without_runpys_frames(tmp_path):
    (tmp_path / "helper_mod.py").write_text("def check(x):\n    raise ValueError(f'bad {x}')\n")
    exc = _raise_from(tmp_path, "import helper_mod\nhelper_mod.check(2)\n")
    text = rank_traceback.format_traceback(exc, exc.__traceback__)
    plain = rank_traceback.plain(text)
    assert "\x1b[" in text and "\x1b[" not in plain
    assert "runpy" not in plain and "ValueError: bad 2" in plain
    assert plain.index("script.py:2") < plain.index("helper_mod.py:2")
    assert "----> 2 helper_mod.check(2)" in plain  # IPython's context lines and arrow


def _failure(frames: list[dict], evalue: str = "bad 1") -> dict:
    return {"ok": False, "ename": "ValueError", "evalue": evalue, "frames": frames, "traceback": "\x1b[31mtb\x1b[39m"}


def test_the_one_line_names_the_deepest_frame_and_the_entry_line_that_called_it():
    helper = {"file": "helper.py", "line": 3, "name": "check", "code": "raise ValueError(x)", "entry": False}
    caller = {"file": "train.py", "line": 12, "name": "main", "code": "check(x)", "entry": True}
    top = {"file": "train.py", "line": 20, "name": "<module>", "code": "main()", "entry": True}
    err = build_error({1: _failure([top, caller, helper])}, succeeded=[0])
    assert str(err) == (
        "ValueError on rank 1: bad 1 at line 3 of check() in helper.py: raise ValueError(x), "
        "called from line 12 of main() in train.py: check(x) (rank 0 succeeded)"
    )
    cell = {"file": "<cell>", "line": 2, "name": "<module>", "code": "check(rank)", "entry": True}
    in_cell = {"file": "<cell>", "line": 5, "name": "f", "code": "1 / 0", "entry": True}
    assert str(build_error({0: _failure([cell, helper])})).endswith("called from line 2 of the cell: check(rank)")
    assert (  # a function of the cell: its line is the cell's, and the line that called it is named too
        str(build_error({0: _failure([cell, in_cell])}))
        == "ValueError on rank 0: bad 1 at line 5 of the cell, in f(): 1 / 0, called from line 2 of the cell: check(rank)"
    )
    assert str(build_error({0: _failure([top])})) == "ValueError on rank 0: bad 1 at line 20 of train.py: main()"


def test_tracebacks_are_plain_text_per_rank_and_folded_per_group_of_equal_ones():
    err = RankError("x", [0, 1, 3], {0: _failure([]), 1: _failure([]), 3: {**_failure([]), "traceback": "other"}})
    assert err.tracebacks == {0: "tb", 1: "tb", 3: "other"}
    assert grouped({0: "a", 1: "a", 3: "b"}) == [([0, 1], "a"), ([3], "b")]
    closed = "RuntimeError: Connection closed by peer [127.0.0.1]:{}"
    assert grouped({0: closed.format(5032), 2: closed.format(46514)}) == [([0, 2], closed.format(5032))]
    html = details_html(err)
    assert html is not None
    assert html.count("<details") == 2 and "Traceback on ranks 0, 1</summary>" in html
    assert "Traceback on rank 3</summary>" in html and '<span style="color:#e75c58">tb</span>' in html
    # the rank that failed on its own comes first, then those released from a collective waiting for it
    released = {**_failure([]), "traceback": "released", "collective_failure": True}
    err = RankError("x", [0, 1, 2], {0: released, 1: released, 2: {**_failure([]), "traceback": "own"}})
    html = details_html(err) or ""
    assert html.index("Traceback on rank 2<") < html.index("Traceback on ranks 0, 1<")
    assert details_html(RankError("x", [0], {0: {"ok": False}})) is None


@pytest.mark.parametrize(
    ("ansi", "html"),
    [
        ("plain <b>", "plain &lt;b&gt;"),
        ("\x1b[1;32mok\x1b[0m!", '<span style="color:#00a250;font-weight:bold">ok</span>!'),
        ("\x1b[38;5;148mx\x1b[39m", '<span style="color:#afd700">x</span>'),
        ("\x1b[38;2;1;2;3;48;5;232my", '<span style="color:#010203;background-color:#080808">y</span>'),
        ("\x1b[91ma\x1b[22mb\x1b[m c", '<span style="color:#b22b31">a</span><span style="color:#b22b31">b</span> c'),
    ],
)
def test_ansi_colours_become_html_spans(ansi, html):
    assert ansi_to_html(ansi) == html


def test_the_notes_of_a_run_are_one_line_each():
    assert group_notes.line({}) is None
    assert group_notes.line({"init": "gloo, 2 ranks", "destroy": ""}) == (
        "mgpu: init_process_group() joined the session's group (gloo, 2 ranks); destroy_process_group() kept it"
    )
    assert group_notes.line({"destroy": ""}) == (
        "mgpu: destroy_process_group() kept the session's group for the next cells"
    )
    assert "timeout=30 s for this call" in str(group_notes.line({"init": "gloo, 2 ranks", "timeout": "30"}))
    assert stale_line([{"stale": {}}, None]) is None
    assert stale_line([{"stale": {"helper": "helper", "f": "helper"}}, {"stale": {"f": "helper"}}]) == (
        "mgpu: the run imported helper afresh; the cells' helper, f still refer to the copy the cells imported"
    )
