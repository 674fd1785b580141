"""Session: one cluster driven from the notebook — start, run on ranks, status, shut down.

``mg.init(4)`` (``lifecycle.py``) starts a session and makes it current; ``s.run(fn, *args)`` returns one result per
rank in rank order. Every wait watches for dead engines and forwards a kernel interrupt to them
(``call_paths.py``: the two ways results come back; ``call_results.py``: what the ranks' reports become).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from jupyter_mgpu import devices as devmod
from jupyter_mgpu.cluster.local import Cluster, describe_exit
from jupyter_mgpu.cluster.processes import HEART_SILENCE_MS
from jupyter_mgpu.deferred_interrupt import deferred_interrupt
from jupyter_mgpu.engine.execution import calls
from jupyter_mgpu.engine.execution.shipped_function import ship
from jupyter_mgpu.errors import EngineDiedError, MgpuError, rank_list
from jupyter_mgpu.session import call_paths, call_wait, rank_status, scripts
from jupyter_mgpu.session.cell_values import RankValues
from jupyter_mgpu.session.direct_channel import DirectChannel
from jupyter_mgpu.session.hang_watch import HangWatch
from jupyter_mgpu.session.output_relay import OutputRelay
from jupyter_mgpu.session.pending import PendingResult
from jupyter_mgpu.session.rank_debugging import DebugDesk
from jupyter_mgpu.session.recovery import GroupRecovery
from jupyter_mgpu.session.targets import parse_targets

_ids = itertools.count(1)
# called with every new Session (e.g. the memory monitor starts its reader); errors are ignored
session_start_hooks: list[Callable[[Session], None]] = []
# called before every call reaches the ranks (e.g. the shards of tensors dropped since the last call are
# freed first: tensors/handles.py); errors propagate, as the call's own would
before_call_hooks: list[Callable[[Session], None]] = []


class Session:
    """A running cluster of one engine per device, joined in one torch.distributed process group."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.id = next(_ids)
        self.alive = True
        self.broken: str | None = None
        self.handles: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self.shutdown_callbacks: list[Callable[[], None]] = []  # run first by shutdown(), errors ignored
        self.direct = DirectChannel(
            cluster.path
        )  # blocking calls skip the controller (engine/execution/direct_channel.py)
        # no stale collective outlives an interrupt or a failed call
        self.recovery = GroupRecovery(
            self.runtime_dir, self.world_size, self.timeout, self._run_on_all, self._mark_broken, cluster.interrupt
        )
        # stuck ranks and mismatched collectives named while a call waits (what each rank does: its telemetry)
        self.hang_watch = HangWatch(
            lambda: call_wait.read_where(self),
            self.recovery.release,
            cluster.spec.hang_after,
            cluster.spec.status_after,
        )
        # ranks stopped at a pdb prompt (breakpoint()) answered through the notebook's input box
        self.debug_desk = DebugDesk(self)
        # seconds the slowest rank spent inside calls, summed over calls: wall time minus this is dispatch
        self.engine_seconds = 0.0
        self.cells_run = 0  # numbers each cell the same on every rank (``<mgpu-cell-N>``), whichever ranks run it
        # (function, names) already said to be defined both in the notebook and on the ranks
        self.said_both_sides: set[tuple[str, tuple[str, ...]]] = set()
        # how a blocking cell reaches the ranks: "direct" (one hop, flat in the ranks) or "ipyparallel"
        # (the controller's queues: what benchmarks/cell_latency.py compares against)
        self.cell_channel = "direct"
        self.last_error: MgpuError | None = None  # the last failure on the ranks (``%mgpu_tb`` reads it)
        # what features keep per session: declared here, set and read only by the module named
        self.active_trace: Any = None  # tracing/capture.py: the mg.trace() recording now, if any
        self.rank_blocks: Any = None  # tensors/shared_blocks.py: each rank's blocks, mapped in the kernel
        self.copy_by_address = True  # tensors/process_copy.py: False once this system refused it
        self.memory_monitor: Any = None  # monitoring/memory_monitor.py: the one reader of the telemetry
        self.memory_dashboard: Any = None  # widgets/memory_dashboard.py: the session's dashboard
        for hook in list(session_start_hooks):
            try:
                hook(self)
            except Exception:
                pass

    # -- facts ------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.cluster.world_size

    @property
    def devices(self) -> list[devmod.DeviceInfo]:
        return list(self.cluster.spec.devices)

    @property
    def device_kind(self) -> str:
        return self.cluster.spec.devices[0].kind

    @property
    def backend(self) -> str:
        return self.cluster.spec.backend

    @property
    def timeout(self) -> float:
        return self.cluster.spec.timeout

    @property
    def runtime_dir(self) -> str:
        return str(self.cluster.path)

    def __repr__(self) -> str:
        state = "running" if self.alive else "shut down"
        return (
            f"<jupyter_mgpu Session {self.cluster.cluster_id}: {self.world_size} × "
            f"{self.device_kind}, {self.backend}, {state}>"
        )

    def check_alive(self) -> None:
        if self.broken:
            raise MgpuError(f"this session's cluster failed ({self.broken}); run %mgpu_init --restart")
        if not self.alive:
            raise MgpuError("this session was shut down; start a new one with %mgpu_init or mg.init()")

    def _check_infrastructure(self) -> None:
        """If the controller or supervisor is gone, stop what is left and raise a clear error."""
        failure = self.cluster.infrastructure_failure()
        if failure:
            self.broken = failure
            self.shutdown()
            raise MgpuError(f"{failure}; its engines were stopped, run %mgpu_init --restart to start again")

    # -- running ----------------------------------------------------------------------------
    def _view(self, ranks: list[int]) -> Any:
        engines = [self.cluster.rank_to_engine[r] for r in ranks]
        known = set(self.cluster.client.ids)
        dropped = [r for r, e in zip(ranks, engines) if e not in known]
        if dropped:  # not ipyparallel's bare KeyError of an engine id
            raise MgpuError(
                f"the ipyparallel controller dropped the engine of {rank_list(dropped)} (its heartbeat was silent "
                f"for {HEART_SILENCE_MS // 1000} s: the process stopped or starved); run %mgpu_init --restart"
            )
        return self.cluster.client[engines]

    def _run_on_all(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on every rank through ipyparallel, no checks (the recovery's own calls)."""
        return self._view(list(range(self.world_size))).apply_async(fn, *args)

    def _mark_broken(self, reason: str) -> None:
        self.broken = reason

    def _check_ready(self, ranks: list[int]) -> None:
        self.check_alive()
        self._check_infrastructure()
        dead = {r: e for r, e in self.cluster.exits().items() if r in ranks}
        if dead:
            r = min(dead)
            raise EngineDiedError(describe_exit(r, dead[r]), ranks=sorted(dead))
        self.recovery.ensure_clean()
        for hook in before_call_hooks:
            hook(self)

    def _submit(self, fn: Callable[..., Any], args: tuple[Any, ...], ranks: list[int]) -> Any:
        """Send ``fn(*args)`` to ``ranks`` through ipyparallel. The stop button is held while the request goes
        out: pressed then, it stops the call just sent (else the ranks would run it for nobody)."""
        self._check_ready(ranks)
        view = self._view(ranks)
        ar = None
        try:
            with deferred_interrupt():
                ar = view.apply_async(fn, *args)
        except KeyboardInterrupt:
            if ar is None:
                raise
            raise call_paths.stop_submitted(self, ar, ranks) from None
        return ar

    def _direct_ok(self, ranks: list[int]) -> bool:
        """Whether a blocking call may take the direct channel: nothing of ipyparallel's is still queued."""
        return not self.cluster.client.outstanding and self.direct.available(ranks)

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        targets: Any = None,
        block: bool = True,
        timeout: float | None = None,
        label: str | None = None,
        stream: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn(*args, **kwargs)`` on every rank (or ``targets``); results in rank order.

        A notebook function runs in the rank's namespace, as ipyparallel runs one: names it declares
        ``global`` are read and written there, names the rank defines are the rank's, and what only the
        notebook defines travels with the function (a name both define is said once).

        With ``block=False`` returns a :class:`PendingResult`. Errors on ranks raise one
        :class:`~jupyter_mgpu.errors.RankError`; a dead engine raises at once, not after a hang.
        """
        if not callable(fn):
            raise MgpuError(f"run() needs a function to call on the ranks, got {type(fn).__name__}")
        ranks = parse_targets(targets, self.world_size)
        label = label or str(getattr(fn, "__name__", "function"))
        fn = ship(fn)  # notebook functions travel by value, with the notebook functions they call
        if block and self.alive and self._direct_ok(ranks):
            shows = (lambda streamed: OutputRelay(streamed, ranks)) if stream else None
            return call_paths.run_direct(self, calls.call, (fn, args, kwargs, label), ranks, label, timeout, shows)
        ar = self._submit(calls.call, (fn, args, kwargs, label), ranks)
        relay = OutputRelay(ar, ranks) if stream else None
        if not block:
            return PendingResult(self, ar, ranks, label, relay)
        return self._collect(ar, ranks, label, timeout, relay)

    def run_script(
        self,
        path: str,
        args: Sequence[Any] = (),
        targets: Any = None,
        *,
        module: bool = False,
        timeout: float | None = None,
        fresh: bool = False,
        breaks: Any = None,
    ) -> None:
        """Run a script on the ranks as ``torchrun script.py args`` runs it on each worker (what
        ``%mgpu_run`` does): as a fresh program, the cells' namespace left as it was. ``module=True``
        runs ``python -m path``; ``fresh=True`` runs it on new processes, the session's ranks untouched.
        Output streams rank-prefixed. ``breaks``: the debugger panel's breakpoints in files."""
        scripts.run_script(self, path, args, targets, module=module, timeout=timeout, fresh=fresh, breaks=breaks)

    def run_cell(
        self,
        code: str,
        targets: Any = None,
        block: bool = True,
        stream: bool = True,
        timeout: float | None = None,
        *,
        lent: dict[str, bytes] | None = None,
        rich: bool = False,
        show: list[int] | None = None,
        breaks: Any = None,
        first_line: int = 1,
    ) -> Any:
        """Run notebook cell source on the ranks (what ``%%mgpu`` does); the reprs of its last value (with
        ``rich``, what ``engine/execution/cell_value.py`` describes). ``lent``: notebook values (``cell_names``);
        ``show``: the ranks whose output shows (the others' a click away); ``breaks``: where the ranks stop
        for JupyterLab's debugger panel (``magics/debug_panel.py``): lines of ``code``, or those and other files'
        (``engine/execution/panel_breaks.py``); ``first_line``: the
        editor's number of ``code``'s first line (2 under a ``%%mgpu`` line), which every message uses."""
        ranks = parse_targets(targets, self.world_size)
        self.cells_run += 1
        args = (code, None, lent, rich, breaks, first_line, self.cells_run)
        if block and self.alive and self.cell_channel == "direct" and self._direct_ok(ranks):
            shows = (lambda streamed: OutputRelay(streamed, ranks, prefix=True, show=show)) if stream else None
            return call_paths.run_direct(self, calls.run_cell, args, ranks, "%%mgpu cell", timeout, shows)
        ar = self._submit(calls.run_cell, args, ranks)
        relay = OutputRelay(ar, ranks, prefix=True, show=show) if stream else None
        if not block:
            finish = (lambda reports: RankValues(ranks, reports, show)) if rich else None
            return PendingResult(self, ar, ranks, "%%mgpu cell", relay, finish)
        return self._collect(ar, ranks, "%%mgpu cell", timeout, relay)

    def _collect(
        self, ar: Any, ranks: list[int], label: str, timeout: float | None, relay: OutputRelay | None
    ) -> list[Any]:
        """Wait for ipyparallel's ``ar`` as a call waits (``session/call_paths.py``); the values in rank order."""
        return call_paths.collect(self, ar, ranks, label, timeout, relay)

    def _rebuild_process_group(self) -> bool:
        """Give every rank a fresh process group (all ranks must be idle); False if they did not meet."""
        try:
            return self.recovery.rebuild()
        except Exception:
            return False

    # -- status -----------------------------------------------------------------------------
    def memory(self) -> list[dict[str, Any]]:
        """The latest telemetry sample of every rank, in rank order (``state`` is ``dead`` for lost ranks)."""
        return rank_status.memory(self.cluster, self.world_size)

    def where(self, dump: str | None = None, merge: bool = False) -> Any:
        """What every rank does now (``mg.where``): state, seconds, collective, line, stack; answers mid-cell.
        ``dump``: a folder where every rank's flight-recorder dump is written too, for ``torchfrtrace``;
        ``merge``: the ranks' stacks as one tree instead (``session/stack_tree.py``)."""
        self.check_alive()
        rows = rank_status.where(self.cluster, self.world_size)
        if dump is not None:
            rank_status.dump_recorders(self.cluster, self.world_size, str(dump))
        if merge:
            from jupyter_mgpu.session.stack_tree import StackTree

            return StackTree(rows)
        return rows

    def status(self) -> list[dict[str, Any]]:
        """One row per rank: rank, engine id, pid, device, backend, memory, state (no engine round trip)."""
        return rank_status.status(self.cluster, self.memory(), self.devices, self.backend)

    # -- lifetime ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop every engine and the controller, free their memory and remove the cluster's files."""
        if not self.alive:
            return
        with deferred_interrupt():  # the stop button must not leave half the cluster running
            self.alive = False
            for callback in list(self.shutdown_callbacks):
                try:
                    callback()
                except Exception:
                    pass
            for handle in list(self.handles.values()):
                try:
                    handle._invalidate()
                except Exception:
                    pass
            self.direct.close()
            self.cluster.stop()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
