"""The Python gates the README's test command enforces: ruff's lint rules and formatting (configured in
pyproject.toml), mypy (strict by default; a listed set of exceptions that may only shrink, never a pure
module), and test modules of distinct names."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from test_import_graph import PURE, PURE_MODULES

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["jupyter_mgpu", "tests", "benchmarks", ".ci"]


def _tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)  # the venv's own, activated or not
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' installs it")
    return found


def _run(args: list[str], timeout: float = 600) -> None:
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (
        f"{' '.join(args)} failed (rc {out.returncode}):\n{out.stdout[-6000:]}{out.stderr[-2000:]}"
    )


def test_ruff_lint():
    _run([_tool("ruff"), "check", "--no-cache", *PATHS])


def test_ruff_format():
    _run([_tool("ruff"), "format", "--check", "--no-cache", *PATHS])


def test_mypy():
    # mypy's own incremental cache (.mypy_cache, gitignored): a fresh clone checks everything (50-90 s on two
    # slow cores, two thirds of it torch's types); a run after an edit re-checks what the edit touched (3 s)
    _run([_tool("mypy")])


# the most modules mypy may check with its defaults rather than strictly; lower it as the list shrinks
MAX_NOT_STRICT = 0


def not_strict() -> list[str]:
    """The modules pyproject.toml exempts from mypy's strict checks (an override that turns them off)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    out: list[str] = []
    for override in config.get("overrides", []):
        if override.get("disallow_untyped_defs") is False:
            mods = override["module"]
            out += [mods] if isinstance(mods, str) else mods
    return out


def test_mypy_is_strict_but_for_a_shrinking_list_without_a_pure_module():
    listed = not_strict()
    assert len(listed) <= MAX_NOT_STRICT, f"{len(listed)} modules are not strict; at most {MAX_NOT_STRICT} may be"
    pure = [m for m in listed if m in PURE_MODULES or m.split(".")[1] in PURE]
    assert pure == [], "a pure module is always checked strictly"


def test_no_two_test_modules_share_a_basename():
    """pytest (rootdir-relative imports, no packages) refuses to collect a second ``test_x.py`` of the
    same name: the whole run stops at collection."""
    seen: dict[str, Path] = {}
    twice = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            twice.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert twice == []
