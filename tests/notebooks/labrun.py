"""Run a notebook of ``notebooks/`` in the shared real JupyterLab with Chromium (Run All), as a student does.

One execution does double duty: the saved notebook's outputs are what the notebook tests assert on,
and the page is checked for what a reader sees — no console error, nothing wider than its cell, no
text line that wraps — with screenshots of the main views in ``test-artifacts/notebooks/<name>/``
(gitignored) for a reviewer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from lab_server import ARTIFACTS, CHROMIUM, REPO
from nbrun import by_source

SCRIPT = REPO / "tests" / "browser" / "notebook_run.mjs"
HOOKS = REPO / "tests" / "browser" / "notebook_hooks"


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
        """The outputs of the one code cell whose source starts with ``prefix``."""
        cells = [c for c in self.nb.cells if c.cell_type == "code" and c.source.startswith(prefix)]
        assert len(cells) == 1, f"{len(cells)} cells start with {prefix!r}"
        return cells[0].outputs


def run_in_lab(lab: dict[str, Any], name: str, shots: dict[str, str], timeout_s: int = 900) -> LabRun:
    """Run All of ``notebooks/<name>`` in ``lab``; ``shots`` maps a screenshot name to a cell's source prefix.

    ``tests/browser/notebook_hooks/<stem>.mjs``, when present, observes the page during and after the run.
    """
    stem = Path(name).stem
    artifacts = ARTIFACTS / "notebooks" / stem
    if artifacts.exists():
        shutil.rmtree(artifacts)
    artifacts.mkdir(parents=True)
    hooks = HOOKS / f"{stem}.mjs"
    cfg = {
        "url": lab["url"],
        "token": lab["token"],
        "notebook": f"notebooks/{name}",
        "artifacts": str(artifacts),
        "chromium": CHROMIUM,
        "profile": str(lab["tmp"] / f"chromium-{stem}"),
        "timeoutMs": timeout_s * 1000,
        "shots": [{"name": k, "cell": v} for k, v in shots.items()],
        "hooks": str(hooks) if hooks.exists() else None,
    }
    run = subprocess.run(
        ["node", str(SCRIPT), json.dumps(cfg)], capture_output=True, text=True, timeout=timeout_s + 120, cwd=REPO
    )
    steps: dict[str, Any] = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            steps[rec["step"]] = rec
    (artifacts / "steps.json").write_text(json.dumps(steps, indent=1))
    assert "error" not in steps, (
        f"{steps['error']['message']}\nconsole: {steps['error'].get('consoleErrors')}\n"
        f"lab log:\n{lab['log'].read_text()[-3000:]}"
    )
    assert run.returncode == 0 and "done" in steps, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    nb = nbformat.read(lab["root"] / "notebooks" / name, as_version=4)
    return LabRun(nb, steps, artifacts)


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
