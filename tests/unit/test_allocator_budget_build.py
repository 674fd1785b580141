"""The budget shim is never compiled on the start path: a start finds it built, or starts it compiling in
the background and the cluster falls back to the OS limit, saying why; all without importing torch."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jupyter_mgpu.engine.shards import allocator_budget as ab


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(ab, "_lib", None)
    monkeypatch.setattr(ab, "_settled_reason", None)
    return tmp_path / "jupyter_mgpu"


def _hold_lock(target) -> subprocess.Popen:
    """A live process named in the build lock, as a compile under way would be."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    target.parent.mkdir(parents=True, exist_ok=True)
    ab._lock_path(target).write_text(str(proc.pid))
    return proc


def test_library_path_does_not_import_torch():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from jupyter_mgpu.engine.shards import allocator_budget as a; "
            "p = a.library_path(); print('torch' in sys.modules, p.name)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    imported, name = out.stdout.split()
    assert imported == "False" and name.startswith("budget_allocator-") and name.endswith(".so")


def test_a_compile_begun_by_this_start_is_not_waited_for(empty_cache):
    target = ab.library_path()
    proc = _hold_lock(target)
    try:
        t = time.monotonic()
        ab.settle(grace=30.0, start_time=time.time() - 1)  # the lock is newer than the start
        assert time.monotonic() - t < 15  # not the grace
        assert ab._settled_reason == ab.STILL_BUILDING
        with pytest.raises(ab.BuildError, match="still being compiled"):  # what each engine then says
            ab.load()
    finally:
        proc.kill()
        proc.wait()


def test_a_compile_begun_at_load_ext_gets_the_grace_only(empty_cache):
    target = ab.library_path()
    proc = _hold_lock(target)
    try:
        t = time.monotonic()
        ab.settle(grace=0.3, start_time=time.time() + 1)  # the lock is older than the start
        took = time.monotonic() - t
        assert 0.25 < took < 15  # the grace, not the compile (held until killed)
        assert ab._settled_reason == ab.STILL_BUILDING
    finally:
        proc.kill()
        proc.wait()


def test_without_a_compiler_the_reason_says_so_and_nothing_is_started(empty_cache, monkeypatch):
    monkeypatch.setattr(ab, "_compiler", lambda: None)
    assert ab.build_in_background() is None
    ab.settle(grace=0.3)
    assert ab._settled_reason == "no C++ compiler (c++, g++ or clang++) was found"


def test_a_stale_lock_is_not_a_build_under_way(empty_cache):
    target = ab.library_path()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    target.parent.mkdir(parents=True, exist_ok=True)
    ab._lock_path(target).write_text(str(proc.pid))
    assert not ab.building(target)


def test_the_shim_off_switch_starts_no_compile(empty_cache, monkeypatch):
    monkeypatch.setenv("JUPYTER_MGPU_BUDGET_SHIM", "0")
    assert ab.build_in_background() is None
    assert not os.path.exists(empty_cache)


def test_a_compiler_whose_shim_crashes_is_not_used_and_the_reason_is_kept(empty_cache, tmp_path, monkeypatch):
    # a "compiler" whose shim crashes when installed, as one of another GCC than torch's did at its first refusal
    fake = tmp_path / "other-g++"
    fake.write_text(
        '#!/bin/sh\nwhile [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
        "printf 'int mgpu_budget_install(long b) { return *(volatile int *)0; }' "
        '| c++ -x c -shared -fPIC - -o "$out"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(ab, "_compilers", lambda: [str(fake)])
    with pytest.raises(ab.BuildError, match="other-g\\+\\+ built a shim that crashed its check .SIGSEGV.*set CXX"):
        ab.build()
    target = ab.library_path()
    assert not target.exists()
    assert ab.build_in_background() is None  # later starts do not compile again
    ab.settle(grace=0.3)
    assert "SIGSEGV" in str(ab._settled_reason)  # what the cluster says it uses the OS limit for
