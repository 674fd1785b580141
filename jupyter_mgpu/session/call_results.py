"""What the per-rank reports of one call (``engine/execution/calls.call``) become in the notebook.

The values in rank order; before that, what the reports carry for the notebook is said once (names
defined both in the notebook and on the ranks, the process group's notes) and the slowest rank's time
counted. If any rank failed: one error for all the failed ranks (``session/rank_errors.py``), built after
the process group was made clean where the ranks may disagree, and kept as the session's last error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.group import process_group
from jupyter_mgpu.errors import MgpuError, rank_list
from jupyter_mgpu.session import cell_names, group_notes
from jupyter_mgpu.session.rank_errors import build_error

if TYPE_CHECKING:
    from jupyter_mgpu.session.core import Session


def results(s: Session, reports: list[dict[str, Any]], ranks: list[int]) -> list[Any]:
    """The values of ``calls.call`` reports in rank order, or one error for every failed rank."""
    s.engine_seconds += max((res.get("seconds", 0.0) for res in reports), default=0.0)
    found: dict[str, set[str]] = {}
    for res in reports:
        for function, names in res.get("shadowed") or ():
            found.setdefault(function, set()).update(names)
    for function, names in found.items():
        cell_names.say_both_sides(s.said_both_sides, function, names)
    group_notes.say(reports)
    failures = {r: res for r, res in zip(ranks, reports) if not res.get("ok")}
    if not failures and any(res.get("unrun") for res in reports):  # one caught in the cell: before the next
        s.recovery.mark_dirty("a collective that failed before it ran")
    if not failures and s.recovery.released:  # released as the call ended: their sockets are shut all the same
        s.recovery.mark_dirty(f"the release of {rank_list(sorted(s.recovery.released))} as the call ended")
        s.hang_watch.take_report()
    if failures:
        raise error(s, failures, ranks, dict(zip(ranks, reports)))
    return [res["value"] for res in reports]


def error(
    s: Session, failures: dict[int, dict[str, Any]], ranks: list[int], reports: dict[int, dict[str, Any]]
) -> MgpuError:
    """One error for the failed ranks; first, a clean process group if the ranks may disagree."""
    succeeded = [r for r in ranks if r not in failures]
    released = sorted(s.recovery.released)
    try:
        rebuilt = s.recovery.after_failure(reports)
    except Exception:  # the next call tries again
        rebuilt = False
    report = s.hang_watch.take_report()
    s.last_error = build_error(
        failures,
        succeeded=succeeded,
        budgets={r: d.total_memory for r, d in enumerate(s.devices)},
        device_kind=s.device_kind,
        sequence_numbers={r: res.get("seq_delta") for r, res in reports.items()},
        timeout=process_group.collective_seconds(s.backend, getattr(s.cluster.spec, "collective_timeout", None)),
        rebuilt=rebuilt,
        released=released,
        stuck=report,
    )
    return s.last_error
