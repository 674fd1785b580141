"""Build, load and drive ``native/budget_allocator.cpp``: exact tensor accounting for CPU virtual devices.

The shim is compiled once per torch build (about 2 s with the system's C++ compiler) into the user's
cache directory and loaded with ctypes; each engine installs it in front of torch's CPU allocator.
Each build is checked in a process of its own before it is kept (a shim built on a GPU machine's image
once crashed its engine at the first refusal, in C++ library code the compiler put in the shim), and
the next compiler is tried if it fails. Where no compiler is found, or none makes a shim that passes, the engine falls
back to the OS limit (``budget.py`` says which is used, and why).

Nobody waits for the compiler at ``%mgpu_init``: ``%load_ext`` (``mg.prewarm``) and every start
that finds the shim missing start the compile in a detached, low-priority process
(:func:`build_in_background`; ``python -m jupyter_mgpu.engine.shards.allocator_budget`` builds it ahead of
time by hand). A single-host cluster's supervisor decides once, before it forks the engines
(:func:`settle`): the shim if it is built (waiting only ``grace`` seconds for a compile under way),
else the OS limit for every rank of that cluster, with the reason. Engines started by ipyparallel's
launchers on other hosts still build it themselves when they first need it, as before.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("native") / "budget_allocator.cpp"
BUILD_TIMEOUT = 120.0
_lib: ctypes.CDLL | None = None
_RELEASE_FN = ctypes.CFUNCTYPE(None)
_release_callback: Any = None  # the ctypes callback the shim holds: kept alive as long as the shim may call it
_settled_reason: str | None = None  # set by settle() when this cluster's engines go without the shim
STILL_BUILDING = (
    "the allocator shim is still being compiled in the background (first start after installing "
    "or upgrading torch); this cluster uses the OS limit, the next one the shim"
)


class BuildError(RuntimeError):
    """The allocator shim could not be built or loaded here."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jupyter_mgpu"


def _torch_root() -> Path:
    """torch's package folder, found without importing torch (a second and a half of CPU)."""
    if "torch" in sys.modules:
        torch_file = sys.modules["torch"].__file__
        assert torch_file is not None  # torch is a package imported from its files
        return Path(torch_file).parent
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("torch is not installed here")
    return Path(list(spec.submodule_search_locations)[0])


def library_path() -> Path:
    """Where the shim for this torch build lives (built or not); cheap, torch is not imported.

    The key is the shim's source, torch's folder and its ``version.py`` (version and git commit of the
    build, which fix its C++ ABI)."""
    root = _torch_root()
    try:
        version = (root / "version.py").read_bytes()
    except OSError:
        version = b""
    key = hashlib.sha256(SOURCE.read_bytes() + str(root).encode() + version + sys.platform.encode()).hexdigest()[:16]
    return cache_dir() / f"budget_allocator-{key}.so"


def _compilers() -> list[str]:
    """The C++ compilers to try, in order: ``CXX``, then the system's (each once)."""
    found: list[str] = []
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        path = shutil.which(name) if name else None
        if path and os.path.realpath(path) not in {os.path.realpath(p) for p in found}:
            found.append(path)
    return found


def _compiler() -> str | None:
    return next(iter(_compilers()), None)


def _failed_path(target: Path) -> Path:
    """Where a build that no compiler here could make work says why; named for the compilers tried, so
    another ``CXX`` tries again."""
    key = hashlib.sha256("\0".join(_compilers()).encode()).hexdigest()[:8]
    return target.with_name(f"{target.stem}-{key}.failed")


def _failure(target: Path) -> str | None:
    try:
        return _failed_path(target).read_text().strip() or None
    except OSError:
        return None


def _lock_path(target: Path) -> Path:
    return target.with_suffix(".building")


def building(target: Path | None = None) -> bool:
    """Whether a background compile of the shim is under way (its lock names a live process)."""
    lock = _lock_path(target or library_path())
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def build_in_background() -> subprocess.Popen[bytes] | None:
    """Start compiling the shim in a detached, low-priority process unless it is built, being built, or
    there is no compiler; returns the process started (or None). Never waits for the compiler."""
    if os.environ.get("JUPYTER_MGPU_BUDGET_SHIM", "1") == "0":
        return None
    try:
        target = library_path()
    except (BuildError, OSError):
        return None
    if target.exists() or building(target) or not _compiler() or _failure(target):
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_mgpu.engine.shards.allocator_budget"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=lambda: os.nice(10),
    )


def _build_locked() -> int:
    """Body of the background compile: take the lock (or leave it to the build holding it), build."""
    target = library_path()
    if target.exists():
        return 0
    lock = _lock_path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            if building(target):
                return 0  # another compile is under way
            try:
                os.unlink(lock)  # left by a compile that died
            except FileNotFoundError:
                pass
    else:
        return 1
    try:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        build()
        return 0
    except BuildError as exc:
        print(f"jupyter_mgpu: {exc}", file=sys.stderr)
        return 1
    finally:
        try:
            os.unlink(lock)
        except FileNotFoundError:
            pass


def settle(grace: float, start_time: float | None = None) -> None:
    """Supervisor, before forking a cluster's engines: load the shim if it is built, else every engine
    forked from here falls back to the OS limit with the reason (engines never compile on this path,
    so all ranks agree).

    A compile begun before the start (at ``%load_ext``, epoch ``start_time``) is waited for at most
    ``grace`` seconds: it has had the user's reading time and is nearly done if not done. One begun
    by this start cannot finish in time (its own torch import, then ~2 s of compiler): no wait."""
    global _settled_reason
    if _lib is not None:
        return
    try:
        target = library_path()
        try:
            if start_time is not None and _lock_path(target).stat().st_mtime >= start_time:
                grace = 0.0
        except OSError:
            pass
        deadline = time.monotonic() + grace
        while not target.exists() and time.monotonic() < deadline and building(target):
            time.sleep(0.02)
        if not target.exists():
            raise BuildError(
                _failure(target)
                or (STILL_BUILDING if _compiler() else "no C++ compiler (c++, g++ or clang++) was found")
            )
        load()
    except BuildError as exc:
        _settled_reason = str(exc)


def build() -> Path:
    """The shim for this torch build, compiled now if it is not in the cache yet: by the first compiler
    whose shim passes :func:`_check` (a shim that crashes is never kept), else :class:`BuildError` with why,
    remembered (unless it was a timeout) so that later starts do not compile again."""
    target = library_path()
    if target.exists():
        return target
    failed = _failure(target)
    if failed:
        raise BuildError(failed)
    compilers = _compilers()
    if not compilers:
        raise BuildError("no C++ compiler (c++, g++ or clang++) was found")
    import torch

    root = Path(torch.__file__).parent
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    target.parent.mkdir(parents=True, exist_ok=True)
    reasons, lasting = [], True  # a timeout may pass on a quieter machine: not remembered
    for compiler in compilers:
        fd, tmp = tempfile.mkstemp(prefix=target.stem, suffix=".so.tmp", dir=target.parent)
        os.close(fd)
        try:
            why_not = _compile(compiler, root, abi, tmp) or _check(tmp)
            if why_not is None:
                os.replace(tmp, target)  # atomic: engines building at once never load half a file
                return target
            reasons.append(f"{Path(compiler).name} {why_not[0]}")
            lasting = lasting and why_not[1]
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    why = "; ".join(reasons)
    if lasting:
        _failed_path(target).write_text(why)
    raise BuildError(why)


def _compile(compiler: str, root: Path, abi: int, out: str) -> tuple[str, bool] | None:
    """Compile the shim with ``compiler`` into ``out``; None, or why not and whether that lasts."""
    cmd = [
        compiler,
        "-O2",
        "-std=c++17",
        "-shared",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{root / 'include'}",
        str(SOURCE),
        f"-L{root / 'lib'}",
        "-lc10",
        f"-Wl,-rpath,{root / 'lib'}",
        "-o",
        out,
    ]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"compiling took longer than {BUILD_TIMEOUT:.0f} s", False
    if run.returncode != 0:
        return "failed: " + (run.stderr.strip().splitlines() or ["(no output)"])[-1], True
    return None


# run in a process of its own: a shim that crashes kills the process that tries it
_CHECK = """
import ctypes, sys, torch
lib = ctypes.CDLL(sys.argv[1])
lib.mgpu_budget_install.argtypes = [ctypes.c_int64]
assert lib.mgpu_budget_install(64 << 20) == 0, "torch's CPU allocator is not the plain one"
kept = torch.ones(1 << 20, dtype=torch.uint8)
try:
    torch.empty(128 << 20, dtype=torch.uint8)
except torch.OutOfMemoryError as exc:
    assert "budget is 67108864 bytes" in str(exc), str(exc)
else:
    raise AssertionError("an allocation past the budget was not refused")
assert int(kept.sum()) == 1 << 20
"""


def _check(path: str) -> tuple[str, bool] | None:
    """Load the built shim in a fresh process and have it refuse an allocation past a budget; None, or
    why it failed and whether that lasts."""
    try:
        run = subprocess.run([sys.executable, "-c", _CHECK, path], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "built a shim whose check did not end in 120 s", False
    if run.returncode == 0:
        return None
    if run.returncode < 0:
        import signal

        return (
            f"built a shim that crashed its check ({signal.Signals(-run.returncode).name}); set CXX to the "
            "compiler torch was built with (torch.__config__.show() names it)"
        ), True
    return "built a shim that failed its check: " + (run.stderr.strip().splitlines() or ["(no output)"])[-1], True


def load() -> ctypes.CDLL:
    """The shim's entry points, building it first if needed."""
    global _lib
    if _lib is None:
        if _settled_reason is not None:  # the supervisor decided for this cluster (settle)
            raise BuildError(_settled_reason)
        try:
            lib = ctypes.CDLL(str(build()))
        except OSError as exc:
            raise BuildError(f"the built shim does not load: {exc}") from None
        for name in ("mgpu_budget_install", "mgpu_budget_adjust"):
            getattr(lib, name).restype = ctypes.c_int
        lib.mgpu_budget_install.argtypes = [ctypes.c_int64]
        lib.mgpu_budget_adjust.argtypes = [ctypes.c_int64]
        lib.mgpu_budget_set.argtypes = [ctypes.c_int64]
        lib.mgpu_budget_on_oom.argtypes = [_RELEASE_FN]
        lib.mgpu_budget_arm.argtypes = [ctypes.c_int]
        for name in ("mgpu_budget_allocated", "mgpu_budget_peak"):
            getattr(lib, name).restype = ctypes.c_int64
        _lib = lib
    return _lib


def install(budget_bytes: int) -> None:
    """Count and cap this process's CPU tensor bytes at ``budget_bytes`` from now on."""
    if load().mgpu_budget_install(int(budget_bytes)) != 0:
        raise BuildError("torch's CPU allocator here is not the plain one; it was left alone")


def installed() -> bool:
    return _lib is not None


def allocated() -> int:
    """Bytes of live CPU tensors (and charged shard blocks) now."""
    return int(_lib.mgpu_budget_allocated()) if _lib is not None else 0


def peak() -> int:
    return int(_lib.mgpu_budget_peak()) if _lib is not None else 0


def reset_peak() -> None:
    if _lib is not None:
        _lib.mgpu_budget_reset_peak()


def adjust(delta: int) -> bool:
    """Charge (``delta`` > 0) or give back bytes held outside the allocator; False if over the budget."""
    return _lib is None or _lib.mgpu_budget_adjust(int(delta)) == 0


def on_out_of_memory(release: Callable[[], Any]) -> None:
    """Have the shim call ``release`` once, and retry, when an allocation would pass the budget while
    :func:`arm` says something can be given back (``held_failure.py``: the last failure's frames)."""
    global _release_callback

    def call() -> None:
        try:
            release()
        except BaseException:  # nothing may unwind into the C++ allocator
            pass

    _release_callback = _RELEASE_FN(call)
    if _lib is not None:
        _lib.mgpu_budget_on_oom(_release_callback)


def arm(armed: bool) -> None:
    """Whether the next allocation that would pass the budget calls the release of :func:`on_out_of_memory`."""
    if _lib is not None:
        _lib.mgpu_budget_arm(1 if armed else 0)


if __name__ == "__main__":  # the background compile (build_in_background), or a build ahead of time by hand
    sys.exit(_build_locked())
