"""``%mgpu_*`` magics: parse arguments (named like ipyparallel's ``%px``), call the API, display."""

from __future__ import annotations

import argparse
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_mgpu.errors import Interrupted, MgpuError
from jupyter_mgpu.init_options import InitOptions, argparse_arguments, option_names
from jupyter_mgpu.magics.arguments import argument, magic_arguments, parse_line
from jupyter_mgpu.magics.rank_table import RankTable
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.session import rank_debugging
from jupyter_mgpu.session.targets import parse_targets
from jupyter_mgpu.units import format_bytes


def _init_arguments(func: Any) -> Any:
    """Add ``%mgpu_init``'s options, as :class:`InitOptions` declares them, to its argument parser."""
    for flag, kwargs in reversed(argparse_arguments()):
        func = argument(flag, **kwargs)(func)
    return func


def _seconds(text: str, option: str = "timeout") -> float:
    """A ``--timeout`` (or ``--hang-after``) value, or one sentence saying it is not a number of seconds."""
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--{option.replace('_', '-')} takes seconds, got {text!r}") from None


def _init_request(args: Any) -> InitOptions:
    """The start request the parsed ``%mgpu_init`` arguments make (numbers read from their text)."""
    given = {name: getattr(args, name) for name in option_names() if getattr(args, name, None) is not None}
    n = None
    if args.n is not None:
        try:
            n = int(args.n)
        except ValueError:
            raise UsageError(f"the number of devices must be a whole number, got {args.n!r}") from None
    for key in ("timeout", "hang_after", "status_after"):
        if key in given:
            given[key] = _seconds(given[key], key)
    return InitOptions(n=n, **given)


class StatusTable(RankTable):
    """``%mgpu_status`` output: an HTML table in notebooks, aligned text elsewhere."""

    COLUMNS = ("rank", "engine_id", "pid", "device", "backend", "memory", "state")
    CSS_CLASS = "mgpu-status"

    def _cells(self, row: dict[str, Any]) -> list[str]:
        used, total = row.get("memory_used"), row.get("memory_total")
        memory = (
            f"{format_bytes(used)} / {format_bytes(total)}"
            if used is not None and total
            else (format_bytes(used) if used is not None else "?")
        )
        state = row["state"] + (f" ({row['op']})" if row.get("op") and row["state"] == "busy" else "")
        return [str(row["rank"]), str(row["engine_id"]), str(row["pid"]), row["device"], row["backend"], memory, state]


@magics_class
class MgpuMagics(Magics):
    """The magics ``%load_ext jupyter_mgpu`` registers."""

    @magic_arguments()
    @argument(
        "n", nargs="?", default=None, help="number of devices (default: every visible GPU, or 2 CPU virtual devices)"
    )
    @_init_arguments
    @argument("--no-dashboard", action="store_true", help="do not show the memory dashboard")
    @line_magic
    def mgpu_init(self, line: str = "") -> Any:
        """Start one ipyparallel engine per device, joined in a torch.distributed process group."""
        args = parse_line(self.mgpu_init, line)
        opts = _init_request(args)
        start = time.perf_counter()
        try:
            s = sessmod.init_with(opts)
        except Interrupted:
            raise
        except KeyboardInterrupt:
            raise Interrupted(
                "interrupted while starting the cluster; nothing of it is left running, run %mgpu_init again"
            ) from None
        took = time.perf_counter() - start
        dev = s.devices[0]
        what = "GPU" if dev.kind == "cuda" else "CPU virtual device"
        mem = f", budget {format_bytes(dev.total_memory)} each" if dev.kind == "cpu" else ""
        hosts = sorted(set(getattr(s.cluster, "hosts", {}).values()))
        where = f" on {len(hosts)} host{'s' if len(hosts) != 1 else ''} ({', '.join(hosts)})" if hosts else ""
        print(f"mgpu: {s.world_size} engines ready ({s.world_size} × {what}, {s.backend}{mem}){where} in {took:.1f} s")
        if not args.no_dashboard:
            self._show_dashboard()
        return None

    @property
    def _user_ns(self) -> dict[str, Any]:
        """The notebook's namespace (a magic always runs inside a shell)."""
        assert self.shell is not None
        ns: dict[str, Any] = self.shell.user_ns
        return ns

    def _show_dashboard(self) -> None:
        try:
            from jupyter_mgpu.widgets import memory_dashboard
        except ImportError:
            return
        try:
            from IPython.display import display

            display(memory_dashboard.dashboard())
        except Exception:  # a missing widget front end must not fail the init
            pass

    @line_magic
    def mgpu_status(self, line: str = "") -> StatusTable:
        """Show rank, engine id, pid, device, backend, memory and state of every rank."""
        if line.strip():
            raise UsageError(f"%mgpu_status takes no arguments, got {line.strip()!r}")
        s = sessmod.current()
        _wait_for_fresh_samples(s)  # a rank that finished the last cell a moment ago is idle, not "busy"
        return StatusTable(s.status())

    @magic_arguments()
    @argument(
        "--rank", "-r", type=int, action="append", help="a dead rank to start again (repeat; default: every dead one)"
    )
    @line_magic
    def mgpu_restart(self, line: str = "") -> Any:
        """Start dead ranks again on their devices; every other rank keeps its variables, shards and tensors."""
        from jupyter_mgpu.session.rank_restart import restart

        args = parse_line(self.mgpu_restart, line)
        return restart(sessmod.current(), args.rank)

    @line_magic
    def mgpu_shutdown(self, line: str = "") -> None:
        """Stop the engines and controller of the current session and free their memory."""
        if line.strip():
            raise UsageError(f"%mgpu_shutdown takes no arguments, got {line.strip()!r}")
        s = sessmod.current(required=False)
        if s is None:
            print("mgpu: no session is running")
            return
        try:
            s.shutdown()
        except KeyboardInterrupt:
            raise Interrupted("interrupted, but the engines were stopped all the same") from None
        print("mgpu: engines stopped")

    @magic_arguments()
    @argument("--targets", "-t", default=None, help="ranks to push to, e.g. 0,2 or 1:3 (default: all)")
    @argument("names", nargs="+", help="notebook names whose values go to the ranks")
    @line_magic
    def mgpu_push(self, line: str = "") -> None:
        """Send notebook values to the ranks by name: ``%mgpu_push lr model_config``."""
        from jupyter_mgpu.engine.execution import namespace_transfer

        args = parse_line(self.mgpu_push, line)
        missing = [name for name in args.names if name not in self._user_ns]
        if missing:
            raise UsageError(f"%mgpu_push: the notebook has no name {missing[0]!r}")
        values = {name: self._user_ns[name] for name in args.names}
        s = sessmod.current()
        replaced = s.run(namespace_transfer.put, values, targets=args.targets, label="%mgpu_push")
        both = sorted({name for names in replaced for name in names})
        if both:
            print(f"mgpu: {', '.join(both)} replaced the ranks' own value{'s' if len(both) > 1 else ''}")

    @magic_arguments()
    @argument("--rank", "-r", default=None, help="the rank to read from (default: every rank, as a list)")
    @argument("name", help="the name to read on the ranks")
    @line_magic
    def mgpu_pull(self, line: str = "") -> None:
        """Bring a rank's value into the notebook by name: ``%mgpu_pull loss --rank 0`` (without
        ``--rank``, the list of every rank's value)."""
        from jupyter_mgpu.engine.execution import namespace_transfer

        args = parse_line(self.mgpu_pull, line)
        if not args.name.isidentifier():
            raise UsageError(f"%mgpu_pull takes a name, got {args.name!r}")
        s = sessmod.current()
        ranks = parse_targets(args.rank, s.world_size)
        if args.rank is not None and len(ranks) != 1:
            raise UsageError(f"--rank takes one rank, got {args.rank!r}; leave it out for every rank's value")
        values = s.run(namespace_transfer.get, args.name, targets=ranks, label="%mgpu_pull")
        self._user_ns[args.name] = values[0] if args.rank is not None else values

    @magic_arguments()
    @argument("--targets", "-t", default=None, help="ranks to run on, e.g. 0,2 or 1:3 (default: all)")
    @argument("--timeout", default=None, help="seconds before the ranks still running are interrupted")
    @argument("-m", dest="module", action="store_true", help="run a module as python -m does")
    @argument("--fresh", action="store_true", help="run on new processes, leaving the session's ranks untouched")
    @argument("target", help="the script (or, with -m, the module) to run on every rank")
    @argument("args", nargs=argparse.REMAINDER, help="the script's own arguments (sys.argv[1:])")
    @line_magic
    def mgpu_run(self, line: str = "") -> None:
        """Run a script on the ranks as ``torchrun`` runs it on its workers, unchanged:
        ``%mgpu_run train.py --epochs 2``, ``%mgpu_run -m package.module``. Every rank has torchrun's
        environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...); each run starts as a fresh program
        (no module, setting or library state of an earlier run); ``dist.init_process_group()`` in the
        script joins the session's group, and ``destroy_process_group()`` keeps it. ``--fresh`` runs it
        on brand-new processes instead."""
        args = parse_line(self.mgpu_run, line)
        timeout = _seconds(args.timeout) if args.timeout is not None else None
        s = sessmod.current()
        panel = rank_debugging.panel  # JupyterLab's debugger panel: its breakpoints in the script stop the ranks
        breaks = panel.script_breaks() if panel is not None and not args.fresh else None
        try:
            s.run_script(
                args.target,
                args.args,
                targets=args.targets,
                module=args.module,
                timeout=timeout,
                fresh=args.fresh,
                breaks=breaks,
            )
        finally:
            if breaks:
                panel.cell_ended()

    @magic_arguments()
    @argument(
        "name",
        help="broadcast, reduce, all_reduce, all_gather, reduce_scatter, scatter, gather, "
        "all_to_all, barrier or send_recv",
    )
    @argument("--op", default="sum", help="reduce op: sum, product, min, max, avg (reduce, all_reduce, reduce_scatter)")
    @argument(
        "--src", "--root", dest="src", default=None, help="root rank of broadcast, scatter (and of reduce, gather)"
    )
    @argument("--dst", default=None, help="root rank of reduce, gather (torch's name)")
    @argument("--shape", default=None, help="shape of the demo tensors, e.g. 12x12 (default 11x11)")
    @argument("--dtype", default="float32", help="dtype of the demo tensors")
    @argument("--inputs", default=None, help="a notebook variable: a function rank -> tensor, or a DistTensor")
    @argument("--no-animate", action="store_true", help="do not show the logical-schedule player")
    @line_magic
    def mgpu_collective(self, line: str = "") -> None:
        """Run a collective on every rank and show each rank's data before and after, plus its schedule."""
        from jupyter_mgpu.collectives.collective_run import collective

        args = parse_line(self.mgpu_collective, line)
        roots = {}
        for key in ("src", "dst"):
            value = getattr(args, key)
            if value is not None:
                try:
                    roots[key] = int(value)
                except ValueError:
                    raise UsageError(f"--{key} takes a rank number, got {value!r}") from None
        inputs = None
        if args.inputs is not None:
            if args.inputs not in self._user_ns:
                raise UsageError(f"--inputs names no notebook variable: {args.inputs!r} is not defined")
            inputs = self._user_ns[args.inputs]
        result = collective(args.name, inputs, op=args.op, shape=args.shape, dtype=args.dtype, **roots)
        result.show(animate=not args.no_animate)

    @magic_arguments()
    @argument("collectives", nargs="+", help="collectives to time, e.g. all_reduce all_gather")
    @argument("--sizes", default="1K:1M", help="sizes as a range 1K:256M (x factor each step) or a list 1K,1M")
    @argument("--factor", default="2", help="growth factor of a size range (default 2)")
    @argument("--iters", default="20", help="timed iterations per size (default 20)")
    @argument("--warmup", default="5", help="untimed warm-up iterations per size (default 5)")
    @argument("--op", default="sum", help="reduce op of reduce, all_reduce, reduce_scatter")
    @argument("--root", default="0", help="root rank of broadcast, reduce, gather, scatter")
    @argument("--dtype", default="float32", help="element type (default float32)")
    @argument("--no-plot", action="store_true", help="show the table only")
    @line_magic
    def mgpu_bench(self, line: str = "") -> None:
        """Benchmark collectives like nccl-tests: table of time, algbw, busbw, #wrong and a busbw plot.

        The :class:`~jupyter_mgpu.collectives.collective_bench.BenchResult` stays in ``_mgpu_bench`` (rows with per-iteration times).
        """
        from jupyter_mgpu.collectives.collective_bench import bench

        args = parse_line(self.mgpu_bench, line)
        numbers: dict[str, Any] = {}
        for key, kind in (("factor", float), ("iters", int), ("warmup", int), ("root", int)):
            try:
                numbers[key] = kind(getattr(args, key))
            except ValueError:
                raise UsageError(f"--{key} takes a number, got {getattr(args, key)!r}") from None
        result = bench(args.collectives, args.sizes, op=args.op, dtype=args.dtype, **numbers)
        self._user_ns["_mgpu_bench"] = result
        result.show(plot=not args.no_plot)

    @magic_arguments()
    @argument("sizes", nargs="+", help="M, or M K N: multiply an MxK by a KxN random matrix")
    @argument("--strategy", default="auto", help="auto, row, col, inner, ring or summa (default auto)")
    @argument("--dtype", default="float32", help="float32, float64, bfloat16 (float16 on GPUs)")
    @argument("--grid", default=None, help="SUMMA grid rows x cols, e.g. 2x2")
    @argument("--seed", default="0", help="seed of A (B uses seed + 1)")
    @argument("--check", action="store_true", help="verify against torch.mm of the same inputs (on the ranks)")
    @argument("--gather", action="store_true", help="gather C into the notebook as _mgpu_C")
    @line_magic
    def mgpu_matmul(self, line: str = "") -> Any:
        """Create random A and B on the ranks, multiply them sharded, show the plan and the measured cost."""
        from jupyter_mgpu.magics.matmul_magic import run_matmul_magic

        args = parse_line(self.mgpu_matmul, line)
        return run_matmul_magic(args, self._user_ns)

    @magic_arguments()
    @argument("--model", default="mlp:1024x8", help="a bundled model such as mlp:4096x8, or a notebook nn.Sequential")
    @argument("--strategies", default=None, help="e.g. ddp,fsdp,tp,pp (also single, pp-1f1b); default all five")
    @argument("--data", default=None, help="a notebook variable holding (X, y); default synthetic data")
    @argument("--loss", default="cross_entropy", help="cross_entropy or mse")
    @argument("--optimizer", default="adam", help="sgd, momentum, adam or adamw")
    @argument("--batch", default=None, help="samples per step (default 64)")
    @argument("--steps", default=None, help="training steps per strategy (default 6)")
    @argument("--microbatches", default=None, help="pipeline micro-batches (default 4)")
    @argument("--lr", default=None, help="learning rate (default 0.001)")
    @argument("--samples", default=None, help="rows of synthetic data")
    @argument("--seed", default=None, help="seed of the bundled model's weights and the synthetic data")
    @argument("--timeout", default=None, help="seconds any wait between ranks may take (default: the session's)")
    @argument("--no-live", action="store_true", help="do not show the live view while it runs")
    @argument("--no-plot", action="store_true", help="show the table only")
    @line_magic
    def mgpu_compare(self, line: str = "") -> None:
        """Train one model under single, DDP, FSDP, tensor and pipeline parallel and measure them side by side.

        The :class:`~jupyter_mgpu.comparison.compare_result.CompareResult` stays in ``_mgpu_compare``.
        """
        from jupyter_mgpu.magics.compare_magic import run_compare_magic

        args = parse_line(self.mgpu_compare, line)
        return run_compare_magic(args, self._user_ns)


def _wait_for_fresh_samples(s: Any, settle: float = 0.5, timeout: float = 10.0) -> None:
    """Wait until every rank has published a telemetry sample since this call (at most ``timeout`` s), then
    until no rank looks busy (at most ``settle`` s more): a rank's main thread tidying up after the last cell
    (its reply sent, the engine's own bookkeeping) is sampled as busy for a moment; one busy for longer is
    shown busy. The first wait is long because 32 ranks' samplers on two loaded cores can take seconds to be
    scheduled, and a stale sample would show a rank still starting or busy. A sample is new when its
    sequence number changed, so another host's clock does not matter."""
    if not getattr(getattr(s.cluster, "spec", None), "telemetry_period", None):
        return  # telemetry off: no sampler will write
    before = {r["rank"]: r.get("seq") for r in s.memory()}
    start, fresh_at = time.monotonic(), None
    while time.monotonic() - start < timeout:
        time.sleep(0.02)
        rows = s.memory()
        # dead and restarting ranks write nothing new
        if all(
            r.get("state") in ("dead", "restarting") or r.get("seq") not in (None, before.get(r["rank"])) for r in rows
        ):
            fresh_at = time.monotonic() if fresh_at is None else fresh_at
            if not any(r.get("state") == "busy" for r in rows) or time.monotonic() - fresh_at >= settle:
                return


def register(ipython: Any) -> None:
    from jupyter_mgpu.magics import rank_debug
    from jupyter_mgpu.magics.cell_magics import CellMagics
    from jupyter_mgpu.magics.rank_tracebacks import TracebackMagics, show_mgpu_error
    from jupyter_mgpu.magics.rank_where import WhereMagics

    ipython.register_magics(MgpuMagics)
    ipython.register_magics(CellMagics)
    ipython.register_magics(TracebackMagics)
    ipython.register_magics(WhereMagics)
    rank_debug.install(ipython)  # %mgpu_debug; %debug and %pdb on reach the ranks
    if not hasattr(ipython, "kernel"):  # a terminal shell: ipyparallel reads .kernel when a rank opens a widget
        ipython.kernel = None
    ipython.set_custom_exc((MgpuError, Interrupted), show_mgpu_error)
