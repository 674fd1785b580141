"""Print pip constraints that pin the libraries jupyter_mgpu leans on most to the oldest versions its
pyproject.toml allows (the ``>=`` bound of each), so CI proves those bounds true; with ``requirements
EXTRA``, the requirements the package and that extra bring (its own extras named in it expanded) and
what building it needs, so a venv can hold them all before the package itself is installed, without
build isolation (``.ci/oldest-deps``).

torch is left out: the package registries serve no CPU build older than the one README's commands
pin, and a CUDA build is a multi-GB download; the oldest-deps pass keeps the pinned CPU build.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

LEANED_ON = (
    "cloudpickle",
    "ipyparallel",
    "ipykernel",
    "ipywidgets",
    "anywidget",
    "plotly",
    "jupyterlab",
    "jupyter_server",
)


def lowest(requirements: list[str]) -> dict[str, str]:
    """name -> the version of its ``>=`` bound, for the libraries in LEANED_ON."""
    found = {}
    for req in requirements:
        match = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\[[^]]*\])?\s*([^;]*)", req)
        if not match:
            continue
        name, spec = match.group(1), match.group(2)
        bound = re.search(r">=\s*([0-9][^,\s]*)", spec)
        if name.replace("-", "_").lower() in LEANED_ON and bound:
            found[name] = bound.group(1)
    return found


def requirements(project: dict, extra: str) -> list[str]:
    """What installing the package with ``extra`` asks for: its dependencies and the extra's, an extra of
    its own named in one (``jupyter_mgpu[frameworks,io]``) expanded in its place."""
    own = project["name"].replace("-", "_").lower()
    extras = project.get("optional-dependencies", {})
    out: list[str] = list(project["dependencies"])
    todo, seen = [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras[name]:
            match = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*\[([^]]*)\]", req)
            if match and match.group(1).replace("-", "_").lower() == own:
                todo.extend(e.strip() for e in match.group(2).split(","))
            else:
                out.append(req)
    return out


def main() -> int:
    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    if sys.argv[1:2] == ["requirements"]:
        # hatchling asks for editables too when it builds an editable wheel (get_requires_for_build_editable)
        build = [*pyproject["build-system"]["requires"], "editables"]
        print("\n".join(requirements(pyproject["project"], sys.argv[2]) + build))
        return 0
    pins = lowest(pyproject["project"]["dependencies"])
    missing = sorted(set(LEANED_ON) - {n.replace("-", "_").lower() for n in pins})
    if missing:
        print(f"pyproject.toml gives no >= bound for {', '.join(missing)}", file=sys.stderr)
        return 2
    for name, version in pins.items():
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
