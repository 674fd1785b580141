"""One meaning for a shared file name: two modules of the package share a name only when they are the two
halves of one feature (the controller's and the rank's, or the data and its view), and each one's docstring
names the other's path, so a reader of either finds the other. See docs/architecture.md."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from import_graph import ROOT


def shared_names(root: Path = ROOT) -> dict[str, list[Path]]:
    """File names that more than one module of the package has (``__init__.py`` aside)."""
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.name != "__init__.py":
            by_name[path.name].append(path)
    return {name: paths for name, paths in by_name.items() if len(paths) > 1}


def pair_problems(root: Path = ROOT) -> list[str]:
    out = []
    for name, paths in sorted(shared_names(root).items()):
        if len(paths) > 2:
            out.append(
                f"{name} is the name of {len(paths)} modules; a shared name is for the two halves of one feature"
            )
            continue
        for this, other in (paths, paths[::-1]):
            doc = ast.get_docstring(ast.parse(this.read_text())) or ""
            want = other.relative_to(root).as_posix()
            if want not in doc:
                out.append(f"{this.relative_to(root.parent)}'s docstring does not name its other half {want}")
    return out


def test_a_shared_name_is_two_halves_that_name_each_other():
    assert pair_problems() == []


def test_the_rule_catches_a_third_module_and_a_silent_half(tmp_path):
    root = tmp_path / "jupyter_mgpu"
    for rel, text in {
        "ops/io.py": '"""Rank half of tensors/io.py."""\n',
        "tensors/io.py": '"""Controller half."""\n',
        "a/x.py": "",
        "b/x.py": "",
        "c/x.py": "",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert pair_problems(root) == [
        "jupyter_mgpu/tensors/io.py's docstring does not name its other half ops/io.py",
        "x.py is the name of 3 modules; a shared name is for the two halves of one feature",
    ]
