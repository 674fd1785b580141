"""Build, load and drive ``native/budget_allocator.cpp``: exact tensor accounting for CPU virtual devices.

The shim is compiled once per torch build (about 2 s with the system's C++ compiler) into the user's
cache directory and loaded with ctypes; each engine installs it in front of torch's CPU allocator.
Where no compiler is found the engine falls back to the OS limit (``budget.py`` says which is used).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("native") / "budget_allocator.cpp"
BUILD_TIMEOUT = 120.0
_lib: ctypes.CDLL | None = None


class BuildError(RuntimeError):
    """The allocator shim could not be built or loaded here."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jupyter_mgpu"


def _torch_facts() -> tuple[Path, str]:
    import torch

    root = Path(torch.__file__).parent
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    return root, f"{torch.__version__}|{root}|{abi}"


def library_path() -> Path:
    """Where the shim for this torch build lives (built or not)."""
    _, facts = _torch_facts()
    key = hashlib.sha256(SOURCE.read_bytes() + facts.encode() + sys.platform.encode()).hexdigest()[:16]
    return cache_dir() / f"budget_allocator-{key}.so"


def build() -> Path:
    """The shim for this torch build, compiled now if it is not in the cache yet."""
    target = library_path()
    if target.exists():
        return target
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not compiler:
        raise BuildError("no C++ compiler (c++, g++ or clang++) was found")
    import torch

    root, _ = _torch_facts()
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem, suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    cmd = [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           f"-I{root / 'include'}", str(SOURCE), f"-L{root / 'lib'}", "-lc10", f"-Wl,-rpath,{root / 'lib'}",
           "-o", tmp]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise BuildError(f"{Path(compiler).name} failed: {last}")
        os.replace(tmp, target)  # atomic: engines building at once never load half a file
    except subprocess.TimeoutExpired:
        raise BuildError(f"compiling took longer than {BUILD_TIMEOUT:.0f} s") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load() -> ctypes.CDLL:
    """The shim's entry points, building it first if needed."""
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL(str(build()))
        except OSError as exc:
            raise BuildError(f"the built shim does not load: {exc}") from None
        for name in ("mgpu_budget_install", "mgpu_budget_adjust"):
            getattr(lib, name).restype = ctypes.c_int
        lib.mgpu_budget_install.argtypes = [ctypes.c_int64]
        lib.mgpu_budget_adjust.argtypes = [ctypes.c_int64]
        lib.mgpu_budget_set.argtypes = [ctypes.c_int64]
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
