"""Whether two ranks' holdings in a collective's pictures are the same: a tensor, a list of entries
(tensors or None), or nothing. The collective's check against torch's result compares floats to
rounding; the figure folds a row into "same as rank r" only when it is identical."""

from __future__ import annotations

from typing import Any


def holdings_equal(a: Any, b: Any, exact: bool = False) -> bool:
    """Whether holdings ``a`` and ``b`` are equal: the same structure, shapes and dtypes, and values
    (floats to rounding unless ``exact``)."""
    import torch

    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and len(a) == len(b)
            and all(holdings_equal(x, y, exact) for x, y in zip(a, b))
        )
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not exact and a.is_floating_point():
        return bool(torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6, equal_nan=True))
    return bool(torch.equal(a, b))
