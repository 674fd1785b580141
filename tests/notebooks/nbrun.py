"""A notebook's outputs read back as text: each code cell's by its source (the Run All's saved notebook)."""

from __future__ import annotations

import nbformat


def cell_text(cell) -> str:
    """Everything a code cell printed (streams, results, errors) as one string."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] in ("execute_result", "display_data"):
            parts.append(out["data"].get("text/plain", ""))
        elif out["output_type"] == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
    return "".join(parts)


def by_source(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Map each code cell's source to its output text; look cells up by a prefix of their source."""

    class Lookup(dict):
        def __getitem__(self, prefix: str) -> str:
            if dict.__contains__(self, prefix):
                return dict.__getitem__(self, prefix)
            hits = [v for k, v in self.items() if k.startswith(prefix)]
            if len(hits) != 1:
                raise KeyError(f"{len(hits)} cells start with {prefix!r}")
            return hits[0]

    return Lookup({c.source: cell_text(c) for c in nb.cells if c.cell_type == "code"})
