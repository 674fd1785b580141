"""Run a notebook of ``notebooks/`` in the shared real JupyterLab with Chromium (Run All), as a student does.

One execution does double duty: the saved notebook's outputs are what the notebook tests assert on,
and the page is checked for what a reader sees — no console error, nothing wider than its cell, no
text line that wraps — with screenshots of the main views in ``test-artifacts/notebooks/<name>/``
(gitignored) for a reviewer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab_server import ARTIFACTS, BROWSER, run_script
from nbrun import by_source


@dataclass
class LabRun:
    """What one Run All produced: the saved notebook, its cells' text, the runner's reports by step."""

    nb: nbformat.NotebookNode
    steps: dict[str, Any]
    shots: Path
    text: Any = field(init=False)

    def __post_init__(self) -> None:
        self.text = by_source(self.nb)

    def outputs(self, prefix: str) -> list[dict]:
        """The outputs of the one code cell whose source starts with ``prefix``, less the emptied lines of
        waits that ended (``wait_line.py``: a display updated to nothing, which the page does not show)."""
        cells = [c for c in self.nb.cells if c.cell_type == "code" and c.source.startswith(prefix)]
        assert len(cells) == 1, f"{len(cells)} cells start with {prefix!r}"
        return [o for o in cells[0].outputs if o.get("data") != {"text/plain": ""}]


def run_in_lab(
    lab: dict[str, Any], name: str, shots: dict[str, str], timeout_s: int = 900, loaded: tuple[str, str] | None = None
) -> LabRun:
    """Run All of ``notebooks/<name>`` in ``lab``; ``shots`` maps a screenshot name to a cell's source prefix.

    ``tests/browser/notebook_hooks/<stem>.mjs``, when present, observes the page during and after the run.
    ``loaded``: the source prefixes of the first and last cells that run with every core kept busy by other
    processes (four spinning processes per core, a load average of 8 here), as on a shared node; the Run All's
    ``load`` step says for how long.
    """
    stem = Path(name).stem
    hooks = BROWSER / "notebook_hooks" / f"{stem}.mjs"
    steps = run_script(
        lab,
        "notebook_run.mjs",
        f"notebooks/{stem}",
        timeout_s + 120,
        notebook=f"notebooks/{name}",
        timeoutMs=timeout_s * 1000,
        shots=[{"name": k, "cell": v} for k, v in shots.items()],
        hooks=str(hooks) if hooks.exists() else None,
        load={"from": loaded[0], "until": loaded[1], "perCore": 4} if loaded else None,
    )
    nb = nbformat.read(lab["root"] / "notebooks" / name, as_version=4)
    return LabRun(nb, steps, ARTIFACTS / "notebooks" / stem)


def assert_page_is_clean(run: LabRun) -> None:
    """Every cell ran (errors only where tagged raises-exception), no console error, nothing past a cell's
    edge (outputs or code), no wrapped text line, and every screenshot saved."""
    ran = run.steps["ran"]
    code = [c for c in ran["cells"] if c["type"] == "code"]
    assert all(c["count"] for c in code), f"cells not executed: {[c['index'] for c in code if not c['count']]}"
    assert [c["index"] for c in code if c["error"] and not c["raises"]] == []
    assert all(c["error"] for c in code if c["raises"]), "a cell tagged raises-exception raised nothing"
    errors, layout = run.steps["done"]["consoleErrors"], run.steps["layout"]
    assert errors == [], f"console errors: {errors}"
    assert layout["overflow"] == [], f"outputs wider than their cell: {layout['overflow'][:8]}"
    assert layout["wrapped"] == [], f"text lines that wrap: {layout['wrapped'][:4]}"
    assert layout["wide_code"] == [], f"code wider than its cell: {layout['wide_code'][:6]}"
    assert all(Path(p).stat().st_size > 2000 for p in run.steps["shots"]["shots"])


def notebook_module(
    name: str, shots: dict[str, str], timeout_s: int = 900, loaded: tuple[str, str] | None = None
) -> tuple[list[Any], Callable]:
    """What every notebook test module shares: its marks and the module-scoped ``run`` fixture, one Run All
    of ``notebooks/<name>`` (``run_in_lab``) that all its tests read. A module binds them by the names
    pytest looks for: ``pytestmark, run = notebook_module("01_quickstart.ipynb", SHOTS)``. ``loaded``: the
    cells that run on a busy machine (``run_in_lab``)."""

    @pytest.fixture(scope="module")
    def run(lab: dict[str, Any]) -> LabRun:
        return run_in_lab(lab, name, shots, timeout_s, loaded)

    return [pytest.mark.notebook, pytest.mark.browser, pytest.mark.timeout(timeout_s)], run
