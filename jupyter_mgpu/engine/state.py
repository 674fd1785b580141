"""Who this engine is: rank, device, process group generation, what it is doing now (a leaf: every
rank-side module reads it, it imports nothing of ours). ``runtime.setup`` fills it in once per engine."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineState:
    """What an engine knows about itself."""

    cluster_id: str
    rundir: str
    rank: int
    world_size: int
    device_kind: str
    device_index: int
    backend: str
    budget_bytes: int
    timeout: float  # bounds the waits of setting up and rebuilding
    threads: int
    data_limit: int | None = None
    device: Any = None  # torch.device
    current_op: str | None = None
    pg_generation: int = 0  # bumped each time the process group is rebuilt; keys caches of subgroups
    call_depth: int = 0  # calls from the kernel now running (a call may run another)
    serving: bool = False  # a direct-channel request read and not yet answered (it counts as in a call)
    call_seq0: int | None = None  # collectives started before the outermost running call
    # numbered collectives that raised before the group's backend ran them (collective_numbers.left_unrun)
    unrun_collectives: int = 0
    call_started: float | None = None  # epoch seconds the outermost running call began
    calls_begun: int = 0  # outermost calls begun so far: the kernel tells a call begun after its stop button
    call_ended: float | None = None  # epoch seconds the last outermost call ended
    host: str | None = None  # set when the cluster spans hosts (a launcher's engines): labels read host:kind:index
    local_rank: int | None = None
    store: dict[str, Any] | None = None  # the TCP rendezvous store across hosts (None: the FileStore in rundir)
    collective_timeout: float | None = None  # the group's, as the user gave it (None: torch's default)
    # while mg.profile() records (engine/records/rank_profiler.py): the outermost calls and the collectives watched
    call_log: list[tuple[str, int, int]] | None = None
    collective_log: list[dict[str, Any]] | None = None
    # while this rank's pdb waits for a line from the notebook (engine/execution/rank_debugger.py): since, line
    debugging: dict[str, Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


STATE: EngineState | None = None


def get() -> EngineState:
    """This engine's state; raises if called outside an engine."""
    if STATE is None:
        raise RuntimeError("not inside a jupyter_mgpu engine")
    return STATE


def device_label(st: EngineState) -> str:
    """``cpu:1``, or ``node2:cuda:1`` when the cluster spans hosts."""
    label = f"{st.device_kind}:{st.device_index}"
    return f"{st.host}:{label}" if st.host else label


def describe() -> dict[str, Any]:
    """A snapshot for ``%mgpu_status``: identity, device and memory of this rank."""
    import psutil
    import torch

    st = get()
    proc = psutil.Process()
    info: dict[str, Any] = {
        "rank": st.rank,
        "pid": os.getpid(),
        "device": device_label(st),
        "backend": st.backend,
        "threads": torch.get_num_threads(),
        "budget_bytes": st.budget_bytes,
        "resident_bytes": proc.memory_info().rss,
    }
    if st.device_kind == "cuda":
        from jupyter_mgpu.engine import cuda_device

        info.update(cuda_device.memory())
    return info


def sequence_number() -> int | None:
    """How many collectives this rank's default process group has started (None if unknown)."""
    import torch.distributed as dist

    try:
        group = dist.distributed_c10d._get_default_group()
        return int(group._get_sequence_number_for_group())  # type: ignore[attr-defined]  # private, not in torch's stubs
    except Exception:
        return None


def user_ns() -> dict[str, Any]:
    """The rank's namespace, where ``%%mgpu`` cells run (``__main__``'s outside an IPython engine)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__
