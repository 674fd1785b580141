"""Each collective's number in its group, as torch numbers it, so that one rank's Python call and another
rank's collective issued by torch from C++ (DDP's gradient bucket, FSDP2, DTensor) at the same point of
the group carry the same number and are compared.

c10d's flight recorder numbers every collective of a group (``collective_seq_id``: 1, 2, ...), whoever
issued it; point-to-point operations are not numbered there. The backend's own sequence number
(``_get_sequence_number_for_group``, a fraction of a microsecond) counts what the group ran; gloo counts
``send``/``recv`` there too, and only on the two ranks involved, so the ones this process runs are counted
here (:func:`note_point_to_point`, called by the wrapped ``send``, ``recv``, ``isend``, ``irecv``) and
taken off. Where the backend has no such number the Python-level watch counts its own calls instead.

The collectives a group ran that the Python-level watch did not see are noted per group (:func:`begin`):
once torch issues collectives on a group, a peer with no record of a call may be inside one of torch's,
and ``engine/watch/peer_collectives.py`` asks it before this rank joins — until the peers have called
through Python :data:`CLEAN_RUN` times in a row (their records there at once), since a peer's record that is
late costs this rank a wait on every call.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from jupyter_mgpu.engine import state as rank_state

Key = tuple[int, str]  # the process group's generation and its name

_point_to_point: dict[Key, int] = {}  # send/recv this process ran on the group (gloo numbers them)
_counted: dict[Key, int] = {}  # where the backend has no number: the Python-level watch's own count
_next_after: dict[Key, int] = {}  # the number the group's next collective had when a watched call ended
unseen: set[Key] = set()  # groups that ran collectives the Python-level watch did not see
_clean: dict[Key, int] = {}  # checked calls in a row whose peers all called through Python
CLEAN_RUN = 8
_inside = threading.local()  # p2p: inside a counted send or recv (on this thread)


def _backend_number(pg: Any) -> int | None:
    """How many operations the group's backend has run (collectives, and for gloo also send/recv)."""
    try:
        return int(pg._get_sequence_number_for_group())
    except Exception:  # a backend without one (fake, custom): the watch counts its own calls
        return None


_gloo: dict[Key, bool] = {}


def _counts_point_to_point(pg: Any, key: Key) -> bool:
    if key not in _gloo:
        try:
            _gloo[key] = str(pg._get_backend_name()) == "gloo"
        except Exception:
            _gloo[key] = False
    return _gloo[key]


def next_number(pg: Any, key: Key) -> int:
    """The number the group's next collective gets: torch's ``collective_seq_id`` for it."""
    done = _backend_number(pg)
    if done is None:
        return _counted.get(key, 0) + 1
    if _counts_point_to_point(pg, key):
        done -= _point_to_point.get(key, 0)
    return done + 1


def begin(pg: Any, key: Key) -> int:
    """Number this rank's watched call on the group, noting whether collectives ran since its last one that
    the watch did not see (a group starts at 1: the engine's own set-up runs none)."""
    n = next_number(pg, key)
    if n != _next_after.get(key, 1):
        unseen.add(key)
        _clean[key] = 0
    _counted[key] = _counted.get(key, 0) + 1
    return n


def checked(key: Key, clean: bool) -> None:
    """A call on the group compared with its peers before joining; ``clean``: every peer's own Python record
    was there at once. After :data:`CLEAN_RUN` clean calls in a row the peers are no longer asked (they call
    through Python again), until collectives the watch did not see run on the group once more."""
    _clean[key] = _clean.get(key, 0) + 1 if clean else 0
    if _clean[key] >= CLEAN_RUN:
        unseen.discard(key)


def end(pg: Any, key: Key) -> None:
    """A watched call on the group ended (its nested collectives, as ``all_gather_object`` runs, included)."""
    _next_after[key] = next_number(pg, key)


def raised(pg: Any, info: dict[str, Any] | None) -> None:
    """A watched call raised (``info``: its group ``g``, generation ``gen`` and number ``n``, None where the
    watch could not read it): if the number is still the group's next one, the backend never ran it."""
    if pg is not None and info is not None and next_number(pg, (info["gen"], info["g"])) == info["n"]:
        left_unrun()


def left_unrun() -> None:
    """A call numbered and written to the host's table raised before the group's backend ran it (a mismatch
    this rank found, torch's own check of the arguments): its record stays in the table under the number
    this rank's next collective takes again, and a peer's next call, there before this rank's, would be
    compared with it (a wrong mismatch). The call reports it (``unrun``) and the kernel rebuilds the group
    (``session/recovery.py``): no record of the old generation matches a call of the new one."""
    st = rank_state.STATE
    if st is not None:
        st.unrun_collectives += 1


def note_point_to_point(key: Key) -> None:
    """This process ran a send or recv on the group."""
    _point_to_point[key] = _point_to_point.get(key, 0) + 1


COUNTED = ("isend", "irecv")  # not watched, but numbered by gloo like send and recv: counted


def counting(original: Any) -> Any:
    """``original`` (a send or recv), noting on which group this process ran it, from any thread; once, where
    one runs another (torch's ``send`` runs ``isend``)."""

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "p2p", False):
            return original(*args, **kwargs)
        try:
            import torch.distributed as dist

            group = kwargs["group"] if "group" in kwargs else args[2] if len(args) > 2 else None
            pg = group if group is not None else dist.GroupMember.WORLD
            st = rank_state.STATE
            if st is not None and pg is not None:
                note_point_to_point((st.pg_generation, str(pg.group_name)))
        except Exception:  # not in a group yet: torch raises its own error
            pass
        _inside.p2p = True
        try:
            return original(*args, **kwargs)
        finally:
            _inside.p2p = False

    return counted
