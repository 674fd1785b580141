"""Turn per-rank failure reports into one error a person can read.

Four engines failing the same way give one sentence naming the ranks, the error and the user's own
line — not four 30-frame tracebacks. Out-of-memory and collective timeouts get their own wording.
"""

from __future__ import annotations

from typing import Any

from jupyter_mgpu.cluster.local import describe_exit
from jupyter_mgpu.engine.execution import calls
from jupyter_mgpu.engine.rank_traceback import place
from jupyter_mgpu.errors import (
    CollectiveHangError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    DeviceOutOfMemoryError,
    EngineDiedError,
    MgpuError,
    RankError,
    rank_list,
)
from jupyter_mgpu.session.stack_tree import rank_words
from jupyter_mgpu.units import format_bytes

REBUILT_NOTE = (
    "the process group was rebuilt; tensors kept, in-flight collectives dropped; "
    "a DDP or FSDP model or a DeviceMesh made before holds the old group: make it again"
)
HELD_SAID = 1024**2  # a failure's kept frames holding less than this are not worth a sentence (mg.memory() has it)


def _where(info: dict[str, Any]) -> str:
    """Where the failure happened in the user's code: the deepest of their frames and, when that is in
    a helper, the line of the cell or script they ran that called it."""
    frames = info.get("frames") or []
    if not frames:
        return ""
    deepest = frames[-1]
    text = f" at {place(deepest)}"
    in_a_function = deepest.get("name") not in ("<module>", "<cell>")
    if not deepest.get("entry") or in_a_function:  # a helper, or a function of the cell: the line that called it
        callers = [f for f in frames[:-1] if f.get("entry")]
        if callers:
            text += f", called from {place(callers[-1])}"
    return text


def oom_message(rank: int, info: dict[str, Any], budget: int | None, kind: str) -> str:
    what = "device memory"
    limit = (
        f" (budget {format_bytes(budget)})"
        if budget and kind == "cpu"
        else (f" ({format_bytes(budget)})" if budget else "")
    )
    req = info.get("requested_bytes")
    doing = f"allocating {format_bytes(req)}" if req else f"running {info.get('op') or 'its code'}"
    return f"rank {rank} ran out of {what}{limit} while {doing}{_where(info)}"


def _left_waiting(ranks: list[int], released: list[int] | None, timeout: float | None) -> str:
    """``ranks 0, 2 were left waiting in a collective and released at once`` (or after the timeout)."""
    msg = f"{rank_list(ranks)} {'was' if len(ranks) == 1 else 'were'} left waiting in a collective"
    if released:
        return msg + " and released at once"
    return msg + (f" and released after the {timeout:.0f} s timeout" if timeout else " and timed out")


def _own_failure(report: dict[str, Any]) -> bool:
    """A rank's own error (its code raised, it ran out of memory): not a collective it was released from or
    timed out in, a mismatch it found, an interrupt or a debugger's ``q``."""
    return not (
        report.get("collective_failure")
        or report.get("interrupted")
        or report.get("debug_quit")
        or report.get("ename") == "CollectiveMismatchError"
    )


def _left_by_a_failure(
    failures: dict[int, dict[str, Any]], stuck: list[int], sequence_numbers: dict[int, int | None]
) -> bool:
    """Whether the ranks the hang watch found stuck wait in a collective that a rank which failed on its own
    never entered: that failure left them waiting, and is what the call reports. The hang watch can look
    before they are released on the failure's account (a loaded machine: a rank reached the collective only
    after its peers were released), and would say the failed rank "finished the cell without calling it"."""
    own = [sequence_numbers.get(r) for r in failures if _own_failure(failures[r])]
    entered = [sequence_numbers.get(r) for r in stuck]
    own_known = [n for n in own if n is not None]
    entered_known = [n for n in entered if n is not None]
    return bool(own_known and entered_known) and min(own_known) < max(entered_known)


def build_error(failures: dict[int, dict[str, Any]], *, rebuilt: bool = False, **details: Any) -> RankError:
    """One :class:`RankError` (or a subclass) describing every failed rank, saying if the group was rebuilt."""
    err = _build_error(failures, rebuilt=rebuilt, **details)
    if rebuilt and REBUILT_NOTE not in str(err):
        err = type(err)(f"{err}; {REBUILT_NOTE}", err.ranks, err.errors)
    held = held_note(failures)
    if held:
        err = type(err)(f"{err}; {held}", err.ranks, err.errors)
    tree = getattr(details.get("stuck"), "tree", "")
    if tree:  # under the sentence, as the ranks' tracebacks are under a failure's
        err = type(err)(f"{err}\n{tree}", err.ranks, err.errors)
    return err


def held_note(failures: dict[int, dict[str, Any]], call: str = "failed") -> str:
    """``rank 0 keeps 762.9 MiB in the failed call's frames for %mgpu_debug; %mgpu_debug --release frees
    them`` (ranks whose kept frames hold at least :data:`HELD_SAID` bytes), or ``""``; ``call`` says which
    call (``interrupted``, after the stop button)."""
    held = {r: int(f.get("held_bytes") or 0) for r, f in failures.items()}
    held = {r: n for r, n in held.items() if n >= HELD_SAID}
    if not held:
        return ""
    by_size: dict[int, list[int]] = {}
    for r in sorted(held):
        by_size.setdefault(held[r], []).append(r)
    parts = [
        f"{rank_list(ranks)} {'keeps' if len(ranks) == 1 else 'keep'} {format_bytes(n)}{' each' if len(ranks) > 1 else ''}"
        for n, ranks in by_size.items()
    ]
    return f"{' and '.join(parts)} in the {call} call's frames for %mgpu_debug; %mgpu_debug --release frees them"


def _build_error(
    failures: dict[int, dict[str, Any]],
    *,
    succeeded: list[int] | None = None,
    budgets: dict[int, int] | None = None,
    device_kind: str = "cpu",
    sequence_numbers: dict[int, int | None] | None = None,  # collectives entered during the call
    timeout: float | None = None,
    rebuilt: bool = False,
    released: list[int] | None = None,  # ranks released from a collective a failed rank never entered
    stuck: Any = None,  # session/hang_watch.py's Diagnosis, when the ranks were found stuck or mismatched
) -> RankError:
    budgets = budgets or {}
    failed = sorted(failures)
    if stuck is not None and _left_by_a_failure(failures, stuck.release, sequence_numbers or {}):
        released = sorted(set(released or ()) | set(stuck.release))  # the failure is said, they were left by it
    elif stuck is not None:
        cls = CollectiveMismatchError if stuck.kind == "mismatch" else CollectiveHangError
        return cls(f"{stuck.text}; {rank_words(stuck.release)} released at once", failed, failures)
    mismatched = [r for r in failed if failures[r].get("ename") == "CollectiveMismatchError"]
    if mismatched:
        msg = max((failures[r]["evalue"] for r in mismatched), key=len)  # the rank that saw the most calls
        waiting = [r for r in failed if failures[r].get("collective_failure")]
        if waiting:
            msg += f"; {_left_waiting(waiting, released, timeout)}"
        return CollectiveMismatchError(msg, failed, failures)
    oom = [r for r in failed if failures[r].get("oom")]
    if oom:
        r = oom[0]
        msg = oom_message(r, failures[r], budgets.get(r), device_kind)
        same = [x for x in oom if failures[x].get("requested_bytes") == failures[r].get("requested_bytes")]
        if len(same) > 1:
            msg = msg.replace(f"rank {r} ran", f"{rank_list(same)} ran", 1).replace(")", " each)", 1)
        others = [x for x in failed if x not in same]
        waiting = [x for x in others if failures[x].get("collective_failure")]
        if waiting:
            msg += f"; {_left_waiting(waiting, released, timeout)}"
        if set(others) - set(waiting):
            msg += f"; {rank_list(sorted(set(others) - set(waiting)))} failed too"
        return DeviceOutOfMemoryError(msg, failed, failures)
    timed = [r for r in failed if failures[r].get("collective_failure")]
    if timed and len(timed) == len(failed):
        missing = []
        if sequence_numbers:
            known = {r: s for r, s in sequence_numbers.items() if s is not None}
            if known:
                top = max(known.values())
                missing = sorted(r for r, s in known.items() if s < top)
        if not missing and succeeded:
            missing = sorted(succeeded)
        own = [failures[r]["timeout_s"] for r in timed if failures[r].get("timeout_s")]
        timeout = max(own) if own else timeout  # a script's own init_process_group(timeout=)
        after = f" after {timeout:.0f} s" if timeout else ""
        msg = f"a collective timed out{after} on {rank_list(timed)}"
        if not any(calls.says_timeout(failures[r].get("evalue") or "") for r in timed):  # gloo closed it, not a timeout
            said = (failures[timed[0]].get("evalue") or "").strip().splitlines()
            msg = f"a collective failed on {rank_list(timed)}: a connection to a peer closed"
            msg += f" ({said[0][:160]})" if said else ""
        if missing:
            msg += f": {rank_list(missing)} never joined it"
        msg += _where(failures[timed[0]])
        msg += f"; {REBUILT_NOTE}" if rebuilt else "; the process group may be unusable now, run %mgpu_init --restart"
        return CollectiveTimeoutError(msg, failed, failures)
    real = [r for r in failed if not failures[r].get("collective_failure")]
    if timed and real:
        # one rank failed on its own; the others were stuck waiting for it in a collective
        inner = _build_error({r: failures[r] for r in real}, succeeded=None, budgets=budgets, device_kind=device_kind)
        return type(inner)(f"{inner}; {_left_waiting(timed, released, timeout)}", failed, failures)
    quit_ = [r for r in failed if failures[r].get("debug_quit")]
    if quit_ and all(failures[r].get("debug_quit") or failures[r].get("interrupted") for r in failed):
        msg = f"debugging ended with q on {rank_list(quit_)}{_where(failures[quit_[0]])}"
        msg += ", and the code after that line did not run there"
        return RankError(msg + (f" ({rank_list(succeeded)} finished)" if succeeded else ""), failed, failures)
    if all(failures[r].get("interrupted") for r in failed):
        return RankError(f"interrupted on {rank_list(failed)}", failed, failures)
    groups: dict[tuple[str, str], list[int]] = {}
    for r in failed:
        groups.setdefault((failures[r]["ename"], failures[r]["evalue"]), []).append(r)
    parts = []
    for (ename, evalue), ranks in groups.items():
        text = evalue.strip().splitlines()[0] if evalue.strip() else ""
        parts.append(f"{ename} on {rank_list(ranks)}{': ' + text if text else ''}{_where(failures[ranks[0]])}")
    msg = "; ".join(parts)
    if succeeded:
        msg += f" ({rank_list(succeeded)} succeeded)"
    return RankError(msg, failed, failures)


def transport_error(text: str, label: str) -> MgpuError:
    """What went wrong moving a call or its result between the notebook and the ranks."""
    if "ModuleNotFoundError" in text or "No module named" in text:
        return MgpuError(
            f"{label}: the ranks cannot import what it needs ({text.split(']')[-1].strip()}); "
            "define the function in the notebook or make its module importable on the engines"
        )
    if "pickl" in text.lower() or "serializ" in text.lower():
        return MgpuError(
            f"{label}: a value could not be sent between the notebook and the ranks ({text}); "
            "return plain data or tensors, and define functions at top level"
        )
    return MgpuError(f"{label} failed in ipyparallel: {text}")


def transport_failure(exc: Exception, label: str, exits: dict[int, dict[str, Any]]) -> MgpuError:
    """The error for an ipyparallel-level failure of a call: a dead rank first (``exits``), else what broke."""
    if exits:
        r = min(exits)
        return EngineDiedError(describe_exit(r, exits[r]), ranks=sorted(exits))
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return transport_error(text, label)
