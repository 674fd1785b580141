"""Set up an engine that one of ipyparallel's launchers started (SSH, MPI, Slurm, PBS, local, ``--connect``).

These engines are stock ``ipengine`` processes; the kernel turns each into a rank with three calls
through ipyparallel's authenticated channel:

1. :func:`identify` — which host it runs on (a key that differs between machines, and between PID,
   mount and IPC namespaces), the host's devices and memory, its interfaces, local-rank hints from
   MPI or Slurm. The kernel orders the ranks by host, then by local rank.
2. rank 0 only: :func:`open_store` — the rendezvous store on its address of the chosen interface.
3. :func:`setup` — give this engine its device as torchrun would (``CUDA_VISIBLE_DEVICES`` set before
   CUDA starts to the GPUs of its host's ranks, and ``cuda:LOCAL_RANK``: ``engine/startup/gpu_plan.py``),
   apply the memory budget, link up with the kernel's host (``link_agent``), join the process group,
   start telemetry and the direct channel. The link key is derived here from ipyparallel's own HMAC
   key, so no secret travels in the call.

A dead rank started again on its host gets the same config, a new store and the survivors' next group
generation; the survivors :func:`rejoin` (``launch/host_restart.py``).

Each engine's files live in its own private directory on its host (mode 0700), removed when it ends.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

LOCAL_RANK_VARS = (
    "MGPU_LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "PALS_LOCAL_RANKID",
)
ENGINES_DIR = "jupyter-mgpu-engines"


def host_key() -> str:
    """Equal for two processes exactly when they share a machine and its PID, mount and IPC namespaces
    (what shared memory and ``process_vm_*`` need)."""
    parts = []
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    except OSError:
        parts.append(socket.gethostname())
    for ns in ("pid", "mnt", "ipc"):
        try:
            parts.append(str(os.stat(f"/proc/self/ns/{ns}").st_ino))
        except OSError:
            parts.append("?")
    return hashlib.sha256(":".join(parts).encode()).hexdigest()[:16]


def _local_rank_hint() -> int | None:
    for name in LOCAL_RANK_VARS:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def host_facts(interface: str | None, torch_may_count: bool = True) -> dict[str, Any]:
    """This host's devices, memory and interfaces (touches no GPU): what the kernel checks a host against
    before it starts engines there (``launch/ipp_cluster.check_ssh_hosts``, which does not let torch count
    the GPUs: ``gpus`` is then None where NVML cannot) and again once they run."""
    import psutil

    from jupyter_mgpu import devices
    from jupyter_mgpu.engine.wire import netif

    gpus = devices.cuda_device_count() if torch_may_count else devices.cuda_device_count_without_torch()
    return {
        "hostname": socket.gethostname(),
        "label": os.environ.get("MGPU_HOST_LABEL") or None,
        "gpus": gpus,
        "gpu_info": [devices._nvml_info(i) for i in range(gpus or 0)],  # (name, bytes) per visible GPU, or None
        "available_memory": psutil.virtual_memory().available,
        "cpus": os.cpu_count() or 1,
        "address": netif.address_of(interface) if interface else None,
        "interfaces": netif.describe(),
    }


def identify(interface: str | None, controller: str) -> dict[str, Any]:
    """What the kernel needs to give this engine its rank and device (touches no GPU)."""
    from jupyter_mgpu.engine.wire import netif

    facts = host_facts(interface)
    route = None if interface else netif.route_to(controller)
    torch = sys.modules.get("torch")
    return {
        **facts,
        "host_key": host_key(),
        "pid": os.getpid(),
        "cuda_started": bool(torch is not None and torch.cuda.is_initialized()),
        "interface": interface or (route[0] if route else None),
        "address": facts["address"] if interface else (route[1] if route else None),
        "local_rank_hint": _local_rank_hint(),
    }


def open_store(address: str, world_size: int, timeout: float) -> int:
    """Rank 0: serve the rendezvous store on ``address`` only; returns its port."""
    from jupyter_mgpu.engine.group import tcp_rendezvous

    return tcp_rendezvous.open_master(address, world_size, timeout)


def close_store_listener() -> bool:
    """Rank 0, once every rank joined: the store accepts no new connection from now on."""
    from jupyter_mgpu.engine.group import tcp_rendezvous

    return tcp_rendezvous.close_listener()


def rejoin(generation: int, store: dict[str, Any]) -> None:
    """A survivor of a rank's restart: leave the broken group for ``generation``, meeting in ``store``."""
    from jupyter_mgpu.engine.startup import runtime

    runtime.rebuild_process_group(generation, store)


def _engines_root() -> Path:
    from jupyter_mgpu import rundir

    root = rundir.base_dir().with_name(ENGINES_DIR)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    return root


def _clean_stale(root: Path) -> None:
    """Remove directories of this host's engines that ended without cleaning up (killed). Only this host's:
    the folder may be on a home shared with other hosts, whose pids mean nothing here."""
    from jupyter_mgpu.rundir import process_alive

    mine = f"-{host_key()}-"
    for child in root.iterdir():
        head, _, pid = child.name.rpartition("-")
        if not (head + "-").endswith(mine) or not pid.isdigit():
            continue
        if child.is_dir() and not child.is_symlink() and not process_alive(int(pid)):
            shutil.rmtree(child, ignore_errors=True)


def _private_dir(cluster_id: str, rank: int) -> Path:
    root = _engines_root()
    _clean_stale(root)
    path = root / f"{cluster_id}-{rank}-{host_key()}-{os.getpid()}"
    path.mkdir(mode=0o700)
    (path / "exits").mkdir(mode=0o700)
    return path


def _ipp_key() -> bytes:
    from IPython import get_ipython

    return bytes(get_ipython().kernel.session.key)


def link_key() -> bytes:
    """This engine's cluster link key (derived from ipyparallel's key; see ``link.derive_key``)."""
    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.wire import link

    return link.derive_key(_ipp_key(), rank_state.get().cluster_id)


def setup(config: dict[str, Any]) -> dict[str, Any]:
    """Make this engine rank ``config["rank"]`` of the cluster (see the module docstring)."""
    from jupyter_mgpu.engine.records import memory_sampler
    from jupyter_mgpu.engine.startup import runtime
    from jupyter_mgpu.engine.wire import link, link_agent

    rank = int(config["rank"])
    path = _private_dir(config["cluster_id"], rank)
    os.environ["MGPU_TELEMETRY_PERIOD"] = str(config["telemetry_period"])
    os.environ["GLOO_SOCKET_IFNAME"] = config["interface"]
    os.environ["NCCL_SOCKET_IFNAME"] = config["interface"]
    if config["devices"][rank]["kind"] == "cpu":
        os.environ["JUPYTER_MGPU_FORCE_CPU"] = "1"
    cwd = config.get("cwd")
    if cwd and os.path.isdir(cwd) and os.access(cwd, os.R_OK | os.X_OK):  # a shared filesystem: the
        os.chdir(cwd)  # notebook's folder and its modules work here too
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
    key = link.derive_key(_ipp_key(), config["cluster_id"])
    relay = config["relay"]
    link_agent.start(
        str(path), rank, relay["address"], int(relay["port"]), key, {"pid": os.getpid(), "host": config["host"]}
    )
    try:
        st = runtime.setup({**config, "rundir": str(path)}, rank)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    memory_sampler.maybe_start(st)
    from IPython import get_ipython

    runtime.populate(get_ipython().user_ns)
    return {"pid": os.getpid(), "rundir": str(path)}
