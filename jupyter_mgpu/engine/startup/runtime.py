"""Set an engine up: its environment, device, memory budget and process group (``setup``, once per
freshly forked engine, before the ipyparallel engine starts), and the names a ``%%mgpu`` cell sees.

Who the engine is lives in the leaf :mod:`jupyter_mgpu.engine.state`."""

from __future__ import annotations

import os
from typing import Any

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.group import process_group, torchrun_env, user_process_group
from jupyter_mgpu.engine.startup import gpu_plan
from jupyter_mgpu.engine.state import EngineState

FLIGHT_RECORDER_ENTRIES = 2000  # the last collectives c10d keeps per process (op, group, number, sizes)


def setup(config: dict[str, Any], rank: int) -> EngineState:
    """Configure this process as rank ``rank``: environment, threads, device, memory budget, process group.

    On GPUs, as under torchrun, the engine sees its host's ranks' GPUs and uses ``cuda:LOCAL_RANK``
    (``engine/startup/gpu_plan.py``)."""
    dev = config["devices"][rank]
    world = len(config["devices"])
    gpus = gpu_plan.plan(config, rank, os.environ.get("CUDA_VISIBLE_DEVICES"))  # torchrun's: the host's GPUs
    os.environ.update(torchrun_env.variables(config, rank))  # code written for torchrun reads these
    os.environ.update(
        {
            "MGPU_RANK": str(rank),
            "MGPU_CLUSTER_ID": config["cluster_id"],
            "MGPU_RUNTIME_DIR": config["rundir"],
            "OMP_NUM_THREADS": str(config["threads"]),
        }
    )
    if gpus.visible_devices is not None:  # before CUDA starts: every rank of the host sees its ranks' GPUs
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus.visible_devices
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
        local_rank=gpus.local_rank,
        store=config.get("store"),
        collective_timeout=config.get("collective_timeout"),
    )
    if gpus.device_index is not None:
        from jupyter_mgpu.engine import cuda_device

        st.device = cuda_device.bind(gpus.device_index, config.get("mem_per_device"))  # cuda:LOCAL_RANK
    else:
        from jupyter_mgpu.engine.shards import budget

        st.device = torch.device("cpu")
        st.data_limit = budget.apply(st.budget_bytes)
    from jupyter_mgpu.engine.shards import held_failure

    held_failure.install(st.device_kind)  # a failure's kept frames let go when an allocation needs them
    rank_state.STATE = st
    from jupyter_mgpu.engine.watch import collective_guard

    collective_guard.install()
    collective_guard.start(config["rundir"], st)
    from jupyter_mgpu.engine.records.startup_marks import mark

    mark(config["rundir"], f"pg.start.{rank}")
    # c10d's flight recorder, read when it is asked (a profile's collectives from C++: their sizes); it
    # must be on before the group exists. A size the user set is kept.
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(FLIGHT_RECORDER_ENTRIES))
    # nccl marks a collective "started" on the GPU only with timing on: how a stuck one is told from queued work
    os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
    restart = config.get("restart") or {}  # a dead rank started again: it joins the survivors' new group
    st.pg_generation = int(restart.get("generation", 0))
    meeting = process_group.init_process_group(
        config["rundir"],
        rank,
        world,
        config["backend"],
        st.timeout,
        st.pg_generation,
        store=st.store,
        collective_timeout=st.collective_timeout,
    )
    if st.store is None:  # one host: a real store for MASTER_ADDR / MASTER_PORT (across hosts: the group's)
        if restart.get("master") and rank != 0:  # rank 0's, which the survivors use
            master = (str(restart["master"][0]), int(restart["master"][1]))
        else:
            master = torchrun_env.serve_master(meeting, rank, world, st.timeout)
        os.environ.update(torchrun_env.variables(config, rank, master))
    user_process_group.install()  # dist.init_process_group() in user code joins this group
    from jupyter_mgpu.engine.watch import collective_watch

    collective_watch.install(config["rundir"], world)  # which collective each rank waits in, checked across ranks
    collective_watch.set_checks(config.get("collective_checks", True))
    return st


def namespace() -> dict[str, Any]:
    """The names every ``%%mgpu`` cell sees: rank, world_size, device, torch, dist, mgpu."""
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine.execution import cellapi

    st = rank_state.get()
    return {
        "rank": st.rank,
        "world_size": st.world_size,
        "device": st.device,
        "torch": torch,
        "dist": dist,
        "mgpu": cellapi,
    }


def populate(user_ns: dict[str, Any]) -> None:
    """Put :func:`namespace` into an engine's user namespace (run at engine start, after the shell is made)."""
    user_ns.update(namespace())
    torchrun_env.drop_interactive_prompts()  # a worker, as under torchrun: Lightning's ddp runs unchanged
    from jupyter_mgpu.engine.execution import completion_server, direct_channel, rank_debugger
    from jupyter_mgpu.engine.watch import collective_guard, issued_collectives, peer_collectives
    from jupyter_mgpu.engine.watch.collective_watch import main_place

    direct_channel.start(user_ns)
    completion_server.start(user_ns)  # Tab and Shift-Tab in %%mgpu cells, from a thread
    collective_guard.commands.update(rank_debugger.install())  # breakpoint() prompts in the notebook
    collective_guard.commands["fr-dump"] = issued_collectives.dump_request  # mg.where(dump=...), for torchfrtrace
    # a peer's collective at a number, before this rank joins one where torch issues collectives too
    collective_guard.commands[peer_collectives.COMMAND] = lambda body: peer_collectives.answer(body, main_place)
    rundir = rank_state.get().rundir
    peer_collectives.ask_peer = lambda rank, body: collective_guard.ask(
        rundir, rank, peer_collectives.COMMAND, body=body
    )
    peer_collectives.releases = lambda: collective_guard.release_count
    from jupyter_mgpu.engine.program import fresh_program

    fresh_program.remember_start()  # what each %mgpu_run starts from, as a new process would


def rebuild_process_group(generation: int, store: dict[str, Any] | None = None) -> None:
    """Leave the (broken) process group and join a fresh one; every rank must call this together.

    ``store``: across hosts, a new rendezvous store to meet in (a rank started again joins through it),
    which ``MASTER_ADDR`` / ``MASTER_PORT`` name from now on."""

    st = rank_state.get()
    if store is not None:
        st.store = store
        os.environ.update(MASTER_ADDR=str(store["host"]), MASTER_PORT=str(store["port"]))
    try:
        user_process_group.destroy_session_group()
    except Exception:
        pass
    process_group.init_process_group(
        st.rundir,
        st.rank,
        st.world_size,
        st.backend,
        st.timeout,
        generation,
        store=st.store,
        collective_timeout=st.collective_timeout,
    )
    st.pg_generation = generation
