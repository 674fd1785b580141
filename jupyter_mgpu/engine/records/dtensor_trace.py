"""Trace events of real torch DTensor redistributes on this rank (on only while ``mg.trace()`` records).

``DTensor.redistribute``, ``full_tensor()`` and the implicit redistributes of sharding propagation
(``torch.mm`` of two DTensors placed differently) all go through one torch function,
``torch.distributed.tensor._redistribute.redistribute_local_tensor``; :func:`install` wraps it in the
three modules that bind it and :func:`uninstall` puts torch's own back, so when tracing is off nothing
of ours is on DTensor's path. Each call runs torch's function once, unchanged, and records one op:
step 0 ``hold`` of the source's box, then one step per transform step torch really runs
(``_gen_transform_infos``) with the ``send``/``recv``/``reduce`` of the pieces between the ranks of
that mesh dim's group and the ``hold``/``free`` that leave each rank with exactly its box of the
result. The events are planned by ``layout/redistribute_plan.py`` from the pure mesh tables, which split as torch does.

The source and the result are different tensors, named ``dtensor1``, ``dtensor2``, … in call order
(the same on every rank) and found again by identity of the local tensor (weak references); at the
end the names of the user's variables holding them become their labels (``x``, ``y``).

Engine-side: no torch at import; the recorder is passed in (:class:`Sink`), so this module imports
only the pure layout.
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.records import import_watch
from jupyter_mgpu.layout.mesh import MeshPlacement, from_torch, placements_label
from jupyter_mgpu.layout.redistribute_plan import DST, SRC, Box, Event, numel, plan_events

PACKAGE = "torch.distributed.tensor"
MODULES = (f"{PACKAGE}._redistribute", f"{PACKAGE}._api", f"{PACKAGE}._dispatch")
FUNCTION = "redistribute_local_tensor"


class Sink(Protocol):
    """What this module records into (``engine/records/trace.py`` as a module)."""

    def active(self) -> bool: ...
    def begin_op(self, label: str) -> None: ...
    def end_op(self) -> None: ...
    def declare(self, name: str, shape: Iterable[int], itemsize: int, label: str = "") -> None: ...
    def block(
        self, name: str, box: Iterable[Iterable[int]], buf: str | None = None
    ) -> tuple[str, tuple[tuple[int, int], ...], str | None]: ...
    def record(
        self,
        step: int,
        action: str,
        blocks: Iterable[tuple[Any, ...]] = (),
        nbytes: int = 0,
        peer: int | None = None,
        **info: Any,
    ) -> None: ...


# -- the hook -------------------------------------------------------------------------------------
class _Plan(NamedTuple):
    label: str  # "DTensor redistribute [S(0)] → [R]"
    after: str  # "[R]"
    events: list[Event]


@dataclass
class _State:
    sink: Sink
    count: int = 0
    live: dict[int, tuple[str, Any]] = field(default_factory=dict)  # id(local tensor) -> (name, weakref)
    made: dict[str, tuple[str | None, str, bool]] = field(default_factory=dict)  # name -> (source, after, explicit)
    plans: dict[tuple[Any, Any, Any], _Plan | None] = field(default_factory=dict)
    held: dict[str, tuple[Box, int, Any]] = field(default_factory=dict)  # name -> (box, bytes, storage weakref)

    def hold(self, name: str, box: Box | None, nbytes: int, tensor: Any) -> None:
        """``name``'s piece on this rank is held until its memory (storage) is freed."""
        if box is not None and numel(box):
            from torch.multiprocessing.reductions import StorageWeakRef

            self.held[name] = (box, nbytes, StorageWeakRef(tensor.untyped_storage()))

    def record_frees(self, step: int) -> None:
        """``free`` events for the held pieces whose memory Python has let go of since."""
        for name, (box, nbytes, ref) in list(self.held.items()):
            if ref.expired():
                del self.held[name]
                self.sink.record(step, "free", [self.sink.block(name, box)], nbytes, None, reason="freed by Python")

    def name_of(self, obj: Any) -> str | None:
        entry = self.live.get(id(obj))
        return entry[0] if entry is not None and entry[1]() is obj else None

    def new_name(self, obj: Any, source: str | None, after: str, explicit: bool) -> str:
        self.count += 1
        name = f"dtensor{self.count}"
        self.made[name] = (source, after, explicit)
        key = id(obj)

        def forget(ref: Any) -> None:  # the tensor died: its id may be reused by another
            if self.live.get(key, ("", None))[1] is ref:
                del self.live[key]

        try:
            self.live[key] = (name, weakref.ref(obj, forget))
        except TypeError:
            pass
        return name


_STATE: _State | None = None
_ORIGINALS: dict[str, Any] = {}  # module -> the function it bound before install
_ORIGINAL: Any = None  # torch's own function


def _traced(local_tensor: Any, current_spec: Any, target_spec: Any, *args: Any, **kwargs: Any) -> Any:
    """Torch's ``redistribute_local_tensor``, called once with the same arguments, recorded around."""
    st = _STATE
    if st is None or current_spec.placements == target_spec.placements or not st.sink.active():
        return _ORIGINAL(local_tensor, current_spec, target_spec, *args, **kwargs)
    try:
        plan = _plan(st, local_tensor, current_spec, target_spec, kwargs.get("use_graph_based_transform"))
    except Exception:  # a placement or shape our tables do not model: run untraced
        plan = None
    if plan is None:
        return _ORIGINAL(local_tensor, current_spec, target_spec, *args, **kwargs)
    explicit = bool(kwargs.get("is_explicit", False))
    shape, itemsize = tuple(int(s) for s in current_spec.shape), int(local_tensor.element_size())
    sink = st.sink
    sink.begin_op(plan.label + ("" if explicit else " (implicit)"))
    st.record_frees(0)
    src = st.name_of(local_tensor)
    if src is None:
        src = st.new_name(local_tensor, None, "", True)
        sink.declare(src, shape, itemsize, src)
        first = next((e for e in plan.events if e.step == 0 and e.action == "hold"), None)
        st.hold(src, first.box if first else None, first.nbytes if first else 0, local_tensor)
    for e in plan.events:
        if e.step == 0:
            sink.record(0, e.action, [sink.block(src, e.box)], e.nbytes, e.peer, **e.info)
    try:
        out = _ORIGINAL(local_tensor, current_spec, target_spec, *args, **kwargs)
    except BaseException:
        sink.end_op()
        raise
    dst = st.new_name(out, src, plan.after, explicit)
    sink.declare(dst, shape, itemsize, dst if explicit else f"{src} as {plan.after}")
    names = {SRC: src, DST: dst}
    for e in plan.events:
        if e.step:
            sink.record(e.step, e.action, [sink.block(names[e.tensor], e.box)], e.nbytes, e.peer, **e.info)
    last = next((e for e in reversed(plan.events) if e.tensor == DST and e.action == "hold"), None)
    st.hold(dst, last.box if last else None, last.nbytes if last else 0, out)
    sink.end_op()
    return out


def record_frees() -> None:
    """At the end of a trace: one op on every rank that traced DTensors, freeing the pieces whose memory
    Python let go of (a temporary of ``torch.mm``, a deleted variable), so the replay ends where the ranks are."""
    st = _STATE
    if st is None or not st.count:
        return
    _settle(st)
    st.sink.begin_op("DTensor pieces freed by Python")
    st.record_frees(0)
    st.sink.end_op()


SETTLE_S = 0.2  # at most this long for memory whose tensor is gone to be let go of


def _settle(st: _State) -> None:
    """Wait briefly for held pieces whose tensor object is gone but whose memory is not yet: a collective's
    worker thread (gloo's) can hold its output buffer a moment after the wait returned."""
    live = {name for name, _ in st.live.values()}
    deadline = time.monotonic() + SETTLE_S
    while any(n not in live and not ref.expired() for n, (_, _, ref) in st.held.items()):
        if time.monotonic() > deadline:
            return
        time.sleep(0.005)


def _plan(st: _State, local: Any, current: Any, target: Any, graph: Any) -> _Plan | None:
    """This rank's planned events of one redistribute (cached per pair of specs while tracing)."""
    import torch.distributed as dist
    from torch.distributed.tensor import _redistribute as tr

    if getattr(tr, "_are_we_tracing", lambda: False)():
        return None  # inside torch.compile: no real collective runs now
    key = (current, target, graph)
    if key in st.plans:
        return st.plans[key]
    default = getattr(type(current), "is_default_device_order", None)
    orders = [getattr(s, "shard_order", ()) for s in (current, target)]
    if default is not None and not all(default(o) for o in orders):
        st.plans[key] = None  # shard orders our tables do not model
        return None
    mesh, src = from_torch(current.mesh, current.placements)
    chain: list[Sequence[MeshPlacement]] = [src]
    pls, dims = list(current.placements), []
    for info in tr._gen_transform_infos(current, target, graph):
        pls[info.mesh_dim] = info.src_dst_placements[1]
        chain.append(from_torch(current.mesh, pls)[1])
        dims.append(int(info.mesh_dim))
    before, after = placements_label(chain[0]), placements_label(from_torch(target.mesh, target.placements)[1])
    events = plan_events(tuple(current.shape), mesh, chain, dims, dist.get_rank(), int(local.element_size()))
    plan = st.plans[key] = _Plan(f"DTensor redistribute {before} → {after}", after, events)
    return plan


def _patch_if_tracing() -> None:
    if _STATE is not None:
        _patch()


_FINDER = import_watch.AfterImport(PACKAGE, _patch_if_tracing)


def _patch() -> None:
    global _ORIGINAL
    mods = [sys.modules.get(m) for m in MODULES]
    if any(m is None or not hasattr(m, FUNCTION) for m in mods):
        return  # a torch without this function: nothing traced
    for name, mod in zip(MODULES, mods):
        fn = getattr(mod, FUNCTION)
        if fn is not _traced:  # started twice: never wrap our own wrapper
            _ORIGINALS[name] = fn
            setattr(mod, FUNCTION, _traced)
    _ORIGINAL = _ORIGINALS[MODULES[0]]


def install(sink: Sink) -> None:
    """Start tracing DTensor redistributes into ``sink`` (now, or when torch's DTensor is first imported)."""
    global _STATE
    _STATE = _State(sink)
    if PACKAGE in sys.modules:
        _patch()
    else:
        _FINDER.add()


def uninstall() -> dict[str, str]:
    """Put torch's functions back; returns ``{tensor name: label}`` (the user's variable names where found)."""
    global _STATE
    st, _STATE = _STATE, None
    _FINDER.remove()
    for name, fn in list(_ORIGINALS.items()):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, FUNCTION, None) is _traced:
            setattr(mod, FUNCTION, fn)
        del _ORIGINALS[name]
    if st is None:
        return {}
    labels = _labels(st)
    st.live.clear()  # the weak references' callbacks outlive this trace: they keep nothing else alive
    st.plans.clear()
    st.held.clear()
    return labels


def tensor_name(local_tensor: Any) -> str | None:
    """The trace name of a local tensor (a DTensor's ``_local_tensor``) while tracing, if it has one."""
    st = _STATE
    return None if st is None else st.name_of(getattr(local_tensor, "_local_tensor", local_tensor))


def _labels(st: _State) -> dict[str, str]:
    found = _variables({key: name for key, (name, ref) in list(st.live.items()) if ref() is not None}, st)
    out: dict[str, str] = {}
    for name, (source, after, explicit) in st.made.items():
        if name in found:
            out[name] = found[name]
        elif source is not None and not explicit:
            out[name] = f"{out.get(source, source)} as {after}"
    return out


def _variables(names: dict[int, str], st: _State) -> dict[str, str]:
    """``{tensor name: variable}`` for user variables holding a traced local tensor (a DTensor over it,
    the tensor itself, or a view of it such as ``full_tensor()`` returns)."""
    torch = sys.modules.get("torch")
    dtensor = getattr(sys.modules.get(PACKAGE), "DTensor", None)
    if torch is None or not names:
        return {}
    objs = {key: entry[1]() for key, entry in st.live.items() if key in names}
    by_data: dict[tuple[Any, ...], str] = {}
    for key, obj in objs.items():
        if obj is not None and (k := _data_key(obj)) is not None:
            by_data.setdefault(k, names[key])
    found: dict[str, str] = {}
    plain: dict[str, str] = {}
    for var, value in list(rank_state.user_ns().items()):
        if var.startswith("_"):
            continue
        if dtensor is not None and isinstance(value, dtensor):
            name = names.get(id(value._local_tensor))
            if name is not None:
                found.setdefault(name, var)
        elif isinstance(value, torch.Tensor) and (k := _data_key(value)) is not None and k in by_data:
            plain.setdefault(by_data[k], var)
    return {**plain, **found}


def _data_key(t: Any) -> tuple[Any, ...] | None:
    """What a tensor and a view of all of it share (none for an empty tensor: its data pointer says nothing)."""
    try:
        if t.numel() == 0:
            return None
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
    except Exception:
        return None
