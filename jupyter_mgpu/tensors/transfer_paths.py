"""How shard data moves between the kernel and the ranks, chosen in one place for both directions.

Four paths, best first: ranks on other hosts get their slices over sockets (``sockets``); on one host
the kernel copies straight into or out of a rank's memory (``process_copy``, one system call per
stretch); else through the rank-owned shared blocks the kernel maps (``shared_blocks``), or a
one-off shared file the ranks read or write (GPU ranks)."""

from __future__ import annotations

import math
from typing import Any

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.ops import dist_tensor as rank_tensor
from jupyter_mgpu.ops import shared_file
from jupyter_mgpu.tensors import process_copy, shared_blocks, sockets
from jupyter_mgpu.tensors.handles import run_creating


def place(h: Any, tensor: Any) -> Any:
    """Fill the new handle ``h``'s shards from the kernel's CPU ``tensor`` (``mg.scatter``); returns ``h``."""
    s = h.session
    target = h.placement
    dt = h.dtype_name
    table = pl.shard_table(h.shape, target, s.world_size)
    streamed = sockets.streamed_ranks(s)
    if streamed:  # ranks on other hosts get their slices over sockets (tensors/sockets.py)
        return sockets.scatter(h, tensor, table, streamed)
    if process_copy.usable(s) and all(process_copy.direct_ok(tensor[info.index]) for info in table):
        # the ranks make their shards on private blocks; the kernel writes each slice straight in
        where = run_creating(h, rank_tensor.scatter_place, h.handle_id, h.shape, target, dt, label="scatter")
        try:
            process_copy.write([(m["pid"], m["addr"], tensor[info.index]) for info, m in zip(table, where) if m])
        except process_copy.Denied:  # this system forbids copies by address: shared blocks from now on
            s.run(rank_tensor.free, [h.handle_id], label="free")  # the handle stays; its shards are made again
            process_copy.disable(s)
            return place(h, tensor)
        except BaseException:
            if s.alive:
                try:
                    h.free()
                except Exception:
                    pass
            raise
        h._in_blocks = True
        return h
    if s.device_kind == "cpu":  # one copy, straight into the ranks' shared shard blocks
        try:
            blocks = s.run(rank_tensor.scatter_reserve, h.shape, target, dt, label="scatter")
            maps = shared_blocks.rank_blocks(s)
            for info, meta in zip(table, blocks):
                if meta:
                    maps.view(info.rank, meta, tensor.dtype, info.shape).copy_(tensor[info.index])
        except BaseException:
            if s.alive:
                try:
                    s.run(rank_tensor.scatter_abandon, label="scatter")
                except Exception:
                    pass
            raise
        ids = [b["id"] if b else None for b in blocks]
        run_creating(h, rank_tensor.scatter_adopt, h.handle_id, ids, h.shape, target, dt, label="scatter")
        h._in_blocks = True
        return h
    with shared_blocks.staging(tensor.numel() * tensor.element_size()) as buf:
        buf.tensor(tensor.numel(), tensor.dtype).view(tensor.shape).copy_(tensor)
        run_creating(h, shared_file.scatter_from_file, h.handle_id, buf.path, h.shape, target, dt, label="scatter")
    return h


def fetch(h: Any, out: Any) -> Any:
    """The global tensor of handle ``h`` in the kernel (``DistTensor.gather``), into ``out`` if given."""
    streamed = sockets.streamed_ranks(h.session)
    if streamed:  # ranks on other hosts: their shards come over sockets (tensors/sockets.py)
        return sockets.gather(h, out, streamed)
    numel = math.prod(h.shape)
    nbytes = numel * h.itemsize
    traced = False
    if process_copy.usable(h.session):  # each shard read in place, straight into its place in the result
        where = h.session.run(rank_tensor.gather_address, h.handle_id, h.shape, h.placement, label="gather")
        traced = True
        if all(w is not None for w in where):
            result = out if out is not None else shared_blocks.new_tensor(h.shape, h.dtype)
            try:
                process_copy.read([(w["pid"], w["addr"], result[info.index]) for info, w in zip(h.table, where) if w])
                return result
            except process_copy.Denied:
                process_copy.disable(h.session)
    where = (
        h.session.run(rank_tensor.gather_locate, h.handle_id, h.shape, h.placement, label="gather", trace=not traced)
        if h._in_blocks
        else [None]
    )
    if all(w is not None for w in where):  # every shard lies in a block the kernel can read
        result = out if out is not None else shared_blocks.new_tensor(h.shape, h.dtype)
        maps = shared_blocks.rank_blocks(h.session)
        for info, meta in zip(h.table, where):
            if meta:
                result[info.index].copy_(maps.view(info.rank, meta, h.dtype, info.shape, meta["offset"]))
        return result
    traced = traced or h._in_blocks  # gather_address / gather_locate traced this gather already
    if out is None:  # the ranks write into fresh shared pages that become the result
        with shared_blocks.one_off(nbytes) as buf:
            h.session.run(
                shared_file.gather_to_file, h.handle_id, buf.path, h.shape, h.placement, not traced, label="gather"
            )
            flat = buf.tensor(numel, h.dtype)
        return flat.view(h.shape)
    with shared_blocks.staging(nbytes) as buf:  # warm pages, then one copy into out
        h.session.run(
            shared_file.gather_to_file, h.handle_id, buf.path, h.shape, h.placement, not traced, label="gather"
        )
        out.copy_(buf.tensor(numel, h.dtype).view(h.shape))
    return out
