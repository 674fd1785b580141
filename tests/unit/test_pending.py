"""A call started with ``block=False`` (``session/pending.py``), without engines: which ranks' reports came
back, which ranks are still outstanding, and how a pending result says where it stands."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from jupyter_mgpu.session.pending import PendingResult, finished_results, pending_ranks


def _future(result: Any = None, error: BaseException | None = None, done: bool = True) -> Future:
    f: Future = Future()
    if not done:
        return f
    if error is not None:
        f.set_exception(error)
    else:
        f.set_result(result)
    return f


def test_finished_results_are_the_reports_that_came_back():
    cancelled = _future(done=False)
    cancelled.cancel()
    children = [
        _future({"ok": True, "value": 1}),
        _future(done=False),
        _future(error=RuntimeError("transport")),
        cancelled,
        _future({"ok": False, "error": "boom"}),
    ]
    ar = SimpleNamespace(_children=children)
    ranks = [4, 5, 6, 7, 8]
    assert finished_results(ar, ranks) == {4: {"ok": True, "value": 1}, 8: {"ok": False, "error": "boom"}}


def test_no_futures_known_means_no_reports():
    assert finished_results(SimpleNamespace(), [0, 1]) == {}
    assert finished_results(SimpleNamespace(_children=None), [0, 1]) == {}


def test_pending_ranks_are_those_whose_messages_are_outstanding():
    ar = SimpleNamespace(msg_ids=["m0", "m1", "m2", "m3"])
    client = SimpleNamespace(outstanding={"m1", "m3", "other"})
    assert pending_ranks(client, ar, [2, 3, 5, 7]) == [3, 7]


def test_when_no_rank_is_known_to_be_outstanding_all_of_them_are():
    ar = SimpleNamespace(msg_ids=["m0", "m1"])
    assert pending_ranks(SimpleNamespace(outstanding=set()), ar, [0, 1]) == [0, 1]


class Call:
    """An AsyncResult's ``ready`` as the notebook sees it."""

    def __init__(self) -> None:
        self.done = False

    def ready(self) -> bool:
        return self.done


def test_a_pending_result_says_where_it_stands_and_collects_through_its_session():
    collected: list[tuple] = []
    session = SimpleNamespace(_collect=lambda *args: collected.append(args) or ["a", "b"])
    call, relay = Call(), object()
    p = PendingResult(session, call, [3, 1], "%%mgpu", relay)
    assert not p.ready()
    assert repr(p) == "<PendingResult %%mgpu on ranks 1, 3: running>"
    call.done = True
    assert p.ready()
    assert repr(p) == "<PendingResult %%mgpu on ranks 1, 3: ready>"
    assert p.get(timeout=2.5) == ["a", "b"]
    assert collected == [(call, [3, 1], "%%mgpu", 2.5, relay)]
    assert repr(PendingResult(session, call, [2], "mg.bench", None)) == "<PendingResult mg.bench on rank 2: ready>"
