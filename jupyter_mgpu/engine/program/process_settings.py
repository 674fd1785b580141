"""The process-wide settings a program can change, read and put back as one snapshot.

A torchrun worker is a new Python process: it starts with torch's default settings, fresh random
seeds, no warnings filters or logging handlers of an earlier program, the default signal handlers
and the standard library's own ``print``. A rank lives on between ``%mgpu_run`` runs, so
``engine/program/fresh_program.py`` takes a snapshot of these at engine start and before each run, gives the
run the engine-start one and puts the cells' back afterwards. Covered: torch's default dtype and device,
grad mode, deterministic algorithms, float32 matmul precision, threads, anomaly mode, cuDNN/TF32 flags
and print options; the warnings filters; the root logger's level and handlers; the handlers of the
common signals; and the names a script may rebind in ``builtins``, ``torch``, ``torch.nn.functional``
and ``torch.distributed`` (``setup_for_distributed`` replacing ``builtins.print`` is the usual one).
Random number generators are separate (:func:`save_random`, :func:`fresh_random`, :func:`restore_random`):
a run gets new seeds, not the engine start's.
"""

from __future__ import annotations

import logging
import random
import signal
import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)
TRACKED_MODULES = ("builtins", "torch", "torch.nn.functional", "torch.distributed")


def _torch_settings() -> dict[str, tuple[Callable[[], Any], Callable[[Any], None]]]:
    """name -> (read, write) for torch's process-wide settings."""
    import torch

    cudnn, cuda_matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    opts = torch._tensor_str.PRINT_OPTS

    def set_flags(v: tuple[bool, ...]) -> None:
        cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, cuda_matmul.allow_tf32 = v

    def set_print(v: dict[str, Any]) -> None:
        opts.__dict__.update(v)

    def set_grad(v: bool) -> None:
        torch.set_grad_enabled(v)  # a call sets the mode for the thread, as a statement would

    return {
        "default_dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "default_device": (
            torch.get_default_device,
            lambda v: torch.set_default_device(None if v == torch.device("cpu") else v),
        ),
        "grad_enabled": (torch.is_grad_enabled, set_grad),
        "deterministic": (
            lambda: (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
        ),
        "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "num_threads": (torch.get_num_threads, torch.set_num_threads),
        "anomaly": (
            lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            lambda v: torch.set_anomaly_enabled(v[0], v[1]),
        ),
        "backend_flags": (
            lambda: (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, cuda_matmul.allow_tf32),
            set_flags,
        ),
        "print_options": (lambda: dict(opts.__dict__), set_print),
    }


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def capture() -> dict[str, Any]:
    """A snapshot of every setting this module covers."""
    root = logging.getLogger()
    snap: dict[str, Any] = {
        "torch": {name: read() for name, (read, _) in _torch_settings().items()},
        "warnings": list(warnings.filters),
        "logging": (root.level, list(root.handlers), logging.root.manager.disable),
        "signals": {sig: signal.getsignal(sig) for sig in SIGNALS},
        "globals": {name: dict(vars(sys.modules[name])) for name in TRACKED_MODULES if name in sys.modules},
    }
    return snap


def _put_globals(saved: dict[str, dict[str, Any]]) -> None:
    """Rebind the tracked names whose value changed since ``saved`` (modules never: a submodule
    imported meanwhile stays an attribute of its package)."""
    for name, before in saved.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        now = vars(module)
        for key, value in before.items():
            current = now.get(key, value)
            if current is value or isinstance(value, types.ModuleType) or isinstance(current, types.ModuleType):
                continue
            setattr(module, key, value)


def apply(snap: dict[str, Any]) -> None:
    """Put back every setting as ``snap`` holds it (only what differs is written)."""
    settings = _torch_settings()
    for name, value in snap["torch"].items():
        read, write = settings[name]
        try:
            if read() != value:
                write(value)
        except Exception:  # a setting this build cannot take (a GPU flag without CUDA): left as it is
            pass
    if warnings.filters != snap["warnings"]:
        warnings.filters[:] = snap["warnings"]  # type: ignore[index]  # a list at run time
        mutated = getattr(warnings, "_filters_mutated", None)
        if mutated is not None:  # "once" warnings show again, as in a new process
            mutated()
    level, handlers, disable = snap["logging"]
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        try:
            handler.close()  # a file a script logged to is closed, as at its process's exit
        except Exception:
            pass
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    logging.disable(disable)
    if _in_main_thread():
        for sig, handler in snap["signals"].items():
            if signal.getsignal(sig) is not handler and handler is not None:
                signal.signal(sig, handler)
    _put_globals(snap["globals"])


def save_random() -> dict[str, Any]:
    """The state of every random number generator a program draws from: torch's (CUDA's once
    started), Python's ``random`` and numpy's global one."""
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state(), "random": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    return state


def fresh_random() -> None:
    """New seeds from the operating system's entropy, as a new process gets."""
    import torch

    torch.seed()
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def restore_random(state: dict[str, Any]) -> None:
    """Put back what :func:`save_random` read."""
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["random"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy" in state:
        numpy.random.set_state(state["numpy"])
