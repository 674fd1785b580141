"""Session: one cluster driven from the notebook — start, run on ranks, status, shut down.

``mg.init(4)`` starts a session and makes it current; ``s.run(fn, *args)`` returns one result per
rank in rank order. Every wait watches for dead engines and forwards a kernel interrupt to them.
"""

from __future__ import annotations

import atexit
import itertools
import sys
import time
import weakref
from typing import Any, Callable, Iterable

from jupyter_mgpu import devices as devmod
from jupyter_mgpu.engine import process_group as rendezvous
from jupyter_mgpu.cluster.local import Cluster, ClusterSpec, describe_exit, discard_spare
from jupyter_mgpu.deferred_interrupt import deferred_interrupt
from jupyter_mgpu.session.direct_channel import ChannelClosed, DirectChannel
from jupyter_mgpu.engine import calls
from jupyter_mgpu.engine import memory_figures
from jupyter_mgpu.engine import rank_namespace
from jupyter_mgpu.engine import telemetry as tele
from jupyter_mgpu.engine.shipped_function import ship
from jupyter_mgpu.errors import EngineDiedError, MgpuError
from jupyter_mgpu.session.recovery import GroupRecovery
from jupyter_mgpu.session.rank_errors import build_error, rank_list
from jupyter_mgpu.session.output_relay import OutputRelay

_current: "Session | None" = None
_ids = itertools.count(1)
# called with every new Session (e.g. the memory monitor starts its reader); errors are ignored
session_start_hooks: list[Callable[["Session"], None]] = []


def parse_targets(targets: Any, world_size: int) -> list[int]:
    """Ranks named by ``targets``: None/"all", an int, ``"0,2"``, ``"1:3"`` or an iterable of ints."""
    if targets is None or (isinstance(targets, str) and targets.strip().lower() in ("all", "")):
        return list(range(world_size))
    if isinstance(targets, bool):
        raise MgpuError(f"targets must be ranks such as 0 or [0, 2], got {targets!r}")
    if isinstance(targets, int):
        ranks = [targets]
    elif isinstance(targets, str):
        ranks = []
        for part in targets.split(","):
            part = part.strip()
            try:
                if ":" in part:
                    lo, hi = part.split(":", 1)
                    ranks.extend(range(int(lo or 0), int(hi) if hi else world_size))
                else:
                    ranks.append(int(part))
            except ValueError:
                raise MgpuError(f"targets must be ranks such as 0,2 or 1:3, got {targets!r}") from None
    elif isinstance(targets, Iterable):
        ranks = list(targets)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise MgpuError(f"targets must be whole-number ranks, got {targets!r}")
    else:
        raise MgpuError(f"targets must be ranks such as 0 or [0, 2], got {targets!r}")
    if not ranks:
        raise MgpuError("targets names no rank")
    bad = [r for r in ranks if not 0 <= r < world_size]
    if bad:
        raise MgpuError(
            f"rank {bad[0]} is out of range: this session has ranks 0-{world_size - 1}"
        )
    return sorted(dict.fromkeys(ranks))


class PendingResult:
    """The result of a non-blocking run: ``.ready()``, ``.get(timeout=None)`` (one value per rank)."""

    def __init__(self, session: "Session", ar: Any, ranks: list[int], label: str, relay: OutputRelay | None):
        self.session, self.ar, self.ranks, self.label, self.relay = session, ar, ranks, label, relay

    def ready(self) -> bool:
        return self.ar.ready()

    def get(self, timeout: float | None = None) -> list[Any]:
        return self.session._collect(self.ar, self.ranks, self.label, timeout, self.relay)

    def __repr__(self) -> str:
        return f"<PendingResult {self.label} on {rank_list(self.ranks)}: {'ready' if self.ready() else 'running'}>"


class Session:
    """A running cluster of one engine per device, joined in one torch.distributed process group."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.id = next(_ids)
        self.alive = True
        self.broken: str | None = None
        self.handles: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
        self.shutdown_callbacks: list[Callable[[], None]] = []  # run first by shutdown(), errors ignored
        self.direct = DirectChannel(cluster.path)  # blocking calls skip the controller (engine/direct_channel.py)
        self.recovery = GroupRecovery(self)  # no stale collective outlives an interrupt or a failed call
        # seconds the slowest rank spent inside calls, summed over calls: wall time minus this is dispatch
        self.engine_seconds = 0.0
        # (function, names) already said to be defined both in the notebook and on the ranks
        self.said_both_sides: set[tuple[str, tuple[str, ...]]] = set()
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
        return (f"<jupyter_mgpu Session {self.cluster.cluster_id}: {self.world_size} × "
                f"{self.device_kind}, {self.backend}, {state}>")

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
        return self.cluster.client[[self.cluster.rank_to_engine[r] for r in ranks]]

    def _check_ready(self, ranks: list[int]) -> None:
        self.check_alive()
        self._check_infrastructure()
        dead = {r: e for r, e in self.cluster.exits().items() if r in ranks}
        if dead:
            r = min(dead)
            raise EngineDiedError(describe_exit(r, dead[r]), ranks=sorted(dead))
        self.recovery.ensure_clean()

    def _submit(self, fn: Callable, args: tuple, ranks: list[int]) -> Any:
        self._check_ready(ranks)
        return self._view(ranks).apply_async(fn, *args)

    def _direct_ok(self, ranks: list[int]) -> bool:
        """Whether a blocking call may take the direct channel: nothing of ipyparallel's is still queued."""
        return not self.cluster.client.outstanding and self.direct.available(ranks)

    def _run_direct(self, args: tuple, ranks: list[int], label: str, timeout: float | None) -> list[Any]:
        """``calls.call(*args)`` on ``ranks`` through the direct channel; same errors as ``_collect``."""
        from ipyparallel.serialize import pack_apply_message

        self._check_ready(ranks)
        bufs = pack_apply_message(calls.call, args, {})
        deadline = None if timeout is None else time.monotonic() + timeout
        self.recovery.start_call()

        def check(pending: list[int], done: dict[int, Any]) -> None:
            self._check_waiting(ranks, lambda: pending, label, deadline, timeout, done=done)

        try:
            results = self.direct.call(ranks, bufs, check)
        except ChannelClosed as closed:
            self._await_exit_record(closed.rank)
            check(ranks, {})
            raise MgpuError(f"{label}: lost contact with rank {closed.rank} (its direct channel closed)") from None
        except KeyboardInterrupt:
            self.cluster.interrupt(ranks)
            raise self.recovery.after_interrupt(ranks) from None
        broken = next((results[r]["transport"] for r in ranks if results[r].get("transport")), None)
        if broken:
            raise self._transport_message(broken, label)
        return self._results([results[r] for r in ranks], ranks)

    def _await_exit_record(self, rank: int, wait: float = 5.0) -> None:
        """The supervisor writes how an engine ended a moment after its socket closes."""
        end = time.monotonic() + wait
        while rank not in self.cluster.exits() and time.monotonic() < end:
            time.sleep(0.02)

    def run(self, fn: Callable, *args: Any, targets: Any = None, block: bool = True,
            timeout: float | None = None, label: str | None = None, stream: bool = False,
            **kwargs: Any) -> Any:
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
        label = label or getattr(fn, "__name__", "function")
        fn = ship(fn)  # notebook functions travel by value, with the notebook functions they call
        if block and not stream and self.alive and self._direct_ok(ranks):
            return self._run_direct((fn, args, kwargs, label), ranks, label, timeout)
        ar = self._submit(calls.call, (fn, args, kwargs, label), ranks)
        relay = OutputRelay(ar, ranks) if stream else None
        if not block:
            return PendingResult(self, ar, ranks, label, relay)
        return self._collect(ar, ranks, label, timeout, relay)

    def run_cell(self, code: str, targets: Any = None, block: bool = True, stream: bool = True,
                 timeout: float | None = None) -> Any:
        """Run notebook cell source on the ranks (what ``%%mgpu`` does); values of a last expression."""
        ranks = parse_targets(targets, self.world_size)
        ar = self._submit(calls.run_cell, (code,), ranks)
        relay = OutputRelay(ar, ranks, prefix=True) if stream else None
        if not block:
            return PendingResult(self, ar, ranks, "%%mgpu cell", relay)
        return self._collect(ar, ranks, "%%mgpu cell", timeout, relay)

    def _collect(self, ar: Any, ranks: list[int], label: str, timeout: float | None,
                 relay: OutputRelay | None) -> list[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.recovery.start_call()
        try:
            while not ar.ready():
                ar.wait(0.05)
                if relay is not None:
                    relay.poll()
                self._check_waiting(ranks, lambda: self._pending_ranks(ar, ranks), label, deadline, timeout, relay,
                                    done=self._finished_results(ar, ranks))
        except KeyboardInterrupt:
            pending = self._pending_ranks(ar, ranks)
            self.cluster.interrupt(pending)
            try:
                interrupted = self.recovery.after_interrupt(pending)
            finally:
                if relay is not None:
                    relay.flush()
            raise interrupted from None
        if relay is not None:
            ar.wait_for_output(5)  # results can arrive before the last output (shell vs iopub channel)
            relay.flush()
        try:
            results = ar.get()
        except Exception as exc:  # an ipyparallel-level failure (engine lost, unpicklable result)
            raise self._transport_error(exc, label) from None
        if not isinstance(results, list):
            results = [results]
        return self._results(results, ranks)

    def _results(self, results: list[dict], ranks: list[int]) -> list[Any]:
        """The values of ``calls.call`` reports in rank order, or one error for every failed rank."""
        self.engine_seconds += max((res.get("seconds", 0.0) for res in results), default=0.0)
        self._say_both_sides(results)
        failures = {r: res for r, res in zip(ranks, results) if not res.get("ok")}
        if failures:
            raise self._error(failures, ranks, dict(zip(ranks, results)))
        return [res["value"] for res in results]

    def _say_both_sides(self, results: list[dict]) -> None:
        """Once per function and names: which value of a name both the notebook and the ranks define is used."""
        found: dict[str, set[str]] = {}
        for res in results:
            for function, names in res.get("shadowed") or ():
                found.setdefault(function, set()).update(names)
        for function, names in found.items():
            key = (function, tuple(sorted(names)))
            if key not in self.said_both_sides:
                self.said_both_sides.add(key)
                print(rank_namespace.both_sides_line(function, sorted(names)), file=sys.stderr)

    def _finished_results(self, ar: Any, ranks: list[int]) -> dict[int, Any]:
        """The reports of the ranks whose part of ``ar`` has already come back (one future per rank)."""
        children = getattr(ar, "_children", None) or []
        done = {}
        for rank, future in zip(ranks, children):
            if future.done() and not future.cancelled() and future.exception() is None:
                done[rank] = future.result()
        return done

    def _pending_ranks(self, ar: Any, ranks: list[int]) -> list[int]:
        pending = []
        for rank, msg_id in zip(ranks, ar.msg_ids):
            if msg_id in self.cluster.client.outstanding:
                pending.append(rank)
        return pending or list(ranks)

    def _check_waiting(self, ranks: list[int], pending: Callable[[], list[int]], label: str,
                       deadline: float | None, timeout: float | None, relay: OutputRelay | None = None,
                       done: dict[int, Any] | None = None) -> None:
        """While waiting on ``ranks`` (either path): raise for a dead rank, a broken cluster or the
        deadline, interrupting the ranks still at work first; release ranks left waiting in a
        collective by a rank that already failed (``done``: the reports that came back)."""
        dead = {r: e for r, e in self.cluster.exits().items() if r in ranks}
        if dead:
            if relay is not None:
                relay.flush()
            self.cluster.interrupt([r for r in pending() if r not in dead])
            r = min(dead)
            raise EngineDiedError(describe_exit(r, dead[r], "while running this"), ranks=sorted(dead))
        self._check_infrastructure()
        if done:
            self.recovery.watch(done, pending())
        if deadline is not None and time.monotonic() > deadline:
            waiting = pending()
            self.cluster.interrupt(waiting)
            # SIGINT does not reach a rank blocked in a collective: the next call rebuilds the group
            # first, so that collective is never matched with a later one
            self.recovery.dirty = self.recovery.dirty or "the timeout"
            raise MgpuError(f"{label} did not finish within {timeout:g} s on {rank_list(waiting)}; "
                            "those ranks were interrupted and the process group is rebuilt before the next call")

    def _transport_error(self, exc: Exception, label: str) -> MgpuError:
        dead = self.cluster.exits()
        if dead:
            r = min(dead)
            return EngineDiedError(describe_exit(r, dead[r]), ranks=sorted(dead))
        text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        return self._transport_message(text, label)

    def _transport_message(self, text: str, label: str) -> MgpuError:
        """What went wrong moving a call or its result between the notebook and the ranks."""
        if "ModuleNotFoundError" in text or "No module named" in text:
            return MgpuError(f"{label}: the ranks cannot import what it needs ({text.split(']')[-1].strip()}); "
                             "define the function in the notebook or make its module importable on the engines")
        if "pickl" in text.lower() or "serializ" in text.lower():
            return MgpuError(f"{label}: a value could not be sent between the notebook and the ranks ({text}); "
                             "return plain data or tensors, and define functions at top level")
        return MgpuError(f"{label} failed in ipyparallel: {text}")

    def _error(self, failures: dict[int, dict], ranks: list[int], results: dict[int, dict]) -> MgpuError:
        """One error for the failed ranks; first, a clean process group if the ranks may disagree."""
        succeeded = [r for r in ranks if r not in failures]
        released = sorted(self.recovery.released)
        try:
            rebuilt = self.recovery.after_failure(results)
        except Exception:  # the next call tries again
            rebuilt = False
        return build_error(
            failures,
            succeeded=succeeded,
            budgets={r: d.total_memory for r, d in enumerate(self.devices)},
            device_kind=self.device_kind,
            sequence_numbers={r: res.get("seq_delta") for r, res in results.items()},
            timeout=self.timeout,
            rebuilt=rebuilt,
            released=released,
        )

    def _rebuild_process_group(self) -> bool:
        """Give every rank a fresh process group (all ranks must be idle); False if they did not meet."""
        try:
            return self.recovery.rebuild()
        except Exception:
            return False

    # -- status -----------------------------------------------------------------------------
    def memory(self) -> list[dict[str, Any]]:
        """The latest telemetry sample of every rank, in rank order (``state`` is ``dead`` for lost ranks)."""
        samples = tele.read_samples(self.cluster.path)
        dead = self.cluster.exits()
        out = []
        for r in range(self.world_size):
            s = dict(samples.get(r) or {"rank": r, "time": None})
            if r in dead:
                s["state"] = "dead"
            s.setdefault("state", "starting")
            out.append(s)
        return out

    def status(self) -> list[dict[str, Any]]:
        """One row per rank: rank, engine id, pid, device, backend, memory, state (no engine round trip)."""
        rows = []
        for sample, dev in zip(self.memory(), self.devices):
            r = sample["rank"]
            f = memory_figures.figures(sample)  # the limit every view shows (runtime + budget on CPU)
            used, total = f["used"], f["limit"] or dev.total_memory
            rows.append({
                "rank": r,
                "engine_id": self.cluster.rank_to_engine.get(r),
                "pid": self.cluster.engine_pids.get(r),
                "device": dev.label,
                "name": dev.name,
                "backend": self.backend,
                "memory_used": used,
                "memory_total": total,
                "state": sample["state"],
                "op": sample.get("op"),
            })
        return rows

    # -- lifetime ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop every engine and the controller, free their memory and remove the cluster's files."""
        global _current
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
            if _current is self:
                _current = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _build_spec(
    n: int | None = None,
    *,
    cpu: bool = False,
    devices: list[int] | str | None = None,
    backend: str | None = None,
    mem_per_device: str | int | None = None,
    timeout: float | None = None,
    telemetry_period: float = 0.1,
) -> ClusterSpec:
    """Check every argument of :func:`init` and pick the devices; starts nothing."""
    if isinstance(devices, str):
        try:
            devices = [int(d) for d in devices.split(",") if d.strip()]
        except ValueError:
            raise MgpuError(f"--devices takes indices such as 0,2, got {devices!r}") from None
    budget = devmod.parse_size(mem_per_device) if mem_per_device is not None else None
    timeout = rendezvous.check_timeout(timeout)
    if isinstance(telemetry_period, bool) or not isinstance(telemetry_period, (int, float)) \
            or not 0 <= telemetry_period <= 60:
        raise MgpuError(f"telemetry_period must be between 0 and 60 seconds, got {telemetry_period!r}")
    devs = devmod.discover(n, cpu=cpu, devices=devices, mem_per_device=budget)
    chosen = rendezvous.choose_backend(backend, devs[0].kind)
    return ClusterSpec(devs, chosen, timeout, mem_per_device=budget, telemetry_period=telemetry_period)


def start_session(n: int | None = None, **options: Any) -> Session:
    """Start a new cluster and return its session, without making it current (see :func:`init`)."""
    from jupyter_mgpu import launch

    if launch.requested(options):  # engines from ipyparallel's launchers, on this host or several
        discard_spare()  # %load_ext's spare controller and supervisor serve local starts only
        return Session(launch.start(n, **_launch_options(options)))
    for key in launch.OPTION_NAMES:
        if options.pop(key, None) not in (None, "", [], ()):
            raise MgpuError(f"--{key.replace('_', '-')} goes with --launcher, --hosts or --connect")
    return Session(Cluster.start(_build_spec(n, **options)))


def _launch_options(options: dict[str, Any]) -> dict[str, Any]:
    """The checked keyword arguments of ``launch.start`` (the same checks as :func:`_build_spec`)."""
    out = dict(options)
    if out.get("mem_per_device") is not None:
        out["mem_per_device"] = devmod.parse_size(out["mem_per_device"])
    out["timeout"] = rendezvous.check_timeout(out.get("timeout"))
    if out.get("devices") is not None:
        raise MgpuError("--devices picks devices on this host; with a launcher each engine takes its host's "
                        "device of its local rank")
    out.pop("devices", None)
    return out


def init(
    n: int | None = None,
    *,
    cpu: bool = False,
    devices: list[int] | str | None = None,
    backend: str | None = None,
    mem_per_device: str | int | None = None,
    timeout: float | None = None,
    restart: bool = False,
    telemetry_period: float = 0.1,
    **launch: Any,
) -> Session:
    """Start a cluster of ``n`` engines, one per device, joined in a process group; make it current.

    Mirrors ``%mgpu_init``: ``mg.init(4, cpu=True, backend="gloo", mem_per_device="2GiB", timeout=60)``.
    Arguments are checked before a running cluster is replaced, so a typo never costs the old one.
    ``launcher=`` (local, ssh, mpi, slurm, pbs), ``hosts=``, ``per_host=``, ``interface=``, ``connect=``,
    ``partition=``, ``time=``, ``account=``, ``launcher_args=`` start the engines through ipyparallel's
    launchers instead, on one host or several (see docs/multihost.md).
    """
    global _current
    options = dict(cpu=cpu, devices=devices, backend=backend, mem_per_device=mem_per_device, timeout=timeout,
                   telemetry_period=telemetry_period, **launch)
    if _current is not None and _current.alive:
        if not restart:
            raise MgpuError(
                f"a cluster is already running ({_current.world_size} × {_current.device_kind}); "
                "use %mgpu_init --restart (mg.init(..., restart=True)) to replace it, or %mgpu_shutdown first"
            )
        _check_options(n, options)  # refuse bad arguments while the old cluster still runs
        _current.shutdown()
    _current = start_session(n, **options)  # the default budget is a share of the RAM free now
    return _current


def _check_options(n: int | None, options: dict[str, Any]) -> None:
    """Every check of the arguments that can run before anything starts."""
    from jupyter_mgpu import launch

    if launch.requested(options):
        checked = _launch_options(options)
        launch.parse(n, **{k: checked.get(k) for k in launch.OPTION_NAMES})
    else:
        _build_spec(n, **{k: v for k, v in options.items() if k not in launch.OPTION_NAMES})


def current(required: bool = True) -> Session | None:
    """The current session; raises a clear error when there is none and ``required``."""
    if (_current is None or not _current.alive) and required:
        raise MgpuError("no multi-GPU session is running; start one with %mgpu_init N or mg.init(N)")
    return _current if (_current is not None and _current.alive) else None


def shutdown() -> None:
    """Shut down the current session, if any."""
    if _current is not None:
        _current.shutdown()


@atexit.register
def _shutdown_at_exit() -> None:
    try:
        shutdown()
    except Exception:
        pass
