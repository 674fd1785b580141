"""What a view writes next to "rank r" in a cluster across hosts: the rank's device with its host.

On one host the views say ``rank 2``; when the current session's ranks run on several hosts
(``%mgpu_init --hosts``, ``--launcher``, ``--connect``) they add ``node2:cuda:1``, the label of
``%mgpu_status``, the dashboard and the sidebar.
"""

from __future__ import annotations


def rank_names(n: int) -> list[str] | None:
    """Each rank's ``host:kind:index`` when the current session spans hosts and has ``n`` ranks, else None."""
    from jupyter_mgpu.session import lifecycle as sessmod

    s = sessmod.current(required=False)
    if s is None or s.world_size != n:
        return None
    devices = s.devices
    if not any(getattr(d, "host", None) for d in devices):
        return None
    return [d.label for d in devices]


def rank_title(rank: int, names: list[str] | None) -> str:
    """``rank 2``, or ``rank 2 · node2:cuda:1`` across hosts."""
    return f"rank {rank}" if not names else f"rank {rank} · {names[rank]}"
