"""Torch's numbering for the Python-level watch (``engine/watch/collective_numbers.py``) and the check of a
peer's C++-issued collective before joining (``engine/watch/peer_collectives.py``), without engines: a fake
process group, a real host table in a temporary directory, a fake peer guard."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.watch import collective_numbers, peer_collectives
from jupyter_mgpu.engine.watch.collective_table import CollectiveTable


class FakeGroup:
    """What the numbering reads of a process group: the backend's count and its name."""

    def __init__(self, done: int, backend: str = "gloo", name: str = "0") -> None:
        self.done, self.backend, self.group_name = done, backend, name

    def _get_sequence_number_for_group(self) -> int:
        return self.done

    def _get_backend_name(self) -> str:
        return self.backend


@pytest.fixture(autouse=True)
def _fresh_numbers(monkeypatch):
    for name in ("_point_to_point", "_counted", "_next_after", "_gloo", "_clean"):
        monkeypatch.setattr(collective_numbers, name, {})
    monkeypatch.setattr(collective_numbers, "unseen", set())


def test_gloo_numbers_leave_out_this_process_send_and_recv_as_torch_recorder_does():
    pg, key = FakeGroup(5), (0, "0")
    assert collective_numbers.next_number(pg, key) == 6
    collective_numbers.note_point_to_point(key)
    collective_numbers.note_point_to_point(key)
    assert collective_numbers.next_number(pg, key) == 4  # 5 operations, 2 of them send/recv: 3 collectives
    assert collective_numbers.next_number(FakeGroup(5, "nccl"), (0, "1")) == 6  # nccl numbers collectives only


def test_collectives_the_watch_did_not_see_mark_the_group():
    pg, key = FakeGroup(0), (0, "0")
    assert collective_numbers.begin(pg, key) == 1 and key not in collective_numbers.unseen
    pg.done = 1
    collective_numbers.end(pg, key)
    assert collective_numbers.begin(pg, key) == 2 and key not in collective_numbers.unseen
    pg.done = 5  # the call ran, then torch ran 3 of its own (DDP's set-up)
    assert collective_numbers.begin(pg, key) == 6 and key in collective_numbers.unseen
    other = (0, "1")  # a group's first watched call after torch's own: marked too
    assert collective_numbers.begin(FakeGroup(3, name="1"), other) == 4 and other in collective_numbers.unseen


def test_a_call_that_raised_before_its_backend_ran_it_is_counted_as_unrun(monkeypatch):
    """Its record stays in the table under the number the rank's next collective takes again: the call
    reports it and the kernel rebuilds the group (session/recovery.py), whose generation no old record has."""
    from jupyter_mgpu.session.recovery import GroupRecovery

    st = SimpleNamespace(unrun_collectives=0)
    monkeypatch.setattr(rank_state, "STATE", st)
    pg, key = FakeGroup(4), (0, "0")
    info = {"gen": 0, "g": "0", "n": collective_numbers.begin(pg, key)}
    pg.done = 5  # it ran, then raised (a released collective): not unrun
    collective_numbers.raised(pg, info)
    collective_numbers.raised(None, None)  # one the watch could not read
    assert st.unrun_collectives == 0
    info["n"] = collective_numbers.begin(pg, key)
    collective_numbers.raised(pg, info)  # torch's own check of the arguments raised: the number did not move
    assert st.unrun_collectives == 1
    recovery = GroupRecovery("", 2, 1.0, lambda *a: None, lambda reason: None)
    every_rank_found_it = {
        r: {"ok": False, "ename": "CollectiveMismatchError", "seq_delta": 0, "unrun": 1} for r in (0, 1)
    }
    assert recovery.needs_rebuild(every_rank_found_it)  # no sequence number moved, yet the records are stale
    assert not recovery.needs_rebuild({r: {"ok": False, "ename": "NameError", "seq_delta": 0} for r in (0, 1)})


def test_the_counting_wrapper_notes_send_and_recv_on_their_group(monkeypatch):
    monkeypatch.setattr(rank_state, "STATE", SimpleNamespace(pg_generation=3))
    calls = []
    isend = collective_numbers.counting(lambda tensor, dst=None, group=None: calls.append(dst))
    send = collective_numbers.counting(lambda tensor, dst=None, group=None: isend(tensor, dst, group))
    isend(torch.ones(1), 1, FakeGroup(0, name="7"))
    send(torch.ones(1), dst=1, group=FakeGroup(0, name="7"))  # torch's send runs isend: one operation
    assert calls == [1, 1] and collective_numbers._point_to_point == {(3, "7"): 2}


BUCKET = {"op": "all_reduce", "inputs": [["Float", [20]]], "call": "all_reduce float32[20] issued by torch"}


@pytest.mark.parametrize(
    ("op", "tensor", "in_backward", "theirs", "their_backward", "agree"),
    [
        ("all_reduce", torch.ones(4), False, BUCKET, False, False),  # another size: gloo would abort a process
        ("all_reduce", torch.ones(20), False, BUCKET, False, True),
        ("all_reduce", torch.ones(20), False, BUCKET, True, False),  # DDP's bucket against a call outside backward
        ("all_reduce", torch.ones(20), True, BUCKET, True, True),
        ("all_reduce", torch.ones(20, dtype=torch.float64), False, BUCKET, False, False),
        ("broadcast", torch.ones(20), False, BUCKET, False, False),
        ("all_gather_into_tensor", torch.ones(4), False, {"op": "all_gather", "inputs": []}, False, True),
        ("all_gather_object", None, False, {"op": "all_gather", "inputs": [["Long", [1]]]}, False, True),
    ],
)
def test_a_peers_recorded_collective_agrees_by_op_dtype_and_shape(
    op, tensor, in_backward, theirs, their_backward, agree
):
    assert peer_collectives.agrees(op, tensor, in_backward, theirs, their_backward) is agree


def _mine(size: int = 4) -> dict:
    t = torch.ones(size)
    return {
        "op": "all_reduce",
        "tensor": t,
        "backward": False,
        "fp": f"all_reduce|float32[{size}]",
        "call": "c",
        "line": "l",
    }


@pytest.fixture
def table(tmp_path):
    t = CollectiveTable(tmp_path, 2)
    yield t
    t.close()


def test_a_peer_in_torchs_bucket_at_the_number_is_named_with_its_line(table, monkeypatch):
    asked = []

    def ask(rank, body):
        asked.append((rank, body))
        return {"count": 7, "entry": BUCKET, "line": "line 4 of the cell", "backward": True}

    monkeypatch.setattr(peer_collectives, "ask_peer", ask)
    calls = peer_collectives.differing(table, 0, ("0", 7, 0), [0, 1], _mine(), wait=True)
    assert calls == {
        0: {"call": "c", "line": "l"},
        1: {"call": f"{BUCKET['call']} ({peer_collectives.BUCKET})", "line": "line 4 of the cell"},
    }
    assert asked == [(1, '{"group": "0", "gen": 0, "n": 7}')]


def test_a_peers_own_python_call_is_read_from_the_table_without_asking(table, monkeypatch):
    monkeypatch.setattr(peer_collectives, "ask_peer", lambda rank, body: pytest.fail("asked"))
    mine = _mine()
    table.write(1, "0", 7, 0, mine["fp"], "all_reduce float32[4]", "line 2 of the cell")
    assert peer_collectives.differing(table, 0, ("0", 7, 0), [0, 1], mine, wait=True) is None
    table.write(1, "0", 8, 0, "all_reduce|float32[5]", "all_reduce float32[5]", "line 3 of the cell")
    calls = peer_collectives.differing(table, 0, ("0", 8, 0), [0, 1], mine, wait=True)
    assert calls is not None and calls[1] == {"call": "all_reduce float32[5]", "line": "line 3 of the cell"}


def test_a_peer_not_there_yet_is_awaited_but_an_async_call_looks_once(table, monkeypatch):
    replies = iter([{"count": 5}, {"count": 5}, {"count": 7, "entry": BUCKET, "line": "x", "backward": False}])
    monkeypatch.setattr(peer_collectives, "ask_peer", lambda rank, body: next(replies))
    calls = peer_collectives.differing(table, 0, ("0", 7, 0), [0, 1], _mine(), wait=True)
    assert calls is not None and calls[1]["call"] == BUCKET["call"]  # asked three times, the third found it
    monkeypatch.setattr(peer_collectives, "ask_peer", lambda rank, body: {"count": 5})
    assert peer_collectives.differing(table, 0, ("0", 9, 0), [0, 1], _mine(), wait=False) is None


def test_a_peer_on_another_host_is_not_awaited_and_a_release_ends_the_wait(table, monkeypatch):
    monkeypatch.setattr(peer_collectives, "ask_peer", lambda rank, body: None)  # no guard socket here
    start = time.monotonic()
    assert peer_collectives.differing(table, 0, ("0", 7, 0), [0, 1], _mine(), wait=True) is None
    assert time.monotonic() - start < peer_collectives.WAIT_S
    released = iter([0, 0, 1])
    monkeypatch.setattr(peer_collectives, "ask_peer", lambda rank, body: {"count": 5})
    monkeypatch.setattr(peer_collectives, "releases", lambda: next(released, 1))
    with pytest.raises(RuntimeError, match="Connection closed by peer: rank 0 was released"):
        peer_collectives.differing(table, 0, ("0", 7, 0), [0, 1], _mine(), wait=True)


def test_peers_that_call_through_python_eight_times_in_a_row_are_no_longer_asked():
    pg, key = FakeGroup(3), (0, "0")
    collective_numbers.begin(pg, key)  # torch ran 3 collectives first: the peers are asked
    assert key in collective_numbers.unseen
    for _ in range(collective_numbers.CLEAN_RUN - 1):
        collective_numbers.checked(key, clean=True)
    collective_numbers.checked(key, clean=False)  # one peer's record was late: the run starts again
    for _ in range(collective_numbers.CLEAN_RUN - 1):
        collective_numbers.checked(key, clean=True)
    assert key in collective_numbers.unseen
    collective_numbers.checked(key, clean=True)
    assert key not in collective_numbers.unseen
    pg.done = 20  # torch runs collectives again (a DDP step): asked again
    collective_numbers.begin(pg, key)
    assert key in collective_numbers.unseen
