"""Per-engine runtime state: rank, device, process group and the names a ``%%mgpu`` cell sees.

``setup`` runs once in each freshly forked engine process, before the ipyparallel engine starts.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from jupyter_mgpu.engine import process_group as rendezvous


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
    timeout: float
    threads: int
    data_limit: int | None = None
    device: Any = None  # torch.device
    current_op: str | None = None
    busy: bool = False
    pg_generation: int = 0  # bumped each time the process group is rebuilt; keys caches of subgroups
    call_depth: int = 0  # calls from the kernel now running (a call may run another)
    call_seq0: int | None = None  # collectives started before the outermost running call
    host: str | None = None  # set when the cluster spans hosts (a launcher's engines): labels read host:kind:index
    local_rank: int | None = None
    store: dict | None = None  # the TCP rendezvous store across hosts (None: the FileStore in rundir)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


STATE: EngineState | None = None


def state() -> EngineState:
    """This engine's state; raises if called outside an engine."""
    if STATE is None:
        raise RuntimeError("not inside a jupyter_mgpu engine")
    return STATE


def setup(config: dict, rank: int) -> EngineState:
    """Configure this process as rank ``rank``: environment, threads, memory budget, process group."""
    global STATE
    dev = config["devices"][rank]
    world = len(config["devices"])
    local_rank = int(config.get("local_rank", rank))
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(config.get("local_world_size", world)),
            "MGPU_RANK": str(rank),
            "MGPU_CLUSTER_ID": config["cluster_id"],
            "MGPU_RUNTIME_DIR": config["rundir"],
            "OMP_NUM_THREADS": str(config["threads"]),
        }
    )
    if dev["kind"] == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        tokens = [t.strip() for t in visible.split(",")] if visible else None
        os.environ["CUDA_VISIBLE_DEVICES"] = tokens[dev["index"]] if tokens else str(dev["index"])
    import torch

    torch.set_num_threads(config["threads"])
    st = EngineState(
        cluster_id=config["cluster_id"],
        rundir=config["rundir"],
        rank=rank,
        world_size=world,
        device_kind=dev["kind"],
        device_index=dev["index"],
        backend=config["backend"],
        budget_bytes=int(dev["total_memory"]),
        timeout=float(config["timeout"]),
        threads=config["threads"],
        host=config.get("host"),
        local_rank=local_rank,
        store=config.get("store"),
    )
    if dev["kind"] == "cuda":
        from jupyter_mgpu.engine import cuda_device

        st.device = cuda_device.bind(config.get("mem_per_device"))
    else:
        from jupyter_mgpu.engine import budget

        st.device = torch.device("cpu")
        st.data_limit = budget.apply(st.budget_bytes)
    STATE = st
    from jupyter_mgpu.engine import collective_guard

    collective_guard.install()
    collective_guard.start(config["rundir"], st)
    from jupyter_mgpu.engine.startup_marks import mark

    mark(config["rundir"], f"pg.start.{rank}")
    rendezvous.init_process_group(config["rundir"], rank, world, config["backend"], st.timeout, store=st.store)
    return st


def device_label(st: Any) -> str:
    """``cpu:1``, or ``node2:cuda:1`` when the cluster spans hosts."""
    label = f"{st.device_kind}:{st.device_index}"
    host = getattr(st, "host", None)
    return f"{host}:{label}" if host else label


def namespace() -> dict[str, Any]:
    """The names every ``%%mgpu`` cell sees: rank, world_size, device, torch, dist, mgpu."""
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import cellapi

    st = state()
    return {
        "rank": st.rank,
        "world_size": st.world_size,
        "device": st.device,
        "torch": torch,
        "dist": dist,
        "mgpu": cellapi,
    }


def populate(user_ns: dict) -> None:
    """Put :func:`namespace` into an engine's user namespace (run at engine start)."""
    user_ns.update(namespace())
    from jupyter_mgpu.engine import direct_channel as direct

    direct.start(user_ns)


def describe() -> dict[str, Any]:
    """A snapshot for ``%mgpu_status``: identity, device and memory of this rank."""
    import psutil
    import torch

    st = state()
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


def rebuild_process_group(generation: int) -> None:
    """Leave the (broken) process group and join a fresh one; every rank must call this together."""
    import torch.distributed as dist

    st = state()
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    rendezvous.init_process_group(st.rundir, st.rank, st.world_size, st.backend, st.timeout, generation,
                                  store=st.store)
    st.pg_generation = generation


def sequence_number() -> int | None:
    """How many collectives this rank's default process group has started (None if unknown)."""
    import torch.distributed as dist

    try:
        return int(dist.distributed_c10d._get_default_group()._get_sequence_number_for_group())
    except Exception:
        return None
