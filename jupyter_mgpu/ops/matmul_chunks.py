"""How a sharded matmul cuts its traffic into pieces: ring chunks of B's columns, SUMMA panels of K.

Pure (no torch): the planner (``ops/matmul_costs.py``) predicts memory from these sizes, the ranks
(``ops/ring_matmul.py``, ``ops/summa_matmul.py``) cut their buffers by them and the tracer
(``ops/matmul_trace.py``) names the same blocks, so all three agree without talking. Pieces are sized
so their buffers stay below :data:`BUFFER_SHARE` of the rank's A + B + C shards.
"""

from __future__ import annotations

import math

from jupyter_mgpu.layout import placement as pl

# ring chunks and SUMMA panels are sized so their buffers stay below this share of A + B + C shards
BUFFER_SHARE = 0.15
RING_SLOTS = 4  # ring chunk buffers per rank
RING_LOOKAHEAD = 2  # receives a ring rank posts ahead (a sender may run this many chunks in front)


def ring_chunk_cols(m: int, k: int, n: int, p: int, itemsize: int) -> int:
    """Columns of B per ring message: RING_SLOTS (K/P x cols) buffers stay under BUFFER_SHARE of the shards."""
    kb = math.ceil(k / p)
    base = (math.ceil(m / p) * k + kb * n + math.ceil(m / p) * n) * itemsize
    cols = int(BUFFER_SHARE * base / (RING_SLOTS * max(1, kb) * itemsize))
    return max(1, min(n, cols))


def summa_panel(m: int, k: int, n: int, grid: tuple[int, int], itemsize: int) -> int:
    """SUMMA panel width: two A panels and two B panels stay under BUFFER_SHARE of the shards."""
    r, c = grid
    ml, nl = math.ceil(m / r), math.ceil(n / c)
    base = (ml * math.ceil(k / c) + math.ceil(k / r) * nl + ml * nl) * itemsize
    width = int(BUFFER_SHARE * base / (2 * (ml + nl) * itemsize)) if ml + nl else k
    return max(1, min(k, width))


def summa_panels(k: int, grid: tuple[int, int], width: int) -> list[tuple[int, int]]:
    """The k-ranges of SUMMA panels: inside one A column block and one B row block, ≤ width wide."""
    rows, cols = grid
    cuts = sorted({b for a, b in pl.split(k, cols)} | {b for a, b in pl.split(k, rows)} | {0})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        for s in range(a, b, width):
            out.append((s, min(b, s + width)))
    return out
