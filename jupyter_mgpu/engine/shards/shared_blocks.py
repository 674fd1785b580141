"""Shards the notebook can write and read directly: rank-owned shared-memory blocks, kept warm.

On a CPU virtual device, ``mg.scatter`` asks each rank for a block (an anonymous ``memfd``) the size
of its shard; the kernel maps it (``/proc/<rank pid>/fd/<n>``) and copies the slice straight in, and
the shard *is* that memory: one copy in all, as ``Tensor.copy_`` in one process would do. ``gather``
reads such shards the same way. When a shard's last view dies its block goes back to a small cache
(like CUDA's caching allocator: "reserved" vs "allocated"), so the next scatter of that size writes
into pages that are already there: fresh pages cost several times a copy on these machines.

Where the kernel may copy into the rank's memory by address (``tensors/process_copy.py``), blocks are private
memory in transparent huge pages instead of memfds: fresh huge pages fault in several times faster.

Blocks count against the device budget, cached ones included, like tensors (``budget.charge``):
where the budget is kept at torch's allocator they are added to its count; under the OS limit,
shared mappings (outside RLIMIT_DATA) lower its soft limit and private blocks count by themselves.

The other half: ``tensors/shared_blocks.py``, its controller side.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import weakref
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.shards import budget

PAGE = mmap.PAGESIZE
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
CACHE_SHARE = 0.25  # at most this share of the budget stays reserved in free blocks
_lock = threading.RLock()  # a view can die (and release its block) while the lock is held
_blocks: dict[int, Block] = {}
_evicted: list[int] = []
_pending: set[int] = set()  # reserved by a scatter, not yet a shard
_next_id = [1]


class Block:
    """``size`` bytes mapped in this rank: a memfd the kernel maps too (``shared``), or private memory in
    huge pages that the kernel writes and reads with ``process_vm_writev/readv`` (``tensors/process_copy.py``)."""

    def __init__(self, size: int, shared: bool = True) -> None:
        self.id = _next_id[0]
        _next_id[0] += 1
        self.size = size
        self.shared = shared
        if shared:
            self.fd = os.memfd_create(f"jupyter-mgpu-shard-{self.id}", 0)
            os.ftruncate(self.fd, size)
            self.map = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED)
        else:  # faulted in by the kernel's copy itself, 2 MiB at a time: cheaper than faulting first
            self.fd = -1
            self.map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            self.map.madvise(MADV_HUGEPAGE)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        if shared:
            try:  # fault the pages in here, every rank at once, not later one by one in the kernel's copy
                self.map.madvise(MADV_POPULATE_WRITE)
            except OSError:  # kernels before 5.14
                pass
        self.in_use = True

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # still viewed somewhere: the memory goes with the last view
            pass
        if self.fd >= 0:
            os.close(self.fd)


def _room() -> int | None:
    """Bytes of the budget this rank may still give a block (None: no budget)."""
    from jupyter_mgpu.engine.shards import budget

    return budget.room(rank_state.get().budget_bytes)


def _round(nbytes: int) -> int:
    return max(PAGE, -(-nbytes // PAGE) * PAGE)


def reserve(nbytes: int, shared: bool = True) -> dict[str, Any]:
    """A block of at least ``nbytes`` for this rank's next shard: a cached one if one fits, else new
    (``shared``: a memfd the kernel maps; otherwise private memory it copies into by address)."""
    size = _round(nbytes)
    with _lock:
        free = [
            b for b in _blocks.values() if not b.in_use and b.shared == shared and size <= b.size <= size + size // 4
        ]
        if free:
            block = min(free, key=lambda b: b.size)
            block.in_use = True
        else:
            _evict()
            room = _room()
            if room is not None and room < size:  # cached blocks must not cost a shard its room
                _evict(keep=0)
                room = _room()
            if room is not None and room < size:
                st = rank_state.get()
                raise MemoryError(
                    f"DefaultCPUAllocator: not enough memory: you tried to allocate {size} bytes "
                    f"(rank {st.rank}, {'shared ' if shared else ''}shard block)"
                )
            block = Block(size, shared)
            if not budget.charge(block.size, block.shared):  # another thread took the room meanwhile
                block.close()
                st = rank_state.get()
                raise MemoryError(
                    f"DefaultCPUAllocator: not enough memory: you tried to allocate {size} bytes "
                    f"(rank {st.rank}, {'shared ' if shared else ''}shard block)"
                )
            _blocks[block.id] = block
        _pending.add(block.id)
        evicted, _evicted[:] = list(_evicted), []
    return {
        "id": block.id,
        "pid": os.getpid(),
        "fd": block.fd,
        "addr": block.addr,
        "size": block.size,
        "evicted": evicted,
    }


def _release(block_id: int) -> None:
    """The shard on ``block_id`` is gone (its last view died): keep the block for the next one,
    unless the cache would pass its share of the budget (then the budget is given back now)."""
    with _lock:
        block = _blocks.get(block_id)
        if block is not None:
            block.in_use = False
            _evict()


def _evict(keep: int | None = None) -> int:
    """Close free blocks until at most ``keep`` bytes stay cached (default: the cache share)."""
    if keep is None:
        st = rank_state.get()
        keep = int(CACHE_SHARE * st.budget_bytes) if st.budget_bytes else 1 << 62
    free = sorted((b for b in _blocks.values() if not b.in_use), key=lambda b: b.id)
    cached = sum(b.size for b in free)
    released = 0
    for b in free:
        if cached <= keep:
            break
        del _blocks[b.id]
        b.close()
        budget.uncharge(b.size, b.shared)
        cached -= b.size
        released += b.size
        _evicted.append(b.id)
    return released


def empty_cache() -> int:
    """Free every cached block (``mg.empty_cache()``); returns the bytes released."""
    with _lock:
        return _evict(keep=0)


def adopt(block_id: int, shape: tuple[int, ...], dtype: Any) -> Any:
    """The tensor of ``shape``/``dtype`` over block ``block_id``; the block is released with its last view."""
    import numpy as np
    import torch

    block = _blocks[block_id]
    _pending.discard(block_id)
    nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
    base = np.frombuffer(block.map, dtype=np.uint8, count=nbytes)
    weakref.finalize(base, _release, block_id)
    return torch.from_numpy(base).view(dtype).view(shape)


def release_pending() -> None:
    """Give back every block reserved for a scatter that did not happen (no shard adopted it)."""
    with _lock:
        for block_id in list(_pending):
            _pending.discard(block_id)
            _release(block_id)


def locate(tensor: Any) -> dict[str, Any] | None:
    """Where ``tensor`` lies if it is a whole, contiguous shard on one of this rank's blocks."""
    if not tensor.is_contiguous() or tensor.device.type != "cpu":
        return None
    addr = tensor.data_ptr()
    nbytes = tensor.numel() * tensor.element_size()
    with _lock:
        for b in _blocks.values():
            start = b.addr
            if b.in_use and b.shared and start <= addr and addr + nbytes <= start + b.size:
                return {"id": b.id, "pid": os.getpid(), "fd": b.fd, "size": b.size, "offset": addr - start}
    return None


def take_evicted() -> list[int]:
    """Ids of blocks closed since the last call (the kernel unmaps them)."""
    with _lock:
        out, _evicted[:] = list(_evicted), []
    return out


def held_bytes() -> dict[str, int]:
    """Bytes in blocks: in use by shards, and cached for reuse."""
    with _lock:
        used = sum(b.size for b in _blocks.values() if b.in_use)
        return {"in_use": used, "cached": sum(b.size for b in _blocks.values()) - used}
