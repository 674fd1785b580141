"""``mgpu`` inside a ``%%mgpu`` cell: helpers user code on a rank can call."""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.engine import state as rank_state


def info() -> dict[str, Any]:
    """This rank's identity, device and memory (same as a row of ``%mgpu_status``)."""
    return rank_state.describe()


def local(handle: Any) -> Any:
    """This rank's shard of a DistTensor: ``mgpu.local(A)`` with the handle's name or its id string."""
    from jupyter_mgpu.engine.shards import shard_store as store

    hid = handle if isinstance(handle, str) else getattr(handle, "handle_id", None)
    if hid is None:
        raise TypeError(f"mgpu.local() takes a DistTensor (or its id), got {type(handle).__name__}")
    return store.get(hid)


def show(dtensor: Any, name: str = "") -> Any:
    """``mgpu.show(dt)``: the placement of a torch DTensor as a value every rank returns alike, so the
    notebook draws it once, as ``mg.show`` does (text on the ranks)."""
    from jupyter_mgpu.layout.dtensor_layout import DTensorLayout

    if not hasattr(dtensor, "device_mesh") or not hasattr(dtensor, "placements"):
        raise TypeError(
            f"mgpu.show() takes a torch DTensor on rank {rank_state.get().rank}, got {type(dtensor).__name__}"
        )
    return DTensorLayout.of(dtensor, name)


from jupyter_mgpu.engine.records.training import ShardLoader, log, shard_loader  # noqa: E402, F401  (mgpu.shard_loader, mgpu.log in %%mgpu cells)
