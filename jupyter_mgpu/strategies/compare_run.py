"""Rank side of ``mg.compare``: train one strategy on this rank and measure it; failures come back as data.

``run(job)`` runs on every rank the strategy uses (``single``: rank 0 alone). It makes a private
process group for the strategy whose every wait has the job's timeout (so a rank that runs out of
memory makes its peers fail within that time, not hang, and the session's own group stays healthy),
builds the strategy (``single``/``ddp``/``fsdp``/``tp``/``pp`` modules), and trains ``steps`` steps on
the same global batches as every other strategy:

* steps 0 and 1 warm up (lazy initialisation, optimizer state, the pipeline's shape exchange, DDP's
  bucket rebuild after its first backward);
* step 2 runs under torch's memory tracker and :class:`measure.CommCounter`: memory by category and
  bytes per collective come from it;
* steps 3… are timed, each after a barrier, untracked: the step time is their median.

Out-of-memory, a peer that stopped answering or any other error becomes a result row
(``status`` ``oom``, ``peer``, ``error``) with what this rank had measured so far; everything the
strategy allocated is freed before returning.

The other half: ``comparison/compare_run.py``, its controller side.
"""

from __future__ import annotations

import datetime
import statistics
import time
from contextlib import ExitStack
from typing import Any

import torch
import torch.distributed as dist

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import telemetry
from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.engine.shards import budget
from jupyter_mgpu.strategies import ddp, fsdp, measure, pp, single, tp
from jupyter_mgpu.strategies import weights as wmod
from jupyter_mgpu.strategies.plan import MEASURED_STEP
from jupyter_mgpu.strategies.step import Context

BUILDERS = {"single": single, "ddp": ddp, "fsdp": fsdp, "tp": tp, "pp": pp}
_DATA: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
TORCH_APIS = (
    "torch._dynamo",
    "torch.distributed._tools.fsdp2_mem_tracker",
    "torch.distributed._tools.mem_tracker",
    "torch.distributed.algorithms.ddp_comm_hooks.default_hooks",
    "torch.distributed.fsdp",
    "torch.distributed.pipelining",
    "torch.distributed.tensor.parallel",
    "torch.nn.parallel",
)


def put_data(key: str, x: Any, y: Any) -> int:
    """Keep the comparison's data on this rank (sent once, used by every strategy); returns its bytes."""
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    _DATA[key] = (x, y)
    nbytes: int = x.numel() * x.element_size() + y.numel() * y.element_size()
    return nbytes


def drop_data(key: str) -> None:
    """Forget the comparison's data on this rank."""
    _DATA.pop(key, None)
    measure.release()


def _data(job: dict[str, Any], device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if job["data"].get("key"):
        x, y = _DATA[job["data"]["key"]]
        return x.to(device), y.to(device)
    syn = job["data"]["synthetic"]
    g = torch.Generator().manual_seed(int(syn["seed"]))
    x = torch.randn(syn["samples"], syn["in"], generator=g)
    if job["loss"] == "cross_entropy":
        y = torch.randint(0, syn["out"], (syn["samples"],), generator=g)
    else:
        y = torch.randn(syn["samples"], syn["out"], generator=g)
    return x.to(device), y.to(device)


def _batch(x: torch.Tensor, y: torch.Tensor, k: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch ``k``: the next ``batch`` samples in order, wrapping around the data."""
    idx = (torch.arange(batch) + k * batch) % x.shape[0]
    return x[idx.to(x.device)], y[idx.to(y.device)]


def _root_cause(exc: BaseException) -> BaseException:
    """The exception that started it: torch's pipeline wraps a stage's error in its own RuntimeError."""
    seen = {id(exc)}
    while True:
        nxt = exc.__cause__ or exc.__context__
        if nxt is None or id(nxt) in seen:
            return exc
        if budget.is_oom(nxt) and not budget.is_oom(exc):
            return nxt
        seen.add(id(nxt))
        exc = nxt


def _failure(exc: BaseException, base: dict[str, int]) -> dict[str, Any]:
    """This rank's failure as a result: out of memory (with what it needed), a silent peer, or an error."""
    exc = _root_cause(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if budget.is_oom(exc):
        now = measure.device_bytes()
        requested = budget.requested_bytes(str(exc)) or 0
        st = rank_state.get()
        if st.device_kind == "cpu" and budget.mode() == "rlimit":  # the OS limit: what this run added to VmData
            used, limit = max(0, now["data"] - base["data"]), (st.data_limit - base["data"]) if st.data_limit else None
        else:  # counted like a GPU's allocator: every tensor on the device against its budget
            used, limit = now["current"], st.budget_bytes
        return {
            "status": "oom",
            "needs_bytes": used + requested,
            "limit_bytes": limit,
            "error": f"out of memory ({text[:160]})",
        }
    lowered = text.lower()
    if any(s in lowered for s in ("timed out", "timeout", "connection closed", "connection reset")):
        return {"status": "peer", "error": "stopped: another rank of this strategy did not answer in time"}
    return {"status": "error", "error": f"{type(exc).__name__}: {text[:300]}"}


def import_torch_apis() -> None:
    """Import torch's parallel APIs with the stop button held back: an import cut short leaves a half-made
    module in ``sys.modules`` (``sympy``, ``torch._dynamo``) that breaks every later strategy on the rank."""
    import importlib

    from jupyter_mgpu.deferred_interrupt import deferred_interrupt

    with deferred_interrupt():
        for name in TORCH_APIS:
            importlib.import_module(name)


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Train ``job["strategy"]`` on this rank and measure it (see the module docstring)."""
    import_torch_apis()
    st = rank_state.get()
    kind = "pp" if job["strategy"].startswith("pp") else job["strategy"]
    result: dict[str, Any] = {
        "rank": st.rank,
        "strategy": job["strategy"],
        "status": "ok",
        "losses": [],
        "step_times": [],
        "memory": {},
        "bytes": {},
        "calls": {},
    }
    group = prepared = x = y = None
    recording = kind == "pp" and bool(job.get("trace_id"))
    measure.release()
    telemetry.reset_peak()
    base = measure.device_bytes()
    interrupted: BaseException | None = None
    try:
        if recording:
            etrace.start(job["trace_id"], live=True)
        if kind != "single":
            group = dist.new_group(
                list(range(st.world_size)),
                backend=st.backend,
                timeout=datetime.timedelta(seconds=float(job["timeout"])),
            )
        ctx = Context(
            rank=st.rank,
            world_size=st.world_size if kind != "single" else 1,
            group=group,
            device=st.device,
            layers=job["layers"],
            init=job["init"],
            seed=int(job["seed"]),
            loss=job["loss"],
            optimizer=job["optimizer"],
            lr=float(job["lr"]),
            batch=int(job["batch"]),
            microbatches=int(job.get("microbatches", 1)),
            schedule=job.get("schedule", "gpipe"),
            stages=[tuple(s) for s in job.get("stages", [])],
            tp_pairs=[tuple(p) for p in job.get("tp_pairs", [])],
        )
        prepared = BUILDERS[kind].build(ctx)
        result["weights"] = wmod.shard_boxes(prepared.module)
        x, y = _data(job, st.device)
        for k in range(int(job["steps"])):
            _train_step(prepared, group, job, x, y, k, result)
    except KeyboardInterrupt as exc:
        interrupted = exc
        result.update(status="error", error="interrupted")
    except BaseException as exc:
        result.update(_failure(exc, base))
        exc.__traceback__ = None  # its frames hold the strategy's tensors
    finally:
        if recording:
            result["events"] = etrace.stop()["events"]
        prepared = x = y = None
        end = measure.device_bytes()
        result["device_peak"] = max(0, end["peak"] - base["current"])
        result["baseline"] = base["current"]
        if group is not None:
            try:
                dist.destroy_process_group(group)
            except Exception:
                pass
        measure.release()
    if interrupted is not None:
        raise interrupted
    return result


def _train_step(
    prepared: Any, group: Any, job: dict[str, Any], x: torch.Tensor, y: torch.Tensor, k: int, result: dict[str, Any]
) -> None:
    """Step ``k``: barrier, then the step (measured for memory and bytes at ``MEASURED_STEP``, else timed)."""
    bx, by = _batch(x, y, k, int(job["batch"]))
    if group is not None:
        dist.barrier(group=group)
    measured = k == MEASURED_STEP
    with ExitStack() as stack:
        if measured:
            tracker = measure.tracker(prepared.tracker_kind, prepared.module, prepared.optimizer)
            counter = measure.CommCounter()
            prepared.watch["tracker"] = tracker
            stack.enter_context(tracker)
            tracker.register_inputs(bx, by)
            for buf in prepared.comm_buffers():
                tracker.register(buf, "Other")
            stack.enter_context(counter)
        start = time.perf_counter()
        loss = prepared.step(bx, by, k)
        seconds = time.perf_counter() - start
        etrace.end_op()  # publish the step's pipeline events now, outside the timed part
    if measured:
        prepared.watch["tracker"] = None
        result["memory"] = tracker.columns()
        result["memory"]["optimizer"] = measure.optimizer_state_bytes(prepared.optimizer)
        result["tracked_peak"] = tracker.total_peak()
        result["bytes"], result["calls"] = dict(counter.bytes), dict(counter.calls)
    result["losses"].append(loss)
    result["step_times"].append(seconds)
    if k > MEASURED_STEP:
        result["step_time"] = statistics.median(result["step_times"][MEASURED_STEP + 1 :])
