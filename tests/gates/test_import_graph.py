"""The architecture's arrows, enforced: which part of the package may import which (one table, below),
no import cycle between modules (lazy imports inside functions included), and the pure parts free of
torch. See docs/architecture.md for why each arrow is there."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from import_graph import PACKAGE, Import, graph, modules, part, rule_part

LEAVES = {
    "_version",
    "errors",
    "units",
    "rundir",
    "devices",
    "deferred_interrupt",
    "init_options",
    "wait_line",
    "stack_merge",
}
PURE = {"layout", "units", "errors", "_version", "init_options", "stack_merge"}  # and the pure planners in PURE_MODULES

# importer part -> what it may import: parts, or single modules written "part.module". An engine module's part
# is its seam, "engine.<seam>"; "engine" is the leaves they share (state, cuda_device, rank_traceback). Every
# arrow here is used (test_every_arrow_is_used) and the arrows make no cycle between parts.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_version": set(),
    "units": {"errors"},
    "rundir": set(),
    "init_options": {"errors"},  # the options of %mgpu_init / mg.init, declared once
    "deferred_interrupt": set(),
    "wait_line": set(),  # the line that says what a wait is for
    "stack_merge": set(),  # every rank's stack as one tree: the session's and the sidebar's
    "devices": {"errors", "units"},
    "layout": set(),
    # the rank side runs in the engines: it never imports the controller side. The engine's seams, bottom up
    "engine": set(),
    "engine.wire": set(),
    "engine.shards": {"engine"},
    "engine.watch": {"engine", "engine.wire"},
    "engine.group": {"engine", "engine.watch", "errors"},
    "engine.records": {"engine", "engine.shards", "engine.watch", "layout", "units"},
    "engine.execution": {
        "engine",
        "engine.group",
        "engine.records",
        "engine.shards",
        "engine.wire",
        "errors",
        "layout",
    },
    "engine.program": {"engine", "engine.execution", "engine.group"},
    "engine.startup": {
        "engine",
        "engine.wire",
        "engine.shards",
        "engine.watch",
        "engine.group",
        "engine.records",
        "engine.execution",
        "engine.program",
        "devices",
        "errors",
        "rundir",
    },
    "ops": {
        "engine",
        "engine.execution",
        "engine.records",
        "engine.shards",
        "engine.startup",  # launched_setup: a launched engine's peers, for the socket transfers
        "engine.wire",
        "deferred_interrupt",
        "errors",
        "layout",
        "units",
    },
    "strategies": {"engine", "engine.records", "engine.shards", "deferred_interrupt", "errors"},
    # the controller side, bottom up; of the engine only the protocol halves each part uses, module by module
    "cluster": {
        "deferred_interrupt",
        "devices",
        "errors",
        "rundir",
        "engine.records.startup_marks",  # the start-up timeline the supervisor writes
        "engine.shards.allocator_budget",  # built once in the background before the engines need it
        "engine.startup.doorbell",  # rung after writing what the supervisor waits for
        "init_options",  # the defaults of --hang-after and --status-after a spec falls back on
        "wait_line",
    },
    "launch": {
        "cluster",
        "deferred_interrupt",
        "devices",
        "errors",
        "init_options",
        "rundir",
        "units",
        "engine.group.process_group",
        "engine.startup.launched_setup",
        "engine.startup.watchdog",
        "engine.wire.link",
        "engine.wire.netif",
        "engine.wire.unix_socket",
    },
    "session": {
        "cluster",
        "launch",
        "deferred_interrupt",
        "wait_line",
        "devices",
        "errors",
        "init_options",
        "stack_merge",
        "units",
        "engine.execution.calls",
        "engine.execution.cell_value",  # a travelled value formatted in the notebook as on a rank
        "engine.execution.direct_channel",
        "engine.execution.namespace_transfer",
        "engine.execution.peer_heal",  # the rank half of mg.heal, sent by reference
        "engine.execution.rank_debugger",  # the rank half of pdb on the ranks: post_mortem, sent by reference
        "engine.execution.rank_namespace",
        "engine.execution.shipped_function",
        "engine.execution.value_digest",  # the rank half of mg.compare_values, sent by reference
        "engine.group.process_group",
        "engine.program.script_run",
        "engine.rank_traceback",
        "engine.records.memory_figures",
        "engine.records.telemetry",
        "engine.startup.runtime",
        "engine.watch.collective_guard",
        "engine.watch.collective_watch",
        "engine.wire.unix_socket",
    },
    "monitoring": {"session", "errors", "engine.records.telemetry", "engine.records.training"},
    "widgets": {
        "errors",
        "units",
        "layout",
        "monitoring",
        "session",
        "engine.records.memory_figures",
        "ops.collective_schedule",
        "ops.holdings",  # which rows of a collective's figure fold into "same as rank r"
        "strategies.model_spec",
        "tracing.replay",
        "profiling.profile_data",  # the data p.timeline() draws
    },
    "tensors": {
        "cluster",
        "deferred_interrupt",  # a cell's dropped tensors freed as it ends, the free not cut in half
        "errors",
        "layout",
        "ops",
        "session",
        "units",
        "widgets",
        "engine.execution.shipped_function",
        "engine.shards.shard_store",
        "engine.wire.link",
    },
    "tracing": {"errors", "layout", "monitoring", "session", "tensors", "widgets", "engine.records.trace"},
    # mg.profile: the rank side in engine.records, busbw factors in ops, the timeline in widgets
    "profiling": {"errors", "ops", "rundir", "session", "widgets", "engine.records.rank_profiler"},
    "collectives": {"errors", "ops", "session", "tensors", "widgets", "engine.execution.shipped_function"},
    "comparison": {"errors", "session", "strategies", "tracing", "units", "widgets"},
    "magics": {
        "collectives",
        "comparison",
        "errors",
        "init_options",
        "ops",
        "profiling",
        "session",
        "tensors",
        "units",
        "widgets",
        "engine.execution.completion_server",
        "engine.execution.direct_channel",
        "engine.execution.namespace_transfer",
        "engine.execution.panel_breaks",  # the panel's breakpoints, as the ranks' pdb takes them
        "engine.records.telemetry",  # where a rank's record is: Tab waits longer for a rank seen running
        "engine.wire.unix_socket",
    },
    # the server extension reads the files the ranks write; it never imports the notebook side
    # the telemetry record format; collective_watch.describe: how a rank's activity reads in the sidebar
    "server": {
        "rundir",
        "stack_merge",  # the sidebar's stack view: every rank's stack as one tree
        "engine.watch.collective_guard",  # each rank's guard answers where it is (as for mg.where)
        "engine.records.telemetry",
        "engine.records.memory_figures",
        "engine.watch.collective_watch",
    },
    # the budget's own count: a CPU virtual device's allocated bytes, exact, for "a failure gives its memory back"
    "selftest": {
        "api",
        "selftest_notebook",  # its checks of what a notebook drives (a %%mgpu cell, mg.matmul, the dashboard)
        "devices",
        "units",
        "engine.state",
        "engine.execution.namespace_transfer",
        "engine.shards.allocator_budget",
        "engine.watch.issued_collectives",  # the NCCL recorder check: the watch's own reading, on real GPUs
        "engine.watch.nccl_records",
    },
    "selftest_notebook": {"api", "units", "engine.state", "engine.execution.namespace_transfer"},
    "api": {
        "_version",
        "cluster",
        "collectives",
        "comparison",
        "devices",
        "errors",
        "layout",
        "magics",
        "monitoring",
        "profiling",
        "session",
        "tensors",
        "tracing",
        "widgets",
    },
}
# modules with no torch, no numpy and nothing of ours beyond the pure parts (mypy --strict checks them too)
PURE_MODULES = {
    "jupyter_mgpu.ops.matmul_plan",
    "jupyter_mgpu.ops.matmul_costs",
    "jupyter_mgpu.ops.matmul_chunks",
    "jupyter_mgpu.strategies.model_spec",
    "jupyter_mgpu.strategies.plan",
    "jupyter_mgpu.strategies.expected",
    "jupyter_mgpu.tracing.replay",
    "jupyter_mgpu.comparison.pipeline_idle",
    "jupyter_mgpu.engine.startup.gpu_plan",
}
HEAVY = {"torch", "numpy", "ipyparallel", "ipywidgets", "anywidget", "plotly", "IPython", "ipykernel"}


def _allowed(imp: Import) -> bool:
    src, dst = part(imp.importer), part(imp.imported)
    if src == dst:
        return True
    rules = ALLOWED[src]
    local = imp.imported.removeprefix(PACKAGE + ".")
    return dst in rules or any(local == r or local.startswith(r + ".") for r in rules if "." in r)


def forbidden(edges: list[Import]) -> list[str]:
    out = []
    for imp in edges:
        if imp.imported.startswith(PACKAGE) and not _allowed(imp):
            out.append(
                f"{imp.importer}:{imp.line} imports {imp.imported} ({part(imp.importer)} -> {part(imp.imported)})"
            )
    return out


def cycles(edges: list[Import]) -> list[list[str]]:
    """Every set of our modules that import each other round, found with Tarjan's algorithm."""
    adj: dict[str, set[str]] = defaultdict(set)
    for imp in edges:
        if imp.imported.startswith(PACKAGE) and imp.imported != imp.importer:
            adj[imp.importer].add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(adj[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return found


def impure(edges: list[Import]) -> list[str]:
    out = []
    for imp in edges:
        pure = part(imp.importer) in PURE or imp.importer in PURE_MODULES
        if not pure:
            continue
        ours_ok = part(imp.imported) in PURE or imp.imported in PURE_MODULES or imp.importer == imp.imported
        if (imp.imported.startswith(PACKAGE) and not ours_ok) or imp.imported in HEAVY:
            out.append(f"{imp.importer}:{imp.line} imports {imp.imported}, but it is pure")
    return out


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    return graph()


def _matches(imp: Import, rule: str) -> bool:
    local = imp.imported.removeprefix(PACKAGE + ".")
    return part(imp.imported) == rule or local == rule or local.startswith(rule + ".")


def unused_arrows(edges: list[Import], table: dict[str, set[str]] = ALLOWED) -> list[str]:
    """The arrows of the table that no import takes: each one would let a later change in unseen."""
    out = []
    for src, rules in table.items():
        mine = [e for e in edges if e.imported.startswith(PACKAGE) and part(e.importer) == src]
        out += [f"{src} -> {rule}" for rule in sorted(rules) if not any(_matches(e, rule) for e in mine)]
    return out


def table_cycles(edges: list[Import], table: dict[str, set[str]] = ALLOWED) -> list[list[str]]:
    """Cycles between parts that ALLOWED would permit. An arrow to one module (``widgets`` ->
    ``profiling.profile_data``) reaches that module alone, and it goes on where that module's own imports go."""
    arrows = []
    for src, rules in table.items():
        for rule in rules:
            if "." in rule and rule_part(rule) != rule:  # one module: a node of its own
                module = f"{PACKAGE}.{rule}"
                arrows.append(Import(f"{PACKAGE}.{src}", module, 0))
                arrows += [
                    Import(module, f"{PACKAGE}.{part(e.imported)}", 0)
                    for e in edges
                    if e.importer == module and e.imported.startswith(PACKAGE) and part(e.imported) != part(module)
                ]
            elif rule_part(rule) != src:
                arrows.append(Import(f"{PACKAGE}.{src}", f"{PACKAGE}.{rule_part(rule)}", 0))
    return cycles(arrows)


def test_every_part_is_in_the_table():
    assert {part(m) for m in modules()} <= set(ALLOWED)


def test_every_arrow_is_used(edges):
    assert unused_arrows(edges) == []


def test_the_table_permits_no_cycle_between_parts(edges):
    assert table_cycles(edges) == []


def test_no_forbidden_arrow(edges):
    assert forbidden(edges) == []


def test_no_import_cycle(edges):
    assert cycles(edges) == []


def test_the_pure_modules_import_no_torch_and_nothing_impure(edges):
    assert impure(edges) == []


def test_no_module_past_the_size_rule():
    long = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES.get(m, 400)}
    assert long == {}


# modules over the ~400-line rule, each with its present length as a ceiling: they may shrink, not grow
MAX_LINES: dict[str, int] = {}


def _plant(tmp_path: Path, files: dict[str, str]) -> list[Import]:
    root = tmp_path / PACKAGE
    for name, text in {"__init__.py": "", **files}.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        (p.parent / "__init__.py").touch()
        p.write_text(textwrap.dedent(text))
    return graph(root)


def test_the_checks_catch_a_planted_cycle_a_forbidden_arrow_and_torch_in_layout(tmp_path):
    edges = _plant(
        tmp_path,
        {
            "session/core.py": "from jupyter_mgpu.session import recovery\n",
            "session/recovery.py": "def f():\n    from jupyter_mgpu.session import core\n",  # lazy: still a cycle
            "ops/sharded_matmul.py": "from jupyter_mgpu.session.core import x\n",  # rank side -> controller side
            "layout/placement.py": "import torch\n",
            "widgets/view.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jupyter_mgpu.magics import m\n",
        },
    )
    assert cycles(edges) == [["jupyter_mgpu.session.core", "jupyter_mgpu.session.recovery"]]
    assert forbidden(edges) == ["jupyter_mgpu.ops.sharded_matmul:1 imports jupyter_mgpu.session.core (ops -> session)"]
    assert impure(edges) == ["jupyter_mgpu.layout.placement:1 imports torch, but it is pure"]


def test_the_table_checks_catch_an_unused_arrow_and_a_cycle_it_would_permit(tmp_path):
    edges = _plant(
        tmp_path,
        {
            "widgets/view.py": "from jupyter_mgpu.monitoring import reader\nfrom jupyter_mgpu.profiling import data\n",
            "monitoring/reader.py": "x = 1\n",
            "profiling/data.py": "from jupyter_mgpu import errors\n",
            "profiling/run.py": "from jupyter_mgpu.widgets import view\n",
        },
    )
    table = {
        "widgets": {"monitoring", "profiling.data"},
        "monitoring": {"widgets"},  # never taken, and it would close widgets -> monitoring -> widgets
        "profiling": {"widgets"},  # the view reaches profiling.data alone, which goes nowhere back: no cycle
    }
    assert unused_arrows(edges, table) == ["monitoring -> widgets"]
    assert table_cycles(edges, table) == [["jupyter_mgpu.monitoring", "jupyter_mgpu.widgets"]]
