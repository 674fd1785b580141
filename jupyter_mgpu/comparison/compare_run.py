"""``mg.compare``: one model trained under DDP, FSDP, tensor and pipeline parallel, measured side by side.

Every argument is checked and the model split planned before any rank allocates (one sentence on bad
input). Then each strategy runs on the ranks in turn (``strategies/compare_run.py``) from the same initial
weights on the same batches; a strategy that fails (out of memory, an error) becomes a row of the
result and the others still run. Initial weights of a notebook model go to the ranks as one file per
layer in the cluster's private directory (a rank reads only the layers it holds); a bundled model
(``"mlp:4096x8"``) is drawn on the ranks from the seed. In a notebook the run is live: the memory
dashboard, the comparison plot filling in strategy by strategy, and the pipeline's schedule as it trains.
"""

from __future__ import annotations

import itertools
import os
import shutil
from typing import Any, cast

from jupyter_mgpu.comparison.compare_result import CompareResult
from jupyter_mgpu.comparison.pipeline_schedule import ScheduleTrace
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.strategies import expected as exp
from jupyter_mgpu.strategies import model_spec as ms
from jupyter_mgpu.strategies import plan as planmod

DEFAULT_STRATEGIES = ("single", "ddp", "fsdp", "tp", "pp")
_ids = itertools.count(1)


def _layers(model: Any) -> list[dict[str, Any]]:
    if isinstance(model, str):
        return ms.bundled(model)
    from jupyter_mgpu.strategies import layers

    return layers.describe(model)


def _data(data: Any, layers: list[dict[str, Any]], loss: str, samples: int | None, batch: int) -> dict[str, Any]:
    """The data as the ranks will see it, checked: ``(X, y)`` tensors/arrays, or synthetic when None."""
    w = ms.widths(layers)
    if data is None:
        n = samples if isinstance(samples, int) and not isinstance(samples, bool) and samples > 0 else 4 * batch
        return {"synthetic": {"samples": n, "in": w[0], "out": w[-1]}, "samples": n}
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise MgpuError("data must be a pair (X, y) of tensors or arrays, or None for synthetic data")
    import torch

    try:
        x, y = torch.as_tensor(data[0]), torch.as_tensor(data[1])
    except (TypeError, ValueError, RuntimeError) as exc:
        raise MgpuError(f"data must be a pair (X, y) of tensors or arrays: {exc}") from None
    if x.ndim != 2 or x.shape[1] != w[0]:
        raise MgpuError(f"data X must have shape (samples, {w[0]}) for {ms.label(layers, 0)}, got {tuple(x.shape)}")
    if len(y) != len(x):
        raise MgpuError(f"data X has {len(x)} samples but y has {len(y)}")
    if loss == "cross_entropy":
        if y.ndim != 1 or y.dtype.is_floating_point:
            raise MgpuError(
                f"cross_entropy needs y as whole-number class labels of shape ({len(x)},), "
                f"got {y.dtype} of shape {tuple(y.shape)}"
            )
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= w[-1]):
            raise MgpuError(
                f"cross_entropy needs class labels 0 to {w[-1] - 1} (the model's {w[-1]} outputs), "
                f"got labels from {int(y.min())} to {int(y.max())}"
            )
        y = y.long()
    elif loss == "mse" and (y.ndim != 2 or y.shape[1] != w[-1]):
        raise MgpuError(f"mse needs y of shape ({len(x)}, {w[-1]}) (the model's outputs), got {tuple(y.shape)}")
    return {"tensors": (x.float(), y if loss == "cross_entropy" else y.float()), "samples": len(x)}


def compare(
    model: Any,
    data: Any = None,
    loss: str = "cross_entropy",
    batch: int = 64,
    steps: int = 6,
    strategies: Any = DEFAULT_STRATEGIES,
    microbatches: int = 4,
    optimizer: str = "adam",
    lr: float = 1e-3,
    seed: int = 0,
    samples: int | None = None,
    timeout: float | None = None,
    live: bool | None = None,
    session: Any = None,
) -> CompareResult:
    """Train ``model`` under each of ``strategies`` on the ranks and measure them side by side.

    ``model``: an ``nn.Sequential`` of Linear, activation, LayerNorm and Dropout layers, or a bundled
    model such as ``"mlp:4096x8"``. ``data``: ``(X, y)`` or None (synthetic, ``samples`` rows). Each step
    trains on the next ``batch`` samples (DDP/FSDP give each rank ``batch / P``; the pipeline splits it
    into ``microbatches``). ``strategies``: ``single``, ``ddp``, ``fsdp``, ``tp``, ``pp`` (GPipe) and
    ``pp-1f1b``. ``optimizer``: ``sgd``, ``momentum``, ``adam``, ``adamw``. ``timeout`` bounds every
    wait between ranks (default: the session's). ``live`` shows the run as it happens (default: in a
    notebook). Returns a :class:`~jupyter_mgpu.comparison.compare_result.CompareResult`; when the run is cut short
    (stop button, a dead engine) the exception carries the strategies measured so far as
    ``exc.compare_result`` (``%mgpu_compare`` keeps them in ``_mgpu_compare``).
    """
    s = session or sessmod.current()
    s.check_alive()
    if s.active_trace is not None:
        raise MgpuError("mg.compare records the pipeline's own events; end the `with mg.trace()` block first")
    layers = _layers(model)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise MgpuError(f"batch must be a whole number of at least 1, got {batch!r}")
    loss_name = loss.lower() if isinstance(loss, str) else loss
    prepared = _data(data, layers, loss_name if loss_name in planmod.LOSSES else "", samples, batch)
    plan = planmod.make_plan(
        layers,
        strategies,
        s.world_size,
        batch=batch,
        steps=steps,
        microbatches=microbatches,
        optimizer=optimizer,
        lr=lr,
        loss=loss,
        samples=prepared["samples"],
    )
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise MgpuError(f"timeout must be a positive number of seconds, got {timeout!r}")
    wait = float(timeout if timeout is not None else s.timeout)
    if live is None:
        live = _in_notebook()
    return Comparison(s, plan, model, prepared, seed, wait, live).run()


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython

        ip = get_ipython()
        return ip is not None and hasattr(ip, "kernel")
    except ImportError:
        return False


class Comparison:
    """One ``mg.compare`` run: sends what the ranks need, runs each strategy, cleans up."""

    def __init__(
        self,
        session: Any,
        plan: planmod.ComparePlan,
        model: Any,
        data: dict[str, Any],
        seed: int,
        timeout: float,
        live: bool,
    ):
        self.session, self.plan, self.model, self.data, self.seed = session, plan, model, data, seed
        self.timeout, self.live = timeout, live
        self.run_id = f"compare{session.id}.{next(_ids)}"
        self.folder = os.path.join(session.runtime_dir, "compare", self.run_id)
        self.result = CompareResult(
            plan,
            {s: exp.expected(plan, s) for s in plan.strategies},
            budgets=[d.total_memory for d in session.devices],
            device_kind=session.device_kind,
        )
        self.panel: Any = None

    def _job(self, strategy: str) -> dict[str, Any]:
        init = {"seed": self.seed} if isinstance(self.model, str) else {"dir": os.path.join(self.folder, "init")}
        data = (
            {"key": self.run_id}
            if "tensors" in self.data
            else {"synthetic": {**self.data["synthetic"], "seed": self.seed + 1}}
        )
        return {
            "strategy": strategy,
            "layers": self.plan.layers,
            "init": init,
            "seed": self.seed,
            "data": data,
            "loss": self.plan.loss,
            "optimizer": self.plan.optimizer,
            "lr": self.plan.lr,
            "batch": self.plan.batch,
            "steps": self.plan.steps,
            "microbatches": self.plan.microbatches,
            "schedule": planmod.schedule_of(strategy),
            "stages": self.plan.stages,
            "tp_pairs": self.plan.tp_pairs,
            "timeout": self.timeout,
            "trace_id": f"{self.run_id}.{strategy}" if strategy.startswith("pp") else "",
        }

    def run(self) -> CompareResult:
        from jupyter_mgpu.strategies import (
            compare_run as rank_compare,  # torch: imported when a comparison runs, not with the package
        )

        s = self.session
        try:
            if not isinstance(self.model, str):
                from jupyter_mgpu.strategies import layers

                layers.write_initial_weights(self.model, os.path.join(self.folder, "init"))
            if "tensors" in self.data:
                s.run(rank_compare.put_data, self.run_id, *self.data["tensors"], label="compare: data")
            if self.live:
                from jupyter_mgpu.widgets.compare_plot import CompareLive

                self.panel = CompareLive(self.result, s)
                self.panel.show()
            for strategy in self.plan.strategies:
                self._run_one(strategy)
        except BaseException as exc:  # stop button, dead engine: the strategies already measured stay at hand
            cast(Any, exc).compare_result = self.result  # any exception may carry it (BaseException declares none)
            raise
        finally:
            if s.alive and "tensors" in self.data:
                try:
                    s.run(rank_compare.drop_data, self.run_id, label="compare: cleanup")
                except Exception:
                    pass
            shutil.rmtree(self.folder, ignore_errors=True)
            if self.panel is not None:
                self.panel.done()
        return self.result

    def _run_one(self, strategy: str) -> None:
        from jupyter_mgpu.strategies import compare_run as rank_compare

        s, job = self.session, self._job(strategy)
        sched = None
        if strategy.startswith("pp"):
            sched = ScheduleTrace(
                strategy,
                s.world_size,
                self.plan.microbatches,
                job["schedule"],
                timed_from=planmod.MEASURED_STEP + 1,
                trace_id=job["trace_id"],
                expected_bubble=exp.expected(self.plan, strategy)[0]["bubble"],
            )
            self.result.schedules[strategy] = sched
            for r in range(s.world_size):  # the ranks start fresh files; a follower must not read old ones
                try:
                    os.unlink(os.path.join(s.runtime_dir, "trace", f"rank{r}.jsonl"))
                except OSError:
                    pass
            sched.follow(s.runtime_dir)
        if self.panel is not None:
            self.panel.started(strategy, sched)
        rows = None
        try:
            rows = s.run(rank_compare.run, job, targets=self.plan.ranks(strategy), label=f"compare: {strategy}")
            self.result.add(strategy, rows)
        except MgpuError as exc:  # the ranks could not even report (a dead engine): one row says so
            self.result.add_failure(strategy, str(exc))
            if not s.alive:
                raise
        finally:
            if sched is not None:
                events = [e for r in rows or [] for e in r.pop("events", [])] if rows else None
                sched.finish(events)
        if self.panel is not None:
            self.panel.finished(strategy)
