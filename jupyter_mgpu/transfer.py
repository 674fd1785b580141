"""Fast controller <-> engine transfer on one host, through a shared-memory file.

ipyparallel pickles tensors (a copy into a message, a copy out of it, per engine). Here the
controller writes the tensor's bytes once into a file in ``/dev/shm`` (mode 0600, unique name);
each rank maps only the stretch it needs and copies its slice into its own shard. Gather is the
mirror: ranks write their shards straight into their places of one preallocated file, which the
controller maps as the result tensor (no concatenation; with ``out=`` one copy into ``out``).
Every file is unlinked when the call returns, also on errors.
"""

from __future__ import annotations

import mmap
import os
import secrets
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator

SHM_DIR = "/dev/shm"


def shm_dir() -> str:
    """``/dev/shm`` where it is a writable directory, else the temp dir (still one host)."""
    if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK):
        return SHM_DIR
    return tempfile.gettempdir()


@contextmanager
def shared_file(nbytes: int, tag: str = "x") -> Iterator[str]:
    """A fresh private file of ``nbytes`` in shared memory; removed when the block ends."""
    path = os.path.join(shm_dir(), f"jupyter-mgpu-{os.getpid()}-{tag}-{secrets.token_hex(6)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            if nbytes:
                os.posix_fallocate(fd, 0, nbytes)
        except OSError as exc:
            os.close(fd)
            fd = -1
            from .errors import MgpuError

            raise MgpuError(f"cannot reserve {nbytes} bytes of shared memory in {shm_dir()} ({exc.strerror}); "
                            "free memory or use smaller tensors") from None
        finally:
            if fd >= 0:
                os.close(fd)
        yield path
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def map_tensor(path: str, numel: int, dtype: Any, write: bool = True) -> Any:
    """A flat tensor backed by the whole file ``path`` (MAP_SHARED, prefaulted)."""
    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    if numel == 0:
        return torch.empty(0, dtype=dtype)
    fd = os.open(path, os.O_RDWR)
    try:
        m = mmap.mmap(fd, numel * itemsize, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    finally:
        os.close(fd)
    return torch.frombuffer(m, dtype=torch.uint8).view(dtype)


def write_tensor(path: str, tensor: Any) -> None:
    """Copy ``tensor``'s elements, row-major, into the file ``path``."""
    flat = map_tensor(path, tensor.numel(), tensor.dtype)
    if tensor.numel():
        flat.view(tensor.shape).copy_(tensor)
    del flat


def existing_leftovers() -> list[str]:
    """Shared-memory files this process made and has not removed (should always be empty)."""
    prefix = f"jupyter-mgpu-{os.getpid()}-"
    try:
        return sorted(f for f in os.listdir(shm_dir()) if f.startswith(prefix))
    except OSError:
        return []
