"""Which modules of the package no test file imports: a listed set that may only shrink. A new module either
gets a test that imports it, or is added here with the reason the tests that reach it go through another
module (the public API, a subprocess, a magic)."""

from __future__ import annotations

from pathlib import Path

from import_graph import PACKAGE, ROOT, imports_of, modules

TESTS = ROOT.parent / "tests"

# reached through other modules only, today; each one that gains a test of its own leaves the list
UNTESTED: set[str] = {
    # the package's own parts that every test reaches through `import jupyter_mgpu as mg`, `%mgpu_*` magics or a
    # Session: the API's controller halves
    "jupyter_mgpu._version",
    "jupyter_mgpu.comparison.compare_run",
    "jupyter_mgpu.magics.compare_magic",
    "jupyter_mgpu.magics.matmul_magic",
    "jupyter_mgpu.profiling.profile_run",
    "jupyter_mgpu.session.core",
    "jupyter_mgpu.session.direct_channel",
    "jupyter_mgpu.tensors.dist_tensor",
    "jupyter_mgpu.tensors.dtensor_handle",
    "jupyter_mgpu.tensors.factories",
    "jupyter_mgpu.tensors.handles",
    "jupyter_mgpu.tensors.io",
    "jupyter_mgpu.tensors.sharded_matmul",
    "jupyter_mgpu.tensors.sockets",
    "jupyter_mgpu.tensors.transfer_paths",
    "jupyter_mgpu.widgets.compare_plot",
    "jupyter_mgpu.widgets.profile_timeline",
    # rank halves the controller ships to real engines (tests/cluster runs them there)
    "jupyter_mgpu.ops.dtensor_handle",
    "jupyter_mgpu.ops.io",
    "jupyter_mgpu.ops.matmul_strategies",
    "jupyter_mgpu.ops.matmul_trace",
    "jupyter_mgpu.ops.ring_matmul",
    "jupyter_mgpu.ops.shard_exchange",
    "jupyter_mgpu.ops.shard_map",
    "jupyter_mgpu.ops.shared_file",
    "jupyter_mgpu.ops.sockets",
    "jupyter_mgpu.strategies.compare_run",
    "jupyter_mgpu.strategies.ddp",
    "jupyter_mgpu.strategies.fsdp",
    "jupyter_mgpu.strategies.pp",
    "jupyter_mgpu.strategies.single",
    "jupyter_mgpu.strategies.step",
    "jupyter_mgpu.strategies.tp",
    "jupyter_mgpu.strategies.weights",
    # the engine's inside, run by every cluster test in the engines themselves
    "jupyter_mgpu.engine.cuda_device",
    "jupyter_mgpu.engine.execution.cellapi",
    "jupyter_mgpu.engine.execution.completion_server",
    "jupyter_mgpu.engine.group.user_process_group",
    "jupyter_mgpu.engine.program.fresh_program",
    "jupyter_mgpu.engine.program.script_run",
    "jupyter_mgpu.engine.records.rank_profiler",
    "jupyter_mgpu.engine.wire.link_agent",
    # processes' entry points and the multi-host start, run as subprocesses (tests/cluster, tests/multihost)
    "jupyter_mgpu.engine.startup.controller",
    "jupyter_mgpu.engine.startup.launcher",
    "jupyter_mgpu.engine.startup.mpi_ipengine",
    "jupyter_mgpu.launch.engine_start",
    "jupyter_mgpu.launch.engine_waits",
    "jupyter_mgpu.launch.host_cluster",
    "jupyter_mgpu.launch.rank_setup",
    "jupyter_mgpu.launch.relay_start",
    "jupyter_mgpu.selftest",
    "jupyter_mgpu.selftest_notebook",
}


def imported_by_tests(tests: Path = TESTS, root: Path = ROOT) -> set[str]:
    """Every module of the package that some file under ``tests/`` imports by name (lazy imports included)."""
    known = set(modules(root))
    out: set[str] = set()
    for path in sorted(tests.rglob("*.py")):
        for imp in imports_of(f"tests.{path.stem}", path, known):
            if imp.imported.startswith(PACKAGE + ".") or imp.imported == PACKAGE:
                out.add(imp.imported)
    return out


def not_imported(tests: Path = TESTS, root: Path = ROOT) -> set[str]:
    """Modules with code of their own (``__init__`` files aside) that no test file imports."""
    seen = imported_by_tests(tests, root)
    return {m for m, p in modules(root).items() if p.name != "__init__.py" and m not in seen}


def test_the_list_of_modules_no_test_imports_is_exact():
    missing = not_imported()
    assert sorted(missing - UNTESTED) == [], "import these in a test, or list them in UNTESTED with a reason"
    assert sorted(UNTESTED - missing) == [], "these have a test now: take them off UNTESTED"


def test_the_gate_sees_a_module_no_test_imports(tmp_path):
    (tmp_path / PACKAGE / "part").mkdir(parents=True)
    for rel in ("__init__.py", "part/__init__.py", "part/seen.py", "part/unseen.py"):
        (tmp_path / PACKAGE / rel).write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test():\n    from jupyter_mgpu.part import seen\n")
    assert not_imported(tmp_path / "tests", tmp_path / PACKAGE) == {f"{PACKAGE}.part.unseen"}
