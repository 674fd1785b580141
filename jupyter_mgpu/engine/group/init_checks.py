"""The arguments of a user's ``dist.init_process_group(...)``, checked as torch checks them.

On a rank that already belongs to the session's group, ``engine/group/user_process_group.py`` does not call
torch's function, so the checks torch makes on the way must be made here, in torch's order and with
torch's exception types and words: a script that torchrun would stop must stop here too, not pass.
``tests/unit/test_init_checks.py`` runs each case through torch's own ``init_process_group`` in a
new process and compares. :func:`check` returns the arguments made plain for the session's own
checks (backend names, timeout in seconds, the rendezvous URL's rank and world size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlparse


@dataclass(frozen=True)
class InitRequest:
    """What a checked ``init_process_group`` call asks for, in the session's terms."""

    backend: str  # as torch names it ("undefined" when left out)
    timeout_s: float | None  # the timeout given, None when left out
    world_size: int  # -1 when left out
    rank: int  # -1 when left out
    device: Any  # the torch.device given, or None


def _device_id(device_id: Any) -> Any:
    """torch's own checks of ``device_id``: an int becomes the accelerator's device; a device must be
    this build's accelerator, with an index in range."""
    import torch

    acc = torch.accelerator.current_accelerator()
    if isinstance(device_id, int):
        if acc is None:
            raise ValueError(
                "device_id is an int, but no accelerator support is found from the current compilation. "
                "Please use a different compiled version that supports your accelerator."
            )
        device_id = torch.device(acc.type, device_id)
    if device_id is not None and device_id.type != "cpu":
        if acc is None or device_id.type != acc.type:
            raise ValueError(
                f"device_id {device_id} does not match the current compilation's accelerator support: {acc}. "
                "Please use a different compiled version that supports your accelerator."
            )
        if device_id.index is None:
            raise ValueError("Please use a device_id with index.")
        if device_id.index >= torch.accelerator.device_count():
            raise ValueError(
                f"device_id {device_id} is out of range. Please use a device index less than "
                f"the number of accelerators available: {torch.accelerator.device_count()}."
            )
    return device_id


def _rendezvous(init_method: str, rank: int, world_size: int) -> tuple[int, int]:
    """torch's rendezvous checks of an ``init_method`` URL; the rank and world size it names."""
    import importlib

    rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module, not dist.rendezvous()
    url = urlparse(init_method)
    if url.scheme not in rdzv._rendezvous_handlers:
        raise RuntimeError(f"No rendezvous handler for {url.scheme}://")
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}
    if rank == -1 and "rank" in query:
        rank = int(query["rank"])
    if world_size == -1 and "world_size" in query:
        world_size = int(query["world_size"])
    return rank, world_size


def check(
    backend: Any = None,
    init_method: str | None = None,
    timeout: Any = None,
    world_size: int = -1,
    rank: int = -1,
    store: Any = None,
    pg_options: Any = None,
    device_id: Any = None,
) -> InitRequest:
    """Raise what torch's ``init_process_group`` raises for these arguments; else what they ask for."""
    from torch.distributed import distributed_c10d as c10d

    if not ((store is None) or (init_method is None)):
        raise AssertionError("Cannot specify both init_method and store.")
    if store is not None:
        if not world_size > 0:
            raise AssertionError("world_size must be positive if using store")
        if not rank >= 0:
            raise AssertionError("rank must be non-negative if using store")
    elif init_method is None:
        init_method = "env://"
    device_id = _device_id(device_id)
    if backend is None and device_id is not None:
        backend = c10d.Backend.default_device_backend_map.get(device_id.type)
    name = c10d.Backend("undefined" if backend is None else backend)
    if timeout is not None:
        c10d._check_valid_timeout(timeout)
    if store is None:
        rank, world_size = _rendezvous(str(init_method), rank, world_size)
    if device_id is not None and (device_id.index is None or device_id.type == "cpu"):
        raise ValueError("init_process_group device_id parameter must be an accelerator with an index")
    if "," in str(name) or ":" in str(name):
        c10d.BackendConfig(name)  # "cpu:gloo,cuda:nccl": torch's own parser says what is wrong
    elif name not in c10d.Backend.backend_type_map:
        raise AssertionError(f"Unknown backend type {name}")
    seconds = None if timeout is None else timeout.total_seconds()
    return InitRequest(str(name), seconds, int(world_size), int(rank), device_id)
