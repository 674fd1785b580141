"""What a DTensor's placement is, as a value that travels: global shape, dtype, mesh and placements.

``mgpu.show(dt)`` in a ``%%mgpu`` cell returns one (it pickles small, and every rank's is equal, so
the notebook shows it once); ``mg.from_dtensor(name).layout`` is the same object on the notebook's
side. Its text is what torch's ``visualize_sharding`` prints, without rich or tabulate; the notebook
draws it as ``mg.show`` does (the extension registers that picture for this class). Pure: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from jupyter_mgpu.layout import mesh_text
from jupyter_mgpu.layout.mesh import Mesh, MeshPlacement, MeshShardInfo, from_torch, mesh_shard_table, placements_label

ITEMSIZE = {
    "complex128": 16,
    "float64": 8,
    "int64": 8,
    "complex64": 8,
    "float32": 4,
    "int32": 4,
    "bfloat16": 2,
    "float16": 2,
}


def itemsize_of(dtype: str) -> int:
    """Bytes per element of a dtype named like torch's (``float32``), 1 for the byte-sized ones."""
    return ITEMSIZE.get(dtype, 2 if dtype.endswith("16") else 1)


@dataclass(frozen=True)
class DTensorLayout:
    """A global tensor of ``shape`` and ``dtype`` placed on ``mesh`` by ``placements`` (one per mesh dim)."""

    shape: tuple[int, ...]
    dtype: str
    mesh: Mesh
    placements: tuple[MeshPlacement, ...]
    name: str = ""

    @classmethod
    def of(cls, dtensor: Any, name: str = "") -> DTensorLayout:
        """The layout of a torch DTensor (read from its attributes: no torch import here)."""
        mesh, placements = from_torch(dtensor.device_mesh, dtensor.placements)
        dtype = str(dtensor.dtype).replace("torch.", "")
        return cls(tuple(int(s) for s in dtensor.shape), dtype, mesh, placements, name)

    @property
    def itemsize(self) -> int:
        return itemsize_of(self.dtype)

    @property
    def table(self) -> list[MeshShardInfo]:
        """Every rank's piece, in rank order (as torch's ``compute_local_shape_and_global_offset``)."""
        return mesh_shard_table(self.shape, self.mesh, self.placements)

    @property
    def label(self) -> str:
        """``[S(0), R] on mesh (dp=2, tp=2)``."""
        return f"{placements_label(self.placements)} on mesh {self.mesh.label}"

    @property
    def bytes_per_rank(self) -> list[int]:
        return [s.numel * self.itemsize for s in self.table]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def partial(self) -> bool:
        return any(type(p).__name__ == "Partial" for p in self.placements)

    def text(self, ascii: bool = False) -> str:
        """The plain-text picture (see ``mesh_text``)."""
        head = f"{self.name}: " if self.name else ""
        return head + mesh_text.render(self.shape, self.mesh, self.placements, ascii=ascii)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:  # on a rank (no pictures there): the text, as the notebook shows it
        import html

        return f"<pre>{html.escape(self.text())}</pre>"


def describe_pieces(layout: DTensorLayout) -> list[dict[str, Any]]:
    """Per rank: mesh coordinate, index ranges, local shape, bytes and what it holds (for tips and reprs)."""
    out = []
    for s in layout.table:
        if s.partial:
            kind = "a full-size operand of " + " and ".join(f"P({op})" for op in s.partial_ops)
        elif len(s.replica_group) > 1:
            kind = "a replica (also on rank " + ", ".join(str(r) for r in s.replica_group if r != s.rank) + ")"
        else:
            kind = "its own piece"
        out.append(
            {
                "rank": s.rank,
                "coordinate": s.coordinate,
                "ranges": s.ranges,
                "shape": s.shape,
                "bytes": s.numel * layout.itemsize,
                "kind": kind,
            }
        )
    return out
