"""Read the imports of every module of the package (lazy ones inside functions included, ``if
TYPE_CHECKING:`` blocks left out: they never run) and name each module's part."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "jupyter_mgpu"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name (ours) or top-level distribution name (third party)
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            yield from (n for c in child.orelse for n in [c, *_walk(c)])
            continue
        yield child
        yield from _walk(child)


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import statement in ``path``, resolved to our module it loads (or a third-party top name)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[Import] = []
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append(Import(name, _ours_or_top(alias.name, known), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                target = full if full in known else source
                out.append(Import(name, _ours_or_top(target, known), node.lineno))
    return out


def _ours_or_top(dotted: str, known: set[str]) -> str:
    if dotted == PACKAGE or dotted.startswith(PACKAGE + "."):
        while dotted not in known and "." in dotted:
            dotted = dotted.rpartition(".")[0]
        return dotted
    return dotted.partition(".")[0]


def graph(root: Path = ROOT) -> list[Import]:
    mods = modules(root)
    known = set(mods)
    return [i for n, p in mods.items() for i in imports_of(n, p, known)]


def part(module: str) -> str:
    """The part of the architecture a module belongs to: its subpackage (for the engine, its seam
    ``engine.<seam>``; ``engine`` is the leaves the seams share), or ``api`` for the package itself."""
    rest = module.split(".")[1:]
    if not rest:
        return "api"
    if rest[0] == "engine" and len(rest) > 1 and (ROOT / "engine" / rest[1]).is_dir():
        return f"engine.{rest[1]}"
    return rest[0]


def rule_part(rule: str) -> str:
    """The part an arrow's target (a part, or one module written ``part.module``) lies in."""
    return part(f"{PACKAGE}.{rule}")
