"""``mg.heal``: give a restarted rank what it lost, copied from a live peer (``engine/execution/peer_heal.py``):
module state, optimizer state, data, functions and classes defined in cells. A DDP model is made again on
every rank, so that training resumes with equal weights. Sharded state (a DTensor, an FSDP2 model) has no
whole copy on any peer: refused, with the way to rebuild it.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.units import format_bytes


def heal(session: Any, rank: int, names: list[str] | str, from_rank: int = 0) -> str:
    """Copy ``names`` from ``from_rank`` to ``rank`` through the process group; what was done, in words."""
    from jupyter_mgpu.engine.execution import peer_heal

    session.check_alive()
    world = session.world_size
    for which, r in (("rank", rank), ("from_rank", from_rank)):
        if not isinstance(r, int) or not 0 <= r < world:
            raise MgpuError(f"{which} {r!r} is out of range: this session has ranks 0-{world - 1}")
    if rank == from_rank:
        raise MgpuError(f"rank {rank} cannot heal from itself: name a live peer with from_rank")
    if isinstance(names, str) or not names or not all(isinstance(n, str) for n in names):
        raise MgpuError(f"names must be a list of the names to copy, got {names!r}")
    packed = session.run(peer_heal.pack, list(names), targets=[from_rank], label="mg.heal")[0]
    if packed.get("missing"):
        raise MgpuError(f"rank {from_rank} has no name {packed['missing'][0]!r} to copy")
    if packed.get("sharded"):
        name, how = next(iter(packed["sharded"].items()))
        raise MgpuError(
            f"{name!r} is sharded ({how}): each rank holds its own shards, so no peer has it whole; "
            "load it from a checkpoint (torch.distributed.checkpoint, or mg.load for a DistTensor)"
        )
    if packed.get("unpicklable"):
        raise MgpuError(f"the values cannot be copied from rank {from_rank}: {packed['unpicklable']}")
    ddp = packed["ddp"]
    session.run(peer_heal.heal, from_rank, rank, ddp, label="mg.heal")
    said = f"rank {rank} got {', '.join(names)} from rank {from_rank} ({format_bytes(packed['bytes'])})"
    if ddp:
        said += f"; {', '.join(ddp)} made again with DistributedDataParallel on every rank (rank 0's weights)"
    return said
