"""Which ranks the stop button signals again (``session/recovery.py``; the whole interrupt with real engines:
``tests/faults/test_direct_channel.py``, ``tests/faults/test_interrupt_recovery.py``)."""

from __future__ import annotations

from jupyter_mgpu.session.recovery import _begun_after


def test_only_a_call_begun_after_the_stop_is_signalled_again():
    """A rank between two calls when the stop came ignored it (ipykernel's SIGINT between tasks): the call it
    began next is signalled again; a rank still in the call the signal reached (a long C++ op) is not."""
    idle, working = {"in_call": False, "begun": 4}, {"in_call": True, "begun": 4}
    assert _begun_after(idle, {"in_call": True, "begun": 5})  # between calls at the stop: the next one
    assert _begun_after(working, {"in_call": True, "begun": 5})  # its call ended, another began
    assert not _begun_after(working, {"in_call": True, "begun": 4})  # the call the signal reached
    assert not _begun_after(working, {"in_call": False, "begun": 4})  # gone idle: nothing to stop
    assert not _begun_after(None, {"in_call": True, "begun": 9})  # it did not answer before: unknown


def test_a_failed_rank_comes_before_a_hang_for_a_moment(monkeypatch):
    """Ranks left waiting by a rank that failed are released by the recovery, and the call reports that failure;
    the hang watch waits meanwhile (on a busy machine they may have waited past --hang-after before the failed
    rank's report came: notebook 11 once said 'the ranks are stuck' instead of rank 2's ZeroDivisionError)."""
    from types import SimpleNamespace

    from jupyter_mgpu.session import recovery as rec

    clock = [100.0]
    monkeypatch.setattr(rec, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    r = rec.GroupRecovery("/nonexistent", 4, 30.0, run_on_all=None, mark_broken=lambda why: None)
    monkeypatch.setattr(r, "_ask", lambda ranks, command: dict.fromkeys(ranks))
    r.start_call()
    assert not r.failure_first()
    r.watch({2: {"ok": False, "seq_delta": 0}}, [0, 1, 3])  # rank 2 failed, the others still run
    assert r.failure_first()
    clock[0] += rec.FAILURE_FIRST - 0.01
    assert r.failure_first()
    clock[0] += 0.02  # not released by then (nothing to count on): the hang watch looks again
    assert not r.failure_first()
    r.start_call()
    assert not r.failure_first()
    r.watch({2: {"ok": True}}, [0, 1, 3])  # a rank that finished well: the hang watch looks as ever
    assert not r.failure_first()
