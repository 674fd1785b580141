"""What the user's own ``init_process_group`` / ``destroy_process_group`` did during a call, said once.

The rank side (``engine/group/user_process_group.py``) notes it per call; every rank notes the same, so the
notebook prints one informational line for the call, on stdout (not as an error).
"""

from __future__ import annotations

from typing import Any


def line(notes: dict[str, str]) -> str | None:
    """The one line for the union of the ranks' notes (``init``, ``destroy``, ``timeout``), or None."""
    parts = []
    if "init" in notes:
        parts.append(f"init_process_group() joined the session's group ({notes['init']})")
    if "timeout" in notes:
        parts.append(f"timeout={notes['timeout']} s for this call")
    if "destroy" in notes:
        parts.append(
            "destroy_process_group() kept it"
            if parts
            else "destroy_process_group() kept the session's group for the next cells"
        )
    return "mgpu: " + "; ".join(parts) if parts else None


def say(results: list[dict[str, Any]]) -> None:
    """Print the line for a call's per-rank reports, if any rank noted something."""
    notes: dict[str, str] = {}
    for res in results:
        notes.update(res.get("group_notes") or {})
    text = line(notes)
    if text:
        print(text)
