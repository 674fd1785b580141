"""The telemetry sampler reads the main thread's stack without keeping a returning function's locals alive
(``engine/watch/main_stack.py``): CI once measured a matmul's peak 320 KiB over its prediction, a send buffer
kept by a frame the sampler held while it named the line."""

from __future__ import annotations

import builtins
import importlib
import sys
import threading
import uuid
import weakref
from types import SimpleNamespace

import pytest

from jupyter_mgpu.engine import rank_traceback
from jupyter_mgpu.engine.watch import collective_watch
from jupyter_mgpu.engine.watch.main_stack import main_stack


class Buffer:
    """Stands for a tensor the rank's code frees by returning."""


@pytest.mark.parametrize(
    "read",
    [
        lambda: collective_watch.where(SimpleNamespace(call_depth=1, call_started=0.0, debugging=None))["line"],
        lambda: collective_watch.stack()[-1],
    ],
    ids=["where", "stack"],
)
def test_a_stack_read_while_a_function_returns_does_not_keep_its_locals(monkeypatch, read):
    collective_watch._place_of.cache_clear()
    naming, named = threading.Event(), threading.Event()
    real = rank_traceback.display_path

    def slow_display_path(filename: str) -> str:  # naming a line asks the file system: the main thread runs on
        naming.set()
        named.wait(10)
        return real(filename)

    monkeypatch.setattr(rank_traceback, "display_path", slow_display_path)
    inside, said = threading.Event(), []
    sampler = threading.Thread(target=lambda: (inside.wait(10), said.append(read())), daemon=True)
    sampler.start()

    def holds_a_buffer() -> weakref.ref[Buffer]:
        buffer = Buffer()
        inside.set()
        assert naming.wait(10)  # the sampler has read the stack and is naming this line
        return weakref.ref(buffer)

    freed = holds_a_buffer()() is None
    named.set()
    sampler.join(10)
    assert freed, "the sampler's read of the stack kept the returned function's buffer alive"
    assert said and "holds_a_buffer()" in said[0]  # it still names the line the main thread was at


def test_an_import_in_progress_is_read_with_the_module_it_loads(tmp_path, monkeypatch):
    got: list = []
    name = f"mgpu_probe_stack_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import threading\nfrom jupyter_mgpu.engine.watch.main_stack import main_stack\n"
        "import builtins\nt = threading.Thread(target=lambda: builtins._mgpu_stack.append(main_stack()))\n"
        "t.start()\nt.join(10)\n"
    )
    monkeypatch.setattr(builtins, "_mgpu_stack", got, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)
    (lines,) = got
    assert [at.importing for at in lines if at.importing] == [name]
    body = next(i for i, at in enumerate(lines) if at.code.co_filename.endswith(f"{name}.py"))
    assert lines[body].line in (5, 6) and body < next(
        i for i, at in enumerate(lines) if at.importing
    )  # innermost first
    assert isinstance(main_stack(), tuple)  # this very thread is the main one: its own stack reads too
