"""Fast controller <-> engine transfer on one host, through shared memory the ranks map directly.

On CPU virtual devices scatter and gather go by address instead (``tensors/process_copy.py``, into and out of
the ranks' own shard memory); what is here serves GPU sessions, files, and systems that forbid that.

ipyparallel pickles tensors (a copy into a message, a copy out of it, per engine). Here the bytes
cross once through an anonymous shared-memory file (``memfd``): the controller writes the tensor
into it, each rank maps only the stretch it needs (``/proc/<controller pid>/fd/<n>``) and copies
its slice into its own shard. Gather is the mirror: ranks write their shards straight into their
places of one preallocated buffer, which becomes the controller's result (no concatenation).

The files have no name anywhere, so nothing is left behind even if the kernel is killed: the memory
goes when the last process closes or unmaps it. On this kind of machine fresh pages cost far more
than copying (first touch ~1 GB/s vs memcpy ~13 GB/s), so scatter reuses one *staging* buffer
(kept up to ``STAGING_MAX`` bytes; :func:`release_staging` frees it) instead of new pages each call.

The other half: ``engine/shards/shared_blocks.py``, its rank side.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STAGING_MAX = 2 * 1024**3
_lock = threading.Lock()
_staging: Buffer | None = None


class Buffer:
    """An anonymous shared-memory file of ``size`` bytes, mapped here; ranks open it by ``path``."""

    def __init__(self, size: int, name: str):
        self.size = size
        self.fd = os.memfd_create(f"jupyter-mgpu-{name}", 0)
        try:
            if size:
                os.ftruncate(self.fd, size)
            self.map = mmap.mmap(self.fd, max(size, 1), flags=mmap.MAP_SHARED) if size else None
        except OSError as exc:
            os.close(self.fd)
            from jupyter_mgpu.errors import MgpuError

            raise MgpuError(
                f"cannot reserve {size} bytes of shared memory ({exc.strerror}); free memory or use smaller tensors"
            ) from None

    @property
    def path(self) -> str:
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def tensor(self, numel: int, dtype: Any) -> Any:
        """The first ``numel`` elements of the buffer as a flat tensor (shares memory)."""
        import torch

        if numel == 0 or self.map is None:
            return torch.empty(0, dtype=dtype)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        return torch.frombuffer(self.map, dtype=torch.uint8, count=nbytes).view(dtype)

    def close(self) -> None:
        """Close the file; an existing mapping (and tensors on it) stays valid until dropped."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@contextmanager
def one_off(nbytes: int) -> Iterator[Buffer]:
    """A fresh buffer for one call; its file is closed when the block ends, also on errors."""
    buf = Buffer(nbytes, "transfer")
    try:
        yield buf
    finally:
        buf.close()


@contextmanager
def staging(nbytes: int) -> Iterator[Buffer]:
    """The reusable staging buffer, at least ``nbytes`` large (one caller at a time).

    Above ``STAGING_MAX`` a one-off buffer is used and nothing is kept.
    """
    global _staging
    if nbytes > STAGING_MAX:
        with one_off(nbytes) as buf:
            yield buf
        return
    with _lock:
        if _staging is None or _staging.size < nbytes:
            release_staging(locked=True)
            _staging = Buffer(nbytes, "staging")
        yield _staging


def release_staging(locked: bool = False) -> int:
    """Free the kept staging buffer; returns the bytes released."""
    global _staging

    def _drop() -> int:
        global _staging
        if _staging is None:
            return 0
        size = _staging.size
        _staging.close()
        try:
            if _staging.map is not None:
                _staging.map.close()
        except BufferError:  # a tensor still views it: the memory goes with that tensor
            pass
        _staging = None
        return size

    if locked:
        return _drop()
    with _lock:
        return _drop()


def staging_bytes() -> int:
    """Bytes the kept staging buffer holds (0 when none)."""
    return _staging.size if _staging is not None else 0


def open_buffers() -> list[str]:
    """Transfer buffers whose files this process still has open, other than the staging buffer.

    Always empty between calls; the tests check that nothing leaks.
    """
    out = []
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if "jupyter-mgpu-transfer" in target:
                out.append(target)
    except OSError:
        pass
    return out


HUGE_PAGE = 2 * 2**20
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)


def new_tensor(shape: tuple[int, ...], dtype: Any) -> Any:
    """``torch.empty(shape)`` whose untouched pages are advised as transparent huge pages.

    A gather into new memory pays for fresh pages; in 2 MiB pages that costs a fraction of 4 KiB ones
    (torch does the same for itself only when ``THP_MEM_ALLOC_ENABLE`` was set before it started).
    """
    import ctypes

    import torch

    out = torch.empty(shape, dtype=dtype)
    nbytes = out.numel() * out.element_size()
    if nbytes >= 2 * HUGE_PAGE:
        start = -(-out.data_ptr() // HUGE_PAGE) * HUGE_PAGE
        end = (out.data_ptr() + nbytes) // HUGE_PAGE * HUGE_PAGE
        if end > start:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_HUGEPAGE)  # advice only
    return out


class RankBlocks:
    """The kernel's mappings of the ranks' shard blocks (``engine/shards/shared_blocks.py``), kept while the
    ranks keep the blocks, so a block reused for the next scatter is written through warm mappings."""

    def __init__(self) -> None:
        self.maps: dict[tuple[int, int], mmap.mmap] = {}

    def view(self, rank: int, meta: dict[str, Any], dtype: Any, shape: tuple[int, ...], offset: int = 0) -> Any:
        """The tensor of ``shape`` at ``offset`` of the block ``meta`` describes (shares memory)."""
        import math

        import torch

        self.forget(rank, meta.get("evicted", ()))
        key = (rank, meta["id"])
        m = self.maps.get(key)
        if m is None:
            fd = os.open(f"/proc/{meta['pid']}/fd/{meta['fd']}", os.O_RDWR)
            try:
                m = mmap.mmap(fd, meta["size"], flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
            finally:
                os.close(fd)
            self.maps[key] = m
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        return torch.frombuffer(m, dtype=torch.uint8, count=nbytes, offset=offset).view(dtype).view(shape)

    def forget(self, rank: int, block_ids: Any) -> None:
        """Unmap blocks the rank has closed (their memory is freed once no mapping remains)."""
        for b in block_ids:
            m = self.maps.pop((rank, b), None)
            if m is not None:
                try:
                    m.close()
                except BufferError:  # a tensor still views it: it goes with that tensor
                    pass

    def close(self) -> None:
        for rank, b in list(self.maps):
            self.forget(rank, [b])


def rank_blocks(session: Any) -> RankBlocks:
    """The session's :class:`RankBlocks`, unmapped when the session shuts down."""
    rb: RankBlocks | None = session.rank_blocks
    if rb is None:
        rb = session.rank_blocks = RankBlocks()
        session.shutdown_callbacks.append(rb.close)
    return rb
