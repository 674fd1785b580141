"""The result of ``mg.compare``: measured rows per strategy and rank, the formulas' rows beside them.

``r.table`` has one row per strategy and rank (memory by category, the tracker's and the device's
peak, step time, bytes per step by collective, bubble, final loss and its difference from
``single``; a strategy that ran out of memory is a row saying so); ``r.expected`` the same columns
predicted (``strategies/expected.py``); ``r.ratios()`` measured ÷ expected. ``r.plot()`` draws it,
``r.schedule("pp")`` replays the pipeline, ``r.show("tp")`` shows who holds which part of each weight.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, cast

from jupyter_mgpu.strategies.plan import MEASURED_STEP, ComparePlan
from jupyter_mgpu.units import format_bytes

MEMORY = ("params", "grads", "optimizer", "activations", "comm_buffers", "temporaries", "inputs")
RATIO_COLUMNS = ("params", "grads", "optimizer", "activations", "comm_buffers", "bytes", "bubble")
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-6  # same maths, different summation order: |Δ| ≤ 1e-4·|loss| + 1e-6
CELL = "padding:2px 4px;text-align:right;white-space:nowrap"


class CompareTable(list[dict[str, Any]]):
    """Rows (dicts) with ``.df`` (a pandas DataFrame), an HTML table in notebooks and aligned text elsewhere."""

    def __init__(self, rows: list[dict[str, Any]], expected: CompareTable | None = None):
        super().__init__(rows)
        self.expected = expected

    @property
    def df(self) -> Any:
        """The rows as a pandas DataFrame (with ``<column>/expected`` ratios when there are predictions)."""
        import pandas as pd

        rows = []
        for row in self:
            out = {k: v for k, v in row.items() if k != "bytes_by"}
            out.update({f"bytes:{c}": b for c, b in (row.get("bytes_by") or {}).items()})
            for c, v in (_ratios(row, self._expected_of(row)) if self.expected is not None else {}).items():
                out[f"{c}/expected"] = v
            rows.append(out)
        return pd.DataFrame(rows)

    def _expected_of(self, row: dict[str, Any]) -> dict[str, Any] | None:
        for e in self.expected or []:
            if e["strategy"] == row["strategy"] and e["rank"] == row["rank"]:
                return e
        return None

    def __repr__(self) -> str:
        head = [
            "strategy",
            "rank",
            "status",
            "params",
            "grads",
            "optimizer",
            "activations",
            "comm",
            "peak",
            "step",
            "bytes/step",
            "bubble",
            "loss",
            "Δ single",
        ]
        lines = [head] + [_text_cells(r) for r in self]
        widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in lines)

    def _repr_html_(self) -> str:
        import html

        head = (
            "strategy<br>· rank",
            "params",
            "grads",
            "optimizer",
            "activa&shy;tions",
            "comm<br>buffers",
            "tracked<br>peak",
            "device<br>peak",
            "step<br>time",
            "bytes<br>/ step",
            "bubble",
            "final<br>loss",
            "Δ vs<br>single",
        )
        body = []
        for r in self:
            e = self._expected_of(r) if self.expected is not None else None
            if r["status"] not in ("ok", "predicted"):
                body.append(
                    f"<tr><td style='{CELL}'>{r['strategy']} · {r['rank']}</td>"
                    f"<td colspan='{len(head) - 1}' style='color:#a00;text-align:left;padding:2px 4px'>"
                    f"{html.escape(r['note'])}</td></tr>"
                )
                continue
            cells = [f"{r['strategy']} · {r['rank']}"]
            for c in ("params", "grads", "optimizer", "activations", "comm_buffers"):
                cells.append(_with_ratio(_bytes(r.get(c)), r.get(c), e and e.get(c)))
            cells += [
                _bytes(r.get("tracked_peak")),
                _bytes(r.get("device_peak")),
                _seconds(r.get("step_time")),
                _with_ratio(
                    _bytes(r.get("bytes")),
                    r.get("bytes"),
                    e and e.get("bytes"),
                    title=", ".join(f"{k} {format_bytes(v)}" for k, v in (r.get("bytes_by") or {}).items()),
                ),
                _with_ratio(_pct(r.get("bubble")), r.get("bubble"), e and e.get("bubble")),
                _num(r.get("final_loss")),
                _num(r.get("loss_diff"), signed=True),
            ]
            body.append("<tr>" + "".join(f"<td style='{CELL}'>{c}</td>" for c in cells) + "</tr>")
        ths = "".join(f"<th style='{CELL}'>{h}</th>" for h in head)
        note = (
            (
                "<div style='font-size:11px;color:#555'>each memory column is that category's own peak on the "
                "rank (torch's MemTracker; FSDPMemTracker for fsdp); ×n: measured ÷ the formula of "
                "r.expected</div>"
            )
            if self.expected is not None
            else ""
        )
        return (
            f"<div style='max-width:100%'><table class='mgpu-compare' style='font-size:11px;"
            f"border-collapse:collapse;table-layout:auto'><thead><tr>{ths}</tr>"
            f"</thead><tbody>{''.join(body)}</tbody></table>{note}</div>"
        )


def _bytes(v: Any) -> str:
    return "–" if v is None else format_bytes(v)


def _seconds(v: Any) -> str:
    return "–" if v is None else (f"{v * 1000:.1f} ms" if v < 10 else f"{v:.1f} s")


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def _num(v: Any, signed: bool = False) -> str:
    if v is None:
        return "–"
    return f"{v:+.1e}" if signed else f"{v:.4f}"


def _with_ratio(text: str, measured: Any, expected: Any, title: str = "") -> str:
    tip = f" title='{title}'" if title else ""
    if measured is None or not expected:
        return f"<span{tip}>{text}</span>"
    return f"<span{tip}>{text}</span><br><span style='color:#777'>×{measured / expected:.2f}</span>"


def _text_cells(r: dict[str, Any]) -> list[str]:
    if r["status"] not in ("ok", "predicted"):
        return [r["strategy"], str(r["rank"]), r["status"]] + [""] * 10 + [r["note"]]
    return (
        [r["strategy"], str(r["rank"]), r["status"]]
        + [_bytes(r.get(c)) for c in ("params", "grads", "optimizer", "activations", "comm_buffers", "tracked_peak")]
        + [
            _seconds(r.get("step_time")),
            _bytes(r.get("bytes")),
            _pct(r.get("bubble")),
            _num(r.get("final_loss")),
            _num(r.get("loss_diff"), signed=True),
        ]
    )


def _ratios(row: dict[str, Any], e: dict[str, Any] | None) -> dict[str, float | None]:
    if e is None or row["status"] != "ok":
        return {}
    out = {}
    for c in RATIO_COLUMNS:
        m, x = row.get(c), e.get(c)
        out[c] = (m / x) if m is not None and x else None
    return out


class CompareResult:
    """Measured and predicted figures of one ``mg.compare`` run (see the module docstring)."""

    def __init__(
        self, plan: ComparePlan, expected: dict[str, list[dict[str, Any]]], budgets: list[int], device_kind: str = "cpu"
    ):
        self.plan, self.budgets, self.device_kind = plan, budgets, device_kind
        self.world_size = plan.world_size
        self._expected = expected
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.losses: dict[str, list[float | None]] = {}
        self.schedules: dict[str, Any] = {}
        self.raw: dict[str, list[dict[str, Any]]] = {}

    # -- filling in ---------------------------------------------------------------------------
    def add(self, strategy: str, results: list[dict[str, Any]]) -> None:
        """Take the ranks' results of one strategy (``strategies/compare_run.run``)."""
        self.raw[strategy] = results
        steps = max((len(r["losses"]) for r in results), default=0)
        self.losses[strategy] = [_mean([r["losses"][k] for r in results if len(r["losses"]) > k]) for k in range(steps)]
        times = [
            max(r["step_times"][k] for r in results)
            for k in range(MEASURED_STEP + 1, steps)
            if all(len(r["step_times"]) > k for r in results)
        ]
        step_time = statistics.median(times) if times and all(r["status"] == "ok" for r in results) else None
        oom = [r for r in results if r["status"] == "oom"]
        rows = []
        for r in results:
            row = {"strategy": strategy, "rank": r["rank"], "status": r["status"], **dict.fromkeys(MEMORY)}
            if r["status"] == "ok":
                row.update(r.get("memory") or {})
                row.update(
                    tracked_peak=r.get("tracked_peak"),
                    device_peak=r.get("device_peak"),
                    step_time=step_time,
                    rank_step_time=r.get("step_time"),
                    bytes=sum((r.get("bytes") or {}).values()),
                    bytes_by=dict(r.get("bytes") or {}),
                    calls=dict(r.get("calls") or {}),
                    note="",
                )
            else:
                row["note"] = self._note(strategy, r, oom)
            rows.append(row)
        self.rows[strategy] = rows
        self._finish_losses()

    def add_failure(self, strategy: str, message: str) -> None:
        """A strategy whose ranks could not report at all (one row saying why)."""
        self.rows[strategy] = [
            {"strategy": strategy, "rank": r, "status": "error", "note": message, **dict.fromkeys(MEMORY)}
            for r in self.plan.ranks(strategy)
        ]
        self.losses[strategy] = []

    def _note(self, strategy: str, r: dict[str, Any], oom: list[dict[str, Any]]) -> str:
        if r["status"] == "oom":
            ranks = self.plan.ranks(strategy)
            per_rank = self._expected.get(strategy, [])
            e = per_rank[ranks.index(r["rank"])] if r["rank"] in ranks and len(per_rank) == len(ranks) else None
            total = sum(e[c] for c in MEMORY if c in e) if e else None
            parts = ([f"the formulas: {format_bytes(total)}"] if total else []) + (
                [f"budget {format_bytes(r['limit_bytes'])}"] if r.get("limit_bytes") else []
            )
            tail = f" ({'; '.join(parts)})" if parts else ""
            return f"OOM on rank {r['rank']}: needs ≥ {format_bytes(r['needs_bytes'])}{tail}"
        if r["status"] == "peer" and oom:
            return f"stopped: rank {oom[0]['rank']} ran out of memory"
        failed = [x for x in self.raw.get(strategy, []) if x["status"] == "error"]
        if r["status"] == "peer" and failed:
            return f"stopped: rank {failed[0]['rank']} failed"
        return f"{r['status']} on rank {r['rank']}: {r.get('error', '')}"

    def _finish_losses(self) -> None:
        ref = self.losses.get("single")
        for strategy, rows in self.rows.items():
            mine = self.losses.get(strategy) or []
            final = mine[-1] if mine and len(mine) == self.plan.steps else None
            diff = (
                (final - ref[-1])
                if final is not None and ref and len(ref) == self.plan.steps and ref[-1] is not None
                else None
            )
            for row in rows:
                if row["status"] == "ok":
                    row.update(final_loss=final, loss_diff=diff)
            for row in rows:  # the pipeline's bubble, measured from its events
                if strategy in self.schedules and row["status"] == "ok":
                    row["bubble"] = self.schedules[strategy].bubble()[row["rank"]]
                elif row["status"] == "ok":
                    row.setdefault("bubble", None)

    # -- reading ------------------------------------------------------------------------------
    @property
    def strategies(self) -> list[str]:
        return list(self.rows)

    @property
    def expected(self) -> CompareTable:
        """The formulas' rows (``strategies/expected.py``): same columns, plus ``total`` and ``fits``."""
        rows = []
        for strategy, preds in self._expected.items():
            for rank, e in zip(self.plan.ranks(strategy), preds):
                total = sum(e[c] for c in ("params", "grads", "optimizer", "activations", "comm_buffers"))
                budget = self.budgets[rank] if rank < len(self.budgets) else None
                rows.append(
                    {
                        "strategy": strategy,
                        "rank": rank,
                        "status": "predicted",
                        **{c: e[c] for c in ("params", "grads", "optimizer", "activations", "comm_buffers")},
                        "bytes": sum(e["bytes"].values()),
                        "bytes_by": dict(e["bytes"]),
                        "bubble": e["bubble"],
                        "total": total,
                        "fits": None if budget is None else total <= budget,
                    }
                )
        return CompareTable(rows)

    @property
    def table(self) -> CompareTable:
        """One row per strategy and rank, measured (the formulas' ratios in ``.df`` and the HTML)."""
        self._finish_losses()
        return CompareTable([row for rows in self.rows.values() for row in rows], self.expected)

    def ratios(self) -> list[dict[str, Any]]:
        """Measured ÷ expected per strategy, rank and column (None where a side is missing or zero)."""
        t = self.table
        return [
            {"strategy": r["strategy"], "rank": r["rank"], **_ratios(r, t._expected_of(r))}
            for r in t
            if r["status"] == "ok"
        ]

    def ok(self, strategy: str) -> bool:
        """Whether every rank of ``strategy`` trained to the end."""
        return bool(self.rows.get(strategy)) and all(r["status"] == "ok" for r in self.rows[strategy])

    def loss_diff(self, strategy: str) -> float | None:
        """The largest |loss − single's loss| over every step (None without both curves)."""
        a, b = self.losses.get(strategy), self.losses.get("single")
        if not a or not b or len(a) != len(b) or any(v is None for v in a + b):
            return None
        xs, ys = cast(list[float], a), cast(list[float], b)  # no None in either: checked just above
        return max(abs(x - y) for x, y in zip(xs, ys))

    def matches(self, strategy: str) -> bool:
        """Whether ``strategy``'s loss equals ``single``'s at every step within |Δ| ≤ 1e-4·|loss| + 1e-6."""
        a, b = self.losses.get(strategy), self.losses.get("single")
        if self.loss_diff(strategy) is None:
            return False
        # loss_diff found both curves, of one length and without None
        xs, ys = cast(list[float], a), cast(list[float], b)
        return all(math.isclose(x, y, rel_tol=LOSS_RTOL, abs_tol=LOSS_ATOL) for x, y in zip(xs, ys))

    def schedule(self, strategy: str = "pp") -> Any:
        """The pipeline ``strategy``'s recorded schedule (``.play()``, ``.save_html(path)``, ``.bubble()``)."""
        from jupyter_mgpu.errors import MgpuError

        if strategy not in self.schedules:
            have = ", ".join(self.schedules) or "none was run"
            raise MgpuError(f"no pipeline schedule named {strategy!r} in this result (pipeline strategies: {have})")
        return self.schedules[strategy]

    def plot(self) -> Any:
        """Grouped bars: memory by category per strategy and rank, step time, bytes per step (plotly)."""
        from jupyter_mgpu.widgets.compare_plot import figure

        return figure(self)

    def show(self, strategy: str, layers: Any = None) -> Any:
        """Who holds which part of each weight under ``strategy``, as reported by the ranks (``mg.show``'s view)."""
        from jupyter_mgpu.widgets.weights_view import weights_view

        return weights_view(self, strategy, layers)

    def __repr__(self) -> str:
        return f"<CompareResult {self.world_size} ranks: {', '.join(self.strategies) or 'nothing run'}>\n" + repr(
            self.table
        )

    def _repr_html_(self) -> str:
        return self.table._repr_html_()


def _mean(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None
