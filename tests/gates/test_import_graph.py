"""The architecture's arrows, enforced: which part of the package may import which (one table, below),
no import cycle between modules (lazy imports inside functions included), and the pure parts free of
torch. See docs/architecture.md for why each arrow is there."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from import_graph import PACKAGE, Import, graph, modules, part

LEAVES = {"_version", "errors", "units", "rundir", "devices", "deferred_interrupt", "init_options"}
RANK_SIDE = {"engine", "ops", "strategies"}
PURE = {"layout", "units", "errors", "_version", "init_options"}  # and the pure planners in PURE_MODULES

# importer part -> what it may import: parts, or single modules written "part.module"
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_version": set(),
    "units": {"errors"},
    "rundir": {"errors"},
    "init_options": {"errors"},  # the options of %mgpu_init / mg.init, declared once
    "deferred_interrupt": set(),
    "devices": {"errors", "units"},
    "layout": set(),
    # the rank side runs in the engines: it never imports the controller side
    "engine": {"engine", "errors", "units", "rundir", "devices", "layout"},
    "ops": {"ops", "engine", "errors", "units", "layout", "deferred_interrupt"},
    "strategies": {"strategies", "engine", "errors", "units", "layout", "deferred_interrupt"},
    # the controller side, bottom up
    "cluster": {"cluster", *LEAVES, "engine"},
    "launch": {"launch", *LEAVES, "cluster", "engine"},
    "session": {"session", *LEAVES, "cluster", "launch", "engine"},
    "monitoring": {"monitoring", *LEAVES, "session", "engine", "widgets"},
    "widgets": {
        "widgets",
        *LEAVES,
        "layout",
        "monitoring",
        "session",
        "engine.records.memory_figures",
        "ops.collective_schedule",
        "strategies.model_spec",
        "tracing.replay",
        "profiling.profile_data",  # the data p.timeline() draws
    },
    "tensors": {"tensors", *LEAVES, "session", "cluster", "layout", "engine", "ops", "widgets"},
    "tracing": {"tracing", *LEAVES, "session", "layout", "engine", "ops", "monitoring", "tensors", "widgets"},
    # mg.profile: the rank side in engine, busbw factors in ops, the timeline in widgets
    "profiling": {"profiling", *LEAVES, "session", "engine", "ops", "widgets"},
    "collectives": {"collectives", *LEAVES, "session", "layout", "engine", "ops", "tensors", "widgets"},
    "comparison": {"comparison", *LEAVES, "session", "layout", "engine", "strategies", "tracing", "widgets"},
    "magics": {
        "magics",
        *LEAVES,
        "session",
        "launch",
        "layout",
        "engine",
        "ops",
        "tensors",
        "collectives",
        "comparison",
        "tracing",
        "monitoring",
        "widgets",
        "profiling",
    },
    # the server extension reads the files the ranks write; it never imports the notebook side
    # the telemetry record format; collective_watch.describe: how a rank's activity reads in the sidebar
    "server": {
        "server",
        "rundir",
        "units",
        "errors",
        "engine.records.telemetry",
        "engine.records.memory_figures",
        "engine.watch.collective_watch",
    },
    "selftest": {"api", *LEAVES, "engine"},
    "api": {
        "api",
        *LEAVES,
        "session",
        "cluster",
        "layout",
        "tensors",
        "tracing",
        "collectives",
        "comparison",
        "monitoring",
        "magics",
        "widgets",
        "profiling",
    },
}
# modules with no torch, no numpy and nothing of ours beyond the pure parts (mypy --strict checks them too)
PURE_MODULES = {
    "jupyter_mgpu.ops.matmul_plan",
    "jupyter_mgpu.strategies.model_spec",
    "jupyter_mgpu.strategies.plan",
    "jupyter_mgpu.strategies.expected",
    "jupyter_mgpu.tracing.replay",
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


def test_every_part_is_in_the_table():
    assert {part(m) for m in modules()} <= set(ALLOWED)


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
