"""Print pip constraints that pin the libraries jupyter_mgpu leans on most to the oldest versions its
pyproject.toml allows (the ``>=`` bound of each), so CI proves those bounds true.

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


def main() -> int:
    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
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
