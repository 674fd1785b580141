"""Ranks and devices for engines that ipyparallel started anywhere: by host, then local device.

Each engine reported its host (``engine/startup/launched_setup.identify``). Hosts are ordered as ``--hosts``
lists them (else by name, naturally: ``node2`` before ``node10``); on each host the engines take
local ranks 0, 1, … (in the order MPI or Slurm numbered them where they did, else by engine id) and
local rank ``i`` drives the host's device ``i``. As under torchrun, every engine on a host sees the
GPUs of that host's ranks and uses ``cuda:LOCAL_RANK``: each engine sets its own ``CUDA_VISIBLE_DEVICES``
before CUDA starts, from the devices and hosts of the ranks (``engine/startup/gpu_plan.py``), because
ipyparallel gives one environment per engine *set*, and one set per device would multiply SSH
sessions, batch jobs and MPI launches by the devices per host (and cannot work for ``mpiexec`` or
``--connect`` at all).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jupyter_mgpu.devices import MIN_BUDGET, DeviceInfo
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.units import format_bytes


@dataclass
class Engine:
    """One registered engine and what it said about its host."""

    engine_id: int
    info: dict[str, Any]
    host: str = ""  # the label every view shows
    local_rank: int = 0

    @property
    def key(self) -> str:
        key: str = self.info["host_key"]
        return key


def _natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def order(engines: list[Engine], host_order: list[str] | None = None) -> list[Engine]:
    """The engines in rank order, each given its host label and local rank."""
    by_host: dict[str, list[Engine]] = {}
    for e in engines:
        by_host.setdefault(e.key, []).append(e)
    labels: dict[str, str] = {}
    for key, group in by_host.items():
        named = [str(e.info["label"]) for e in group if e.info.get("label")]
        labels[key] = named[0] if named else group[0].info["hostname"]
    taken: dict[str, int] = {}
    for key in sorted(by_host, key=lambda k: _natural(labels[k])):  # two hosts with one name stay apart
        taken[labels[key]] = taken.get(labels[key], 0) + 1
        if taken[labels[key]] > 1:
            labels[key] = f"{labels[key]}#{taken[labels[key]]}"

    def host_rank(key: str) -> tuple[int, int, list[Any]]:
        label = labels[key].split("#")[0]
        if host_order and label in host_order:
            return (0, host_order.index(label), _natural(labels[key]))
        return (1, 0, _natural(labels[key]))

    out = []
    for key in sorted(by_host, key=host_rank):
        group = sorted(
            by_host[key],
            key=lambda e: (e.info.get("local_rank_hint") is None, e.info.get("local_rank_hint") or 0, e.engine_id),
        )
        for i, e in enumerate(group):
            e.host, e.local_rank = labels[key], i
            out.append(e)
    return out


def per_host_counts(ranked: list[Engine]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in ranked:
        counts[e.host] = counts.get(e.host, 0) + 1
    return counts


def devices(ranked: list[Engine], cpu: bool, mem_per_device: int | None, placed: str = "started") -> list[DeviceInfo]:
    """One device per rank: the host's GPU ``local_rank`` (an index into what the engine's launcher left
    visible), or a CPU virtual device with its budget; each device names its host.

    Refuses, naming the host, more engines on a host than it has GPUs, a host without GPUs among
    GPU hosts, and CPU budgets that the host's free memory cannot hold. ``placed`` says how the engines
    came to a host ("started", or "asked for" when the hosts are checked before any engine starts).
    """
    counts = per_host_counts(ranked)
    first: dict[str, Engine] = {}
    for e in ranked:
        first.setdefault(e.host, e)
    gpu_hosts = [h for h, e in first.items() if e.info.get("gpus")]
    use_gpus = not cpu and bool(gpu_hosts)
    if use_gpus and len(gpu_hosts) != len(first):
        bare = next(h for h in first if h not in gpu_hosts)
        raise MgpuError(f"{bare} has no GPU while {gpu_hosts[0]} has; use --cpu for CPU virtual devices everywhere")
    budgets: dict[str, int] = {}
    for host, e in first.items():
        k = counts[host]
        if use_gpus:
            if any(x.info.get("cuda_started") for x in ranked if x.host == host):
                raise MgpuError(
                    f"an engine on {host} has already started CUDA, so it cannot be pinned to one GPU; "
                    "restart that cluster's engines"
                )
            if k > e.info["gpus"]:
                raise MgpuError(
                    f"{host} has {e.info['gpus']} GPU{'s' if e.info['gpus'] != 1 else ''} but {k} "
                    f"engines were {placed} there; ask for at most one engine per GPU on each host"
                )
            continue
        available = int(e.info["available_memory"])
        budget = mem_per_device if mem_per_device is not None else int(available * 0.9 / k)
        if budget < MIN_BUDGET:
            raise MgpuError(
                f"a CPU virtual device of {format_bytes(budget)} on {host} is below the "
                f"{format_bytes(MIN_BUDGET)} a rank needs to start; give more --mem-per-device"
            )
        if budget * k > available:
            fit = available // budget
            raise MgpuError(
                f"{host} has {format_bytes(available)} of memory available: it holds {fit} CPU virtual "
                f"device{'s' if fit != 1 else ''} of {format_bytes(budget)}, not the {k} {placed} there; "
                "use a smaller --mem-per-device or fewer engines per host"
            )
        budgets[host] = budget
    out = []
    for e in ranked:
        if use_gpus:
            info = (e.info.get("gpu_info") or [None] * (e.local_rank + 1))[e.local_rank] or (
                f"CUDA GPU {e.local_rank}",
                0,
            )  # NVML's name and memory, where the host has nvidia-ml-py
            out.append(DeviceInfo("cuda", e.local_rank, info[0], int(info[1]), host=e.host))
        else:
            out.append(
                DeviceInfo(
                    "cpu", e.local_rank, f"CPU virtual device {e.local_rank} of {e.host}", budgets[e.host], host=e.host
                )
            )
    return out


def no_interface(interface: str, host: str, interfaces: str) -> MgpuError:
    """The error for a host without ``--interface``: which host, and the interfaces it has."""
    return MgpuError(f"there is no interface {interface} with an IPv4 address on {host}; it has {interfaces}")


def threads(ranked: list[Engine]) -> dict[int, int]:
    """Threads per rank: the host's cores shared by its engines."""
    counts = per_host_counts(ranked)
    return {i: max(1, int(e.info.get("cpus") or 1) // counts[e.host]) for i, e in enumerate(ranked)}
