"""Training helpers for ``%%mgpu`` cells: ``mgpu.shard_loader`` and ``mgpu.log``.

``shard_loader`` hands each rank its share of every batch. The order comes from
``torch.utils.data.DistributedSampler`` (one permutation of the dataset per epoch, seeded by
``seed + epoch``, rank ``r`` taking positions ``r, r + P, r + 2P, …``) without its padding, so:
global step ``k`` covers positions ``[k·B·P, (k+1)·B·P)`` of that permutation for any world size
``P``, every sample is seen exactly once per epoch, and every rank yields the same number of
batches (the last may be short, or empty on some ranks when fewer than ``P`` samples are left),
so collectives such as DDP's gradient all-reduce never wait for a rank that ran out.

``log(loss=…)`` appends one JSON line to ``<rundir>/metrics/rank<r>.jsonl``; the controller reads
those files while the cell is still running (never through the busy ipyparallel queue).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from typing import Any

from jupyter_mgpu.engine import state as rank_state

METRICS_DIR = "metrics"


class ShardSampler:
    """This rank's indices of one epoch: DistributedSampler's order and split, no padding."""

    def __init__(self, length: int, rank: int, world_size: int, shuffle: bool = True, seed: int = 0):
        from torch.utils.data import DistributedSampler

        self.length, self.rank, self.world_size = length, rank, world_size
        # the sampler is built for its permutation rule; padding is left out in indices()
        self.sampler: DistributedSampler[int] = DistributedSampler(
            range(length),  # type: ignore[arg-type]  # a range works as a map-style dataset; torch's stubs want Dataset
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=False,
        )

    def order(self, epoch: int) -> list[int]:
        """The global order of epoch ``epoch`` (the same for every world size)."""
        import torch

        s = self.sampler
        if s.shuffle:
            g = torch.Generator()
            g.manual_seed(s.seed + epoch)
            return torch.randperm(self.length, generator=g).tolist()
        return list(range(self.length))

    def indices(self, epoch: int) -> list[int]:
        """This rank's dataset indices for ``epoch``, in the order it visits them."""
        return self.order(epoch)[self.rank :: self.world_size]


class ShardLoader:
    """Iterate this rank's batches; ``len()`` is the number of steps (the same on every rank)."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        device: Any = None,
    ):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive whole number, got {batch_size!r}")
        st = rank_state.get()
        self.dataset = dataset
        self.length = _length(dataset)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.device = st.device if device is None else device
        self.rank, self.world_size = st.rank, st.world_size
        self.sampler = ShardSampler(self.length, st.rank, st.world_size, shuffle, seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order for the next pass (each full pass also moves on to the next epoch)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        per_step = self.batch_size * self.world_size
        return self.length // per_step if self.drop_last else math.ceil(self.length / per_step)

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch
        mine = self.sampler.indices(epoch)
        for step in range(len(self)):
            yield self._batch(mine[step * self.batch_size : (step + 1) * self.batch_size])
        self.epoch = epoch + 1

    def _batch(self, idx: list[int]) -> Any:
        data = self.dataset
        if (
            isinstance(data, (tuple, list))
            and data
            and all(hasattr(d, "__getitem__") and hasattr(d, "shape") for d in data)
        ):
            return tuple(_to(_take(d, idx), self.device) for d in data)
        if hasattr(data, "tensors") and isinstance(data.tensors, tuple):  # TensorDataset
            return tuple(_to(_take(d, idx), self.device) for d in data.tensors)
        if hasattr(data, "shape") and hasattr(data, "__getitem__"):
            return _to(_take(data, idx), self.device)
        from torch.utils.data import default_collate

        if not idx:
            sample = data[0]
            return _to(_empty_like_batch(default_collate([sample])), self.device)
        return _to(default_collate([data[i] for i in idx]), self.device)


def _length(dataset: Any) -> int:
    if isinstance(dataset, (tuple, list)) and dataset and all(hasattr(d, "shape") for d in dataset):
        lengths = {len(d) for d in dataset}
        if len(lengths) > 1:
            raise ValueError(f"the arrays of the dataset differ in length ({', '.join(str(len(d)) for d in dataset)})")
        return lengths.pop()
    try:
        return len(dataset)
    except TypeError:
        raise TypeError(
            f"shard_loader needs a dataset with a length (a Dataset, a tensor or a tuple of tensors), "
            f"got {type(dataset).__name__}"
        ) from None


def _take(array: Any, idx: list[int]) -> Any:
    import torch

    if isinstance(array, torch.Tensor):
        return array[torch.as_tensor(idx, dtype=torch.long, device=array.device)]
    import numpy as np

    return torch.as_tensor(np.asarray(array)[np.asarray(idx, dtype=np.int64)])


def _to(batch: Any, device: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch


def _empty_like_batch(batch: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch[:0]
    if isinstance(batch, (tuple, list)):
        return type(batch)(_empty_like_batch(b) for b in batch)
    if isinstance(batch, dict):
        return {k: _empty_like_batch(v) for k, v in batch.items()}
    return batch


def shard_loader(
    dataset: Any, batch_size: int, shuffle: bool = True, seed: int = 0, drop_last: bool = False, device: Any = None
) -> ShardLoader:
    """This rank's batches of ``dataset`` (``batch_size`` per rank), moved to this rank's device.

    ``dataset``: a map-style ``Dataset``, a tensor/array, or a tuple of them (e.g. ``(x, y)``).
    """
    return ShardLoader(dataset, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last, device=device)


# -- metrics ---------------------------------------------------------------------------------
_log_file: Any = None
_log_path: str | None = None
_step = 0


def metrics_path(rundir: str, rank: int) -> str:
    return os.path.join(rundir, METRICS_DIR, f"rank{rank}.jsonl")


def _number(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (ValueError, RuntimeError):
            raise ValueError(
                "mgpu.log takes numbers (or one-element tensors), got a tensor with several elements"
            ) from None
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"mgpu.log takes numbers or short strings, got {type(value).__name__}") from None


def log(step: int | None = None, **metrics: Any) -> dict[str, Any]:
    """Record ``metrics`` (numbers) for this rank; ``mg.metrics()`` and the live plot see it at once.

    ``step`` defaults to a per-rank counter (1 more than the last logged step).
    """
    global _log_file, _log_path, _step
    st = rank_state.get()
    if not metrics:
        raise ValueError("mgpu.log needs at least one metric, e.g. mgpu.log(loss=loss)")
    record = {k: _number(v) for k, v in metrics.items()}
    _step = int(step) if step is not None else _step + 1
    out = {"rank": st.rank, "step": _step, "time": time.time(), **record}
    path = metrics_path(st.rundir, st.rank)
    if _log_file is None or _log_path != path or not os.path.exists(path):
        if _log_file is not None:
            _log_file.close()
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        _log_file = open(path, "a", buffering=1, encoding="utf-8")
        _log_path = path
    _log_file.write(json.dumps(out) + "\n")
    return out


def reset_metrics() -> None:
    """Forget this rank's logged metrics and restart its step counter (``mg.clear_metrics()``)."""
    global _log_file, _log_path, _step
    st = rank_state.get()
    if _log_file is not None:
        _log_file.close()
    _log_file, _log_path, _step = None, None, 0
    try:
        os.unlink(metrics_path(st.rundir, st.rank))
    except FileNotFoundError:
        pass
