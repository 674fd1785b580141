"""A call started with ``block=False``: its ranks keep working while the notebook goes on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.errors import rank_list
from jupyter_mgpu.session.output_relay import OutputRelay

if TYPE_CHECKING:
    from jupyter_mgpu.session.core import Session


class PendingResult:
    """The result of a non-blocking run: ``.ready()``, ``.get(timeout=None)`` (one value per rank).
    ``finish`` turns the ranks' reports into what ``get`` returns (a cell's: the values themselves, as a
    blocking cell's ``_`` holds them, not their reprs)."""

    def __init__(
        self,
        session: Session,
        ar: Any,
        ranks: list[int],
        label: str,
        relay: OutputRelay | None,
        finish: Callable[[list[Any]], list[Any]] | None = None,
    ):
        self.session, self.ar, self.ranks, self.label, self.relay = session, ar, ranks, label, relay
        self.finish = finish
        from jupyter_mgpu.session import idle_prompts

        idle_prompts.watch(self)  # in a kernel: its ranks' pdb prompts said and served while the notebook is idle

    def running(self) -> list[int]:
        """The ranks still at work on this call."""
        return pending_ranks(self.session.cluster.client, self.ar, self.ranks)

    def ready(self) -> bool:
        done: bool = self.ar.ready()
        return done

    def get(self, timeout: float | None = None) -> list[Any]:
        reports = self.session._collect(self.ar, self.ranks, self.label, timeout, self.relay)
        return self.finish(reports) if self.finish is not None else reports

    def __repr__(self) -> str:
        return f"<PendingResult {self.label} on {rank_list(self.ranks)}: {'ready' if self.ready() else 'running'}>"


def finished_results(ar: Any, ranks: list[int]) -> dict[int, Any]:
    """The reports of the ranks whose part of ``ar`` has already come back (one future per rank)."""
    children = getattr(ar, "_children", None) or []
    done = {}
    for rank, future in zip(ranks, children):
        if future.done() and not future.cancelled() and future.exception() is None:
            done[rank] = future.result()
    return done


def pending_ranks(client: Any, ar: Any, ranks: list[int]) -> list[int]:
    """The ranks whose part of ``ar`` is still outstanding (all of them when none is known to be)."""
    pending = [rank for rank, msg_id in zip(ranks, ar.msg_ids) if msg_id in client.outstanding]
    return pending or list(ranks)
