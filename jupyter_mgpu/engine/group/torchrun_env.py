"""torchrun's environment on every rank, so that code written for ``torchrun`` runs here unchanged.

torchrun gives each worker ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK`` (its host's index), ``GROUP_WORLD_SIZE`` (the number of hosts), ``ROLE_RANK``,
``ROLE_WORLD_SIZE`` (one role here: every rank), ``MASTER_ADDR`` and ``MASTER_PORT`` (its rendezvous
store, served by the agent: ``TORCHELASTIC_USE_AGENT_STORE``), ``TORCH_NCCL_ASYNC_ERROR_HANDLING``, and
per run ``TORCHELASTIC_ERROR_FILE`` (``engine/program/fresh_program.py``). On CPU virtual devices it also sets ``ACCELERATE_USE_CPU``, as ``accelerate launch --cpu``
does for its workers. :func:`variables` is that plan for one rank, pure; :func:`serve_master` gives a one-host
session, whose group meets through a private file, a real TCP store on rank 0 for ``MASTER_PORT``
(across hosts the group's own TCP store is the master). :func:`drop_interactive_prompts` makes the
engine look like the non-interactive worker torchrun starts, not like a Python prompt.
"""

from __future__ import annotations

import os
import sys
from typing import Any

MASTER_PORT_KEY = "mgpu/master_port"


def variables(config: dict[str, Any], rank: int, master: tuple[str, int] | None = None) -> dict[str, str]:
    """torchrun's variables for ``rank`` of the cluster ``config`` describes (``master``: its store)."""
    world = len(config["devices"])
    out = {
        "RANK": str(rank),
        "LOCAL_RANK": str(int(config.get("local_rank", rank))),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(int(config.get("local_world_size", world))),
        "GROUP_RANK": str(int(config.get("group_rank", 0))),
        "GROUP_WORLD_SIZE": str(int(config.get("group_world_size", 1))),
        "ROLE_NAME": "default",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": str(config["cluster_id"]),
        # MASTER_ADDR/PORT is a store someone else serves (torchrun's agent, here rank 0's): clients only
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }
    if config["devices"][rank]["kind"] == "cpu":
        # without it accelerate's Accelerator() finds no CUDA and trains alone on each rank (its torchrun
        # detection is for GPUs); with it, Accelerator() joins the group on the CPU, as under `accelerate launch --cpu`
        out["ACCELERATE_USE_CPU"] = "true"
    store = config.get("store")
    if master is None and store is not None:  # across hosts: the TCP store the group met in
        master = (str(store["host"]), int(store["port"]))
    if master is not None:
        out["MASTER_ADDR"], out["MASTER_PORT"] = master[0], str(master[1])
    return out


def serve_master(meeting: Any, rank: int, world_size: int, timeout: float) -> tuple[str, int]:
    """One host: rank 0 serves a TCP store on loopback and tells the others its port through the
    group's file store (``meeting``); every rank returns ``(MASTER_ADDR, MASTER_PORT)``."""
    from jupyter_mgpu.engine.group import tcp_rendezvous

    if rank == 0:
        port = tcp_rendezvous.open_master("127.0.0.1", world_size, timeout)
        meeting.set(MASTER_PORT_KEY, str(port))
    else:
        port = int(meeting.get(MASTER_PORT_KEY))
    return "127.0.0.1", port


def drop_interactive_prompts() -> None:
    """Remove the ``sys.ps1``/``ps2``/``ps3`` prompts IPython's shell set in this engine.

    A torchrun worker runs ``python script.py``: it has no ``sys.ps1``. Libraries read that as "a person
    is typing at this process" and refuse to act as workers: Lightning's ``Trainer(strategy="ddp")``
    raises "not compatible with an interactive environment" (``lightning.fabric.utilities.imports.
    _IS_INTERACTIVE``). Nobody types at an engine (the notebook's kernel keeps its prompts), so the
    engine drops them once, after the shell is made and before any user code imports such a library.
    """
    for name in ("ps1", "ps2", "ps3"):
        if hasattr(sys, name):
            delattr(sys, name)
