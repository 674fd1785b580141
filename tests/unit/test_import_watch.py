"""A function run right after a module's first import (``engine/records/import_watch.py``), without importing it."""

from __future__ import annotations

import builtins
import importlib
import importlib.machinery
import sys
import uuid

import pytest

from jupyter_mgpu.engine.records.import_watch import AfterImport

BODY = "import builtins\nbuiltins._mgpu_probe_events.append('body ' + __name__)\n"


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """``make(name, package=False)``: a module nobody has imported yet; ``events``: what bodies and watchers did."""
    events: list[str] = []
    monkeypatch.setattr(builtins, "_mgpu_probe_events", events, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []
    watches: list[AfterImport] = []

    def make(stem: str, package: bool = False) -> str:
        name = f"mgpu_probe_{stem}_{uuid.uuid4().hex[:8]}"
        if package:
            (tmp_path / name).mkdir()
            (tmp_path / name / "__init__.py").write_text(BODY)
            (tmp_path / name / "sub.py").write_text(BODY)
        else:
            (tmp_path / f"{name}.py").write_text(BODY)
        importlib.invalidate_caches()
        made.append(name)
        return name

    def watch(name: str) -> AfterImport:
        w = AfterImport(name, lambda: events.append(f"then {name} {name in sys.modules}"))
        watches.append(w)
        return w

    yield make, watch, events
    for w in watches:
        w.remove()
    for name in list(sys.modules):
        if any(name == m or name.startswith(m + ".") for m in made):
            del sys.modules[name]


def test_then_runs_once_right_after_the_first_import_and_not_before(probe):
    make, watch, events = probe
    name = make("plain")
    w = watch(name)
    w.add()
    assert events == [] and name not in sys.modules  # watching imports nothing
    module = importlib.import_module(name)
    assert events == [f"body {name}", f"then {name} True"]
    importlib.import_module(name)
    importlib.reload(module)
    assert events.count(f"then {name} True") == 1 and events.count(f"body {name}") == 2
    assert w not in sys.meta_path


def test_the_module_keeps_its_own_loader_as_if_nothing_had_been_there(probe):
    make, watch, _ = probe
    name = make("loader")
    watch(name).add()
    module = importlib.import_module(name)
    assert type(module.__loader__) is importlib.machinery.SourceFileLoader
    assert module.__spec__.loader is module.__loader__


def test_other_imports_pass_by_and_the_watch_stays(probe):
    make, watch, events = probe
    watched, other = make("watched"), make("other")
    w = watch(watched)
    w.add()
    assert w.find_spec(other, None) is None
    importlib.import_module(other)
    assert events == [f"body {other}"] and w in sys.meta_path


def test_a_module_that_is_not_there_runs_nothing_and_the_watch_stays(probe):
    _, watch, events = probe
    name = f"mgpu_probe_missing_{uuid.uuid4().hex[:8]}"
    w = watch(name)
    w.add()
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)
    assert events == [] and w in sys.meta_path


def test_a_submodule_is_watched_by_its_full_name(probe):
    make, watch, events = probe
    pkg = make("pkg", package=True)
    w = watch(f"{pkg}.sub")
    w.add()
    importlib.import_module(pkg)
    assert events == [f"body {pkg}"] and w in sys.meta_path
    importlib.import_module(f"{pkg}.sub")
    assert events[-2:] == [f"body {pkg}.sub", f"then {pkg}.sub True"] and w not in sys.meta_path


def test_adding_twice_watches_once_and_removing_twice_is_harmless(probe):
    make, watch, events = probe
    name = make("twice")
    w = watch(name)
    w.add()
    w.add()
    assert sys.meta_path.count(w) == 1 and sys.meta_path[0] is w
    w.remove()
    w.remove()
    assert w not in sys.meta_path
    importlib.import_module(name)
    assert events == [f"body {name}"]  # removed before the import: nothing ran
