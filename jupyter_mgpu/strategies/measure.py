"""What a strategy costs on this rank: memory by category, device peak and bytes per collective.

* :class:`CommCounter` — a small ``TorchDispatchMode`` that sees every ``c10d`` op a strategy
  dispatches (DDP's bucket all-reduce, FSDP's all-gather and reduce-scatter, DTensor's functional
  all-reduce, the pipeline's ``send``/``recv_``) and adds up the bytes of the buffer this rank hands
  to each: the input of a gather, reduce-scatter or all-reduce, the message of a send or a receive;
  an all-gather's output is the result, not traffic, so each buffer counts once.
* :func:`tracker` — torch's ``FSDPMemTracker`` for FSDP, torch's ``MemTracker`` for the others, each
  keeping every category's own peak besides the composition at the total peak. Both tell forward
  from backward with module hooks (``ModTracker``) that see neither DDP's backward (its output passes
  through DDP's own autograd function first) nor a pipeline stage's (``schedule.step()`` runs
  ``autograd.grad``, which those hooks break), and that keep an FSDP model alive after training (its
  memory never comes back); so they run here without them, with the phase set by the training step
  itself (:func:`set_backward` around ``backward()`` and each pipeline backward chunk). Gradients
  count once accumulated into ``.grad``, optimizer state as the tensors the optimizer keeps between
  steps, read from its state after the step (what the step makes and frees on the way is a
  temporary).
* :func:`device_bytes` — the device's own count: the CUDA allocator's, or on a CPU virtual device the
  budget's count of tensor bytes (resident memory and ``VmHWM`` where the budget is the OS limit).
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# torch's category names → the table's columns
COLUMNS = ("params", "grads", "optimizer", "activations", "comm_buffers", "temporaries", "inputs")
CATEGORY = {
    "Parameter": "params",
    "Buffer": "params",
    "Sharded Param": "params",
    "Gradient": "grads",
    "Sharded Grad": "grads",
    "Optstate": "optimizer",
    "OptState": "optimizer",
    "Activation": "activations",
    "Inputs": "inputs",
    "Temp": "temporaries",
    # buffers made for communication: DDP's buckets and the pipeline's receive buffers (registered as
    # "Other"), FSDP's all-gather/reduce-scatter buffers and the layers it gathered for compute
    "Other": "comm_buffers",
    "All Gather": "comm_buffers",
    "Reduce Scatter": "comm_buffers",
    "Unsharded Param": "comm_buffers",
    "Unsharded Grad": "comm_buffers",
}
OP_NAMES = {
    "allreduce_": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "broadcast_": "broadcast",
    "broadcast": "broadcast",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
    "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all",
    "reduce_": "reduce",
    "gather_": "gather",
    "scatter_": "scatter",
}
INPUT_ARGS = ("input", "input_tensor", "input_tensors", "inputs", "tensors", "tensor", "self")


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


class CommCounter(TorchDispatchMode):
    """Bytes and calls per collective dispatched on this thread while active (each buffer once)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # unannotated in torch
        self.bytes: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func.namespace in ("c10d", "_c10d_functional"):
            name = OP_NAMES.get(func._schema.name.split("::")[-1])
            if name is not None:
                self.calls[name] = self.calls.get(name, 0) + 1
                self.bytes[name] = self.bytes.get(name, 0) + self._buffer_bytes(func, args, kwargs)
        return func(*args, **kwargs)

    @staticmethod
    def _buffer_bytes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        schema = func._schema.arguments
        values = {a.name: (args[i] if i < len(args) else kwargs.get(a.name)) for i, a in enumerate(schema)}
        for name in INPUT_ARGS:
            if name in values:
                return _nbytes(values[name])
        return 0


def _category_peaks(cls: type) -> type:
    """A subclass of a torch memory tracker that also keeps each category's own peak."""

    class Tracked(cls):
        def _update_peak_stats(self, peak_state: Any) -> None:
            super()._update_peak_stats(peak_state)
            if getattr(getattr(self, "_fsdp_state", None), "name", "") in ("PRE_FW", "PRE_BW"):
                return  # FSDP is making its buffers; it files them under their category once they exist
            peaks = self.__dict__.setdefault("category_peaks", {})
            outside = self.__dict__.setdefault("opt_outside_step", {})
            for dev, snap in self._curr_mem_snap.items():
                for k, v in snap.items():
                    key = getattr(k, "value", k)
                    if key in ("Optstate", "OptState"):
                        if not self._in_opt:
                            outside[dev] = v  # the state the optimizer keeps between steps
                        else:  # made and freed inside optimizer.step(): scratch, not state
                            key, v = "Temp", v - outside.get(dev, 0)
                    if v > peaks.get(key, 0):
                        peaks[key] = v

        def columns(self) -> dict[str, int]:
            """Each table column's peak in bytes (the sum of its torch categories' own peaks)."""
            out = dict.fromkeys(COLUMNS, 0)
            for k, v in self.__dict__.get("category_peaks", {}).items():
                if k in CATEGORY:
                    out[CATEGORY[k]] += int(v)
            data = self.__dict__.get("input_bytes", 0)
            if data and not any(r.value == "Inputs" for r in self._ref_class):  # registered as "Other"
                out["comm_buffers"] -= data
                out["inputs"] += data
            return out

        def register_inputs(self, *tensors: torch.Tensor) -> None:
            """The step's batch: counted as inputs, so views of it are neither activations nor buffers."""
            name = "Inputs" if any(r.value == "Inputs" for r in self._ref_class) else "Other"
            seen = set()
            for t in tensors:
                st = t.untyped_storage()
                if st.data_ptr() not in seen:
                    seen.add(st.data_ptr())
                    self.__dict__["input_bytes"] = self.__dict__.get("input_bytes", 0) + st.nbytes()
                    self.register(t, name)

        def total_peak(self) -> int:
            """The tracker's peak of all categories together."""
            return int(max(self._peak_mem.values(), default=0))

        def register(self, tensor: torch.Tensor, category: str = "Other") -> None:
            """Count a tensor made outside the tracker's sight (a C++ bucket, a receive buffer)."""
            self._update_and_maybe_create_winfos(tensor, _ref(self, category))

    Tracked.__name__ = f"Measured{cls.__name__}"
    return Tracked


class _Phase:
    """Stands in for ``ModTracker``: no module hooks, the phase set by the training step."""

    def __init__(self) -> None:
        self.is_bw = False
        self.parents: set[str] = set()

    def set(self, backward: bool) -> None:
        self.is_bw = backward

    def register_user_hooks(self, *hooks: Any) -> None:
        pass

    def clear_user_hooks(self) -> None:
        pass

    def get_known_fqn(self, module: Any) -> str:
        return f"{type(module).__name__}@{id(module):x}"

    def __enter__(self) -> _Phase:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def tracker(kind: str, module: Any, optimizer: Any) -> Any:
    """A memory tracker for one measured step: ``fsdp`` (FSDPMemTracker) or ``phase`` (MemTracker whose
    forward/backward phase the step sets)."""
    if kind == "fsdp":
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        t = _category_peaks(FSDPMemTracker)(module, optimizer)
        t._mod_tracker = _Phase()  # its FSDP hooks only need a name per module and the phase
        return t
    from torch.distributed._tools.mem_tracker import MemTracker

    t = _category_peaks(MemTracker)()
    t._mod_tracker = _Phase()
    t._track_module_params_and_buffers(module, install_grad_hooks=False)
    t._track_optimizer_states(_ref(t, "Optstate"), optimizer)
    grad = _ref(t, "Gradient")

    def accumulated(p: torch.Tensor) -> None:  # .grad once accumulated: a micro-batch's own share is a temporary
        t._update_and_maybe_create_winfos(p.grad, grad)

    for p in module.parameters():
        h = p.register_post_accumulate_grad_hook(accumulated)
        t._param_to_grad_hook_handles[p] = (h, h)
    return t


def optimizer_state_bytes(optimizer: Any) -> int:
    """The bytes the optimizer keeps between steps: each storage of its state's tensors, counted once.
    Read from the state itself, not from the tracker's category, so a temporary of the step that is
    freed a moment late (a frame another thread held, a garbage cycle) is never counted as state."""
    from torch.distributed._tools.common_utils import get_untyped_storages

    seen: dict[tuple[str, int], int] = {}
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                for st in get_untyped_storages(value):
                    seen[(str(st.device), st.data_ptr())] = st.nbytes()
    return sum(seen.values())


def _ref(t: Any, name: str) -> Any:
    return next(r for r in t._ref_class if r.value == name)


def set_backward(t: Any, on: bool) -> None:
    """Tell a phase tracker whether the step is in its backward now (what it makes there is temporary)."""
    mod = getattr(t, "_mod_tracker", None)
    if isinstance(mod, _Phase):
        mod.set(on)


def device_bytes() -> dict[str, int]:
    """This process's device memory now: ``current``, ``peak`` and ``data`` (VmData; CPU) in bytes."""
    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.records import telemetry
    from jupyter_mgpu.engine.shards import allocator_budget, budget

    st = rank_state.STATE
    if st is not None and st.device_kind == "cuda":
        return {
            "current": int(torch.cuda.memory_allocated()),
            "peak": int(torch.cuda.max_memory_allocated()),
            "data": int(torch.cuda.memory_allocated()),
        }
    if budget.mode() == "allocator":  # the CPU budget counts tensor bytes, as a GPU's allocator does
        return {
            "current": allocator_budget.allocated(),
            "peak": allocator_budget.peak(),
            "data": allocator_budget.allocated(),
        }
    status = telemetry._proc_status()
    return {"current": status.get("VmRSS", 0), "peak": status.get("VmHWM", 0), "data": status.get("VmData", 0)}


def release() -> None:
    """Give freed memory back to the system so the next strategy starts from the same baseline."""
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
