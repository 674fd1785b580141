"""Which GPUs an engine sees and which one it uses, the way torchrun arranges them (pure: no torch).

Under torchrun every worker on a host sees the GPUs assigned to that host's workers and uses
``cuda:LOCAL_RANK``; code written for it relies on that (``torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))``,
``DDP(model, device_ids=[local_rank])``, accelerate's choice of device). :func:`plan` gives one rank the
``CUDA_VISIBLE_DEVICES`` that does the same here: the devices of the ranks on its host, in local-rank
order, written as its parent process names GPUs (indices or UUIDs), and its own position in that list.

Ranks share a host when their devices name the same ``host``: a launcher's cluster labels every device
with its host (``launch/ranks.py``), a cluster on this host leaves every ``host`` ``None``. A device's
``index`` counts the GPUs its parent process sees (``--devices 0,2`` gives indices 0 and 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_mgpu.errors import MgpuError


@dataclass(frozen=True)
class GpuPlan:
    """One rank's view of its host's GPUs."""

    local_rank: int  # the rank's position among its host's ranks (torchrun's LOCAL_RANK)
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES for the engine; None leaves it as it is (CPU devices)
    device_index: int | None  # the rank uses cuda:device_index (its local rank); None on CPU devices


def host_ranks(devices: Sequence[Mapping[str, Any]], rank: int) -> list[int]:
    """The ranks on ``rank``'s host, in rank order (which is local-rank order: ranks go host by host)."""
    host = devices[rank].get("host")
    return [r for r, d in enumerate(devices) if d.get("host") == host]


def parent_tokens(visible: str | None) -> list[str] | None:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` names, as CUDA reads it (up to the first empty or negative
    entry); None when it is unset, i.e. every GPU, numbered as the driver numbers them."""
    if visible is None:
        return None
    out = []
    for token in (t.strip() for t in visible.split(",")):
        if not token or token.startswith("-"):
            break
        out.append(token)
    return out


def plan(config: Mapping[str, Any], rank: int, parent_visible: str | None) -> GpuPlan:
    """The plan for ``rank`` of the cluster ``config`` describes (``runtime.setup``'s config), given the
    engine's parent ``CUDA_VISIBLE_DEVICES`` (None: unset). Raises one sentence naming the rank when the
    config contradicts itself or names a GPU the parent does not see."""
    devices = config["devices"]
    if not 0 <= rank < len(devices):
        raise MgpuError(f"rank {rank} is not one of the {len(devices)} ranks of this cluster")
    mine = devices[rank]
    where = f" on {mine['host']}" if mine.get("host") else ""
    same = host_ranks(devices, rank)
    local_rank = same.index(rank)
    given = config.get("local_rank")
    if given is not None and int(given) != local_rank:
        raise MgpuError(
            f"rank {rank}{where} was given local rank {given} but is rank {local_rank} of its host's {len(same)}"
        )
    given_size = config.get("local_world_size")
    if given_size is not None and int(given_size) != len(same):
        raise MgpuError(
            f"rank {rank}{where} was told its host has {given_size} ranks, but the cluster's devices put {len(same)} there"
        )
    if mine["kind"] != "cuda":
        return GpuPlan(local_rank, None, None)
    other = next((r for r in same if devices[r]["kind"] != "cuda"), None)
    if other is not None:
        raise MgpuError(
            f"rank {rank}{where} drives a GPU but rank {other} on the same host a {devices[other]['kind']} device"
        )
    tokens = parent_tokens(parent_visible)
    names = []
    for r in same:
        index = int(devices[r]["index"])
        if tokens is None:
            names.append(str(index))
        elif index < len(tokens):
            names.append(tokens[index])
        else:
            raise MgpuError(
                f"rank {r}{where} is to drive GPU {index}, but CUDA_VISIBLE_DEVICES={parent_visible!r} "
                f"shows only {len(tokens)} GPU{'' if len(tokens) == 1 else 's'} there"
            )
    for i, name in enumerate(names):
        if name in names[:i]:
            first = same[names.index(name)]
            raise MgpuError(f"ranks {first} and {same[i]}{where} were both given GPU {name}; each rank needs its own")
    return GpuPlan(local_rank, ",".join(names), local_rank)
