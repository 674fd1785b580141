"""``mg.heal``: give a restarted rank what it lost, copied from a live peer (``engine/execution/peer_heal.py``):
module state, optimizer state, data, functions and classes defined in cells. A DDP model is made again on
every rank, so that training resumes with equal weights. Sharded state (a DTensor, an FSDP2 model) has no
whole copy on any peer: refused, with the way to rebuild it.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.errors import MgpuError, rank_list
from jupyter_mgpu.units import format_bytes


class Healed(str):
    """What ``mg.heal`` did, in words (a line per fact), shown as text in a notebook, not as a quoted string."""

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def heal(session: Any, ranks: int | list[int], names: list[str] | str, from_rank: int = 0) -> Healed:
    """Copy ``names`` from ``from_rank`` to ``ranks`` (one or several) through the process group; what was
    done, in words."""
    from jupyter_mgpu.engine.execution import peer_heal

    session.check_alive()
    world = session.world_size
    targets = [ranks] if isinstance(ranks, int) else list(ranks)
    for which, r in [("rank", r) for r in targets] + [("from_rank", from_rank)]:
        if not isinstance(r, int) or not 0 <= r < world:
            raise MgpuError(f"{which} {r!r} is out of range: this session has ranks 0-{world - 1}")
    if not targets or from_rank in targets:
        raise MgpuError(f"rank {from_rank} cannot heal from itself: name a live peer with from_rank")
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
    session.run(peer_heal.heal, from_rank, sorted(targets), ddp, label="mg.heal")
    said = f"{rank_list(targets)} got {', '.join(names)} from rank {from_rank} ({format_bytes(packed['bytes'])})"
    if ddp:
        said += f"\n{', '.join(ddp)} made again with DistributedDataParallel on every rank (rank 0's weights)"
    return Healed(said)
