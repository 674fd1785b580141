"""``pp``: pipeline parallel with ``torch.distributed.pipelining`` — rank s holds stage s (a contiguous,
parameter-balanced run of layers) as a ``PipelineStage``; ``ScheduleGPipe`` (all forwards, then all
backwards) or ``Schedule1F1B`` (one forward, one backward in the steady state) moves the batch through
in micro-batches, sending activations forward and their gradients back.

The stage's own methods are wrapped so every ``forward(mb)`` and ``backward(mb)`` (start and end) and
every activation/gradient ``send`` and ``recv`` is recorded with real times in the existing trace format
(``engine/records/trace.py``): the player replays the stages × time grid from them, and each stage's idle time
is split from them into the bubble and the rest (``comparison/pipeline_idle.py``). On a CPU virtual
device whose torch runs one thread (as when ranks outnumber cores), each forward/backward also records
``wait``: its wall time less its thread's CPU time, the part it was not running (waiting for a core, or
for the GIL), so that time counts as waiting, not as computing. Under the memory tracker the same wrappers tell
it when the stage is in its backward (``measure.set_backward``), since ``MemTracker``'s module hooks
cannot follow the ``autograd.grad`` a pipeline stage runs.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from jupyter_mgpu.engine.records import trace as etrace
from jupyter_mgpu.strategies import measure, weights
from jupyter_mgpu.strategies.step import Context, Prepared, loss_fn, make_optimizer, set_dropout_rows


def _op_bytes(ops: list[Any]) -> tuple[int, int | None]:
    nbytes = sum(op.tensor.numel() * op.tensor.element_size() for op in ops)
    return nbytes, (ops[0].peer if ops else None)


class StageRecorder:
    """Wraps a ``PipelineStage``'s chunk methods to record what it does, when, and with whom."""

    def __init__(self, stage: Any, rows_per_mb: int):
        self.stage, self.rows_per_mb = stage, rows_per_mb
        self.step = 0
        self.watch: dict[str, Any] = {"tracker": None}
        self.pending: dict[tuple[str, int], tuple[int, int | None]] = {}
        for name in ("forward_one_chunk", "backward_one_chunk"):
            setattr(stage, name, self._compute(name, getattr(stage, name)))
        for name, kind in (("get_fwd_send_ops", "activation"), ("get_bwd_send_ops", "gradient")):
            setattr(stage, name, self._send(kind, getattr(stage, name)))
        for name, kind in (("get_fwd_recv_ops", "forward"), ("get_bwd_recv_ops", "backward")):
            setattr(stage, name, self._recv(kind, getattr(stage, name)))

    def begin(self, step: int) -> None:
        """A new training step starts (one trace op per step, so steps line up across ranks)."""
        self.step = step
        etrace.begin_op(f"pipeline step {step}")

    def _compute(self, name: str, fn: Any) -> Any:
        kind = "forward" if name.startswith("forward") else "backward"

        def wrapped(mb: int, *args: Any, **kwargs: Any) -> Any:
            got = self.pending.pop((kind, mb), None)
            if got is not None:  # the schedule waited for this receive just before calling us
                etrace.record(
                    self.step,
                    "recv",
                    nbytes=got[0],
                    peer=got[1],
                    mb=mb,
                    kind="activation" if kind == "forward" else "gradient",
                )
            if kind == "forward":
                set_dropout_rows(torch.arange(mb * self.rows_per_mb, (mb + 1) * self.rows_per_mb), self.step)
            measure.set_backward(self.watch["tracker"], kind == "backward")
            # one thread does all of a CPU stage's work: what it did not run of the box, it waited
            # (on a GPU the device works while the thread sleeps; with more threads, others share the work)
            timed_cpu = self.stage.device.type == "cpu" and torch.get_num_threads() == 1
            cpu0 = time.thread_time()
            start = time.time()
            try:
                return fn(mb, *args, **kwargs)
            finally:
                if self.stage.device.type == "cuda":  # time when the work ran, not when it was queued
                    torch.cuda.synchronize(self.stage.device)
                end = time.time()
                wait = min(max(0.0, end - start - (time.thread_time() - cpu0)), end - start) if timed_cpu else 0.0
                measure.set_backward(self.watch["tracker"], False)
                etrace.record(
                    self.step,
                    "compute",
                    kind=kind,
                    mb=mb,
                    start=start,
                    end=end,
                    wait=wait,
                    stage=self.stage.stage_index,
                )

        return wrapped

    def _send(self, kind: str, fn: Any) -> Any:
        def wrapped(mb: int, *args: Any, **kwargs: Any) -> Any:
            ops = fn(mb, *args, **kwargs)
            if ops:
                nbytes, peer = _op_bytes(ops)
                etrace.record(self.step, "send", nbytes=nbytes, peer=peer, mb=mb, kind=kind)
            return ops

        return wrapped

    def _recv(self, kind: str, fn: Any) -> Any:
        def wrapped(mb: int, *args: Any, **kwargs: Any) -> Any:
            ops = fn(mb, *args, **kwargs)
            if ops:
                self.pending[(kind, mb)] = _op_bytes(ops)
            return ops

        return wrapped

    def recv_buffers(self) -> list[torch.Tensor]:
        """The stage's receive buffers (activations in, gradients back), one per micro-batch."""
        out: list[torch.Tensor] = []
        for infos in (self.stage.args_recv_info, self.stage.grad_recv_info):
            for chunk in (infos or {}).values():
                out.extend(i.buffer for i in chunk if getattr(i, "buffer", None) is not None)
        return out


def build(ctx: Context) -> Prepared:
    """This rank's stage, its schedule (GPipe or 1F1B over ``ctx.microbatches``) and a recorded step."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    s, n = ctx.rank, ctx.world_size
    a, b = ctx.stages[s]
    sub = weights.materialize(weights.sequential(ctx, range(a, b)), ctx)
    stage = PipelineStage(sub, s, n, ctx.device, group=ctx.group)
    schedule_cls = Schedule1F1B if ctx.schedule == "1f1b" else ScheduleGPipe
    schedule = schedule_cls(stage, n_microbatches=ctx.microbatches, loss_fn=loss_fn(ctx))
    rec = StageRecorder(stage, ctx.batch // ctx.microbatches)
    opt = make_optimizer(ctx, sub.parameters())
    first, last = s == 0, s == n - 1

    def step(x: torch.Tensor, y: torch.Tensor, k: int) -> float | None:
        rec.begin(k)
        opt.zero_grad(set_to_none=True)
        args = (x,) if first else ()
        losses: list[torch.Tensor] = []
        if last:  # the losses are all it needs of the outputs (kept, they would cost memory)
            schedule.step(*args, target=y, losses=losses, return_outputs=False)
        else:
            schedule.step(*args, return_outputs=False)
        opt.step()
        # the mean of equal micro-batches' mean losses is the whole batch's mean loss
        return float(torch.stack([v.detach() for v in losses]).mean()) if last else None

    return Prepared(sub, opt, step, comm_buffers=rec.recv_buffers, watch=rec.watch)
