"""Copy between the kernel's memory and a rank's, one system call per stretch (``process_vm_readv/writev``).

On one host the kernel may read and write the memory of the processes it started (same user, its own
descendants: what ``ptrace`` allows), so a scatter writes each slice of the controller tensor straight
into the rank's shard block and a gather reads each shard straight into its place in the result: one
copy, no shared file. The blocks are the rank's private memory advised as transparent huge pages
(``engine/shards/shared_blocks.py``), where fresh pages cost a fraction of shared-memory pages. (Not torch's
``THP_MEM_ALLOC_ENABLE`` for all of a rank's tensors: measured here, it made gloo's 16 MiB all_gather
30% slower.) Where the system forbids the calls (a hardened ``ptrace`` policy, a container without
them) :func:`usable` turns false for the session and transfers take shared memfd blocks instead.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

IOV_MAX = 1024
MIN_PIECE = 16 * 2**20  # the work is cut into one piece per thread, no smaller than this
MAX_SEGMENTS = 1 << 16  # more, smaller stretches than this: the shared-memory path is cheaper
DENIED = (errno.EPERM, errno.EACCES, errno.ENOSYS, errno.ESRCH)


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Denied(OSError):
    """The system refuses cross-process copies here (the caller falls back to shared memory)."""


_calls: tuple[Any, Any] | None = None
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _functions() -> tuple[Any, Any]:
    global _calls
    if _calls is None:
        libc = ctypes.CDLL(None, use_errno=True)
        fns = []
        for name in ("process_vm_readv", "process_vm_writev"):
            fn = getattr(libc, name, None)
            if fn is None:
                raise Denied(errno.ENOSYS, f"{name} is not available")
            fn.restype = ctypes.c_ssize_t
            fn.argtypes = [
                ctypes.c_int,
                ctypes.c_void_p,
                ctypes.c_ulong,
                ctypes.c_void_p,
                ctypes.c_ulong,
                ctypes.c_ulong,
            ]
            fns.append(fn)
        _calls = (fns[0], fns[1])
    return _calls


def usable(session: Any) -> bool:
    """Whether this session's transfers may copy across processes (false once the system refused)."""
    ok: bool = session.device_kind == "cpu" and session.copy_by_address
    return ok


def disable(session: Any) -> None:
    """Send this session's transfers through shared memory from now on."""
    session.copy_by_address = False


def _outer(view: Any) -> tuple[int, int, int]:
    """``(k, run, count)``: dims ``k:`` of the view lie contiguously as runs of ``run`` elements, and there
    are ``count`` such runs."""
    shape, strides = list(view.shape), list(view.stride())
    k, run = len(shape), 1
    while k > 0 and (shape[k - 1] == 1 or strides[k - 1] == run):
        run *= shape[k - 1]
        k -= 1
    count = 1
    for d in range(k):
        count *= shape[d]
    return k, run, count


def segments(view: Any) -> list[tuple[int, int]] | None:
    """The contiguous stretches ``(address, bytes)`` of a CPU tensor view, in row-major element order
    (None when there are more than ``MAX_SEGMENTS``)."""
    import torch

    if view.numel() == 0:
        return []
    item = view.element_size()
    if view.is_contiguous():
        return [(view.data_ptr(), view.numel() * item)]
    k, run, count = _outer(view)
    if count > MAX_SEGMENTS:
        return None
    shape, strides = list(view.shape), list(view.stride())
    offsets = torch.zeros((), dtype=torch.int64)
    for d in range(k):
        offsets = offsets.unsqueeze(-1) + torch.arange(shape[d], dtype=torch.int64) * strides[d]
    base = view.data_ptr()
    return [(base + o * item, run * item) for o in offsets.flatten().tolist()]


def _pieces(local: Sequence[tuple[int, int]], remote: int, piece: int) -> list[tuple[list[tuple[int, int]], int, int]]:
    """Split a transfer into calls of at most ``piece`` bytes and ``IOV_MAX`` local stretches:
    ``(local stretches, remote address, bytes)`` each, the remote side contiguous."""
    out: list[tuple[list[tuple[int, int]], int, int]] = []
    cur: list[tuple[int, int]] = []
    cur_bytes, start = 0, remote
    for addr, length in local:
        while length:
            take = min(length, piece - cur_bytes)
            cur.append((addr, take))
            cur_bytes += take
            addr += take
            length -= take
            if cur_bytes == piece or len(cur) == IOV_MAX:
                out.append((cur, start, cur_bytes))
                start += cur_bytes
                cur, cur_bytes = [], 0
    if cur:
        out.append((cur, start, cur_bytes))
    return out


def _one(write: bool, pid: int, local: list[tuple[int, int]], remote: int, nbytes: int) -> None:
    read_fn, write_fn = _functions()
    liov = (_Iovec * len(local))(*[_Iovec(a, n) for a, n in local])
    riov = _Iovec(remote, nbytes)
    done = (write_fn if write else read_fn)(pid, liov, len(local), ctypes.byref(riov), 1, 0)
    if done < 0:
        err = ctypes.get_errno()
        cls = Denied if err in DENIED else OSError
        raise cls(err, f"{'writing to' if write else 'reading from'} process {pid}: {os.strerror(err)}")
    if done != nbytes:
        raise OSError(errno.EFAULT, f"short copy with process {pid}: {done} of {nbytes} bytes")


def _run(write: bool, jobs: Sequence[tuple[int, int, Any]]) -> None:
    global _pool
    threads = max(1, os.cpu_count() or 1)
    total = sum(view.numel() * view.element_size() for _, _, view in jobs)
    piece = max(MIN_PIECE, -(-total // threads // 2**21) * 2**21)  # about one piece per thread: fewer calls copy faster
    calls = []
    for pid, remote, view in jobs:
        segs = segments(view)
        if segs is None:
            raise ValueError("tensor view has too many separate stretches for a direct copy")
        calls += [(write, pid, loc, rem, n) for loc, rem, n in _pieces(segs, remote, piece)]
    if len(calls) <= 1:
        for c in calls:
            _one(*c)
        return
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(threads, thread_name_prefix="mgpu-copy")
        pool = _pool
    futures = [pool.submit(_one, *c) for c in calls]
    errors = [f.exception() for f in futures]  # wait for every call before reporting one
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


def write(jobs: Sequence[tuple[int, int, Any]]) -> None:
    """Copy each CPU tensor view into process ``pid`` at ``address``: jobs of ``(pid, address, view)``."""
    _run(True, jobs)


def read(jobs: Sequence[tuple[int, int, Any]]) -> None:
    """Fill each CPU tensor view from process ``pid`` at ``address``: jobs of ``(pid, address, view)``."""
    _run(False, jobs)


def direct_ok(view: Any) -> bool:
    """Whether a CPU tensor view can be copied directly (few enough separate stretches)."""
    return view.is_contiguous() or _outer(view)[2] <= MAX_SEGMENTS
