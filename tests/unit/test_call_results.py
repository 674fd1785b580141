"""What the ranks' reports of one call become (``session/call_results.py``): values in rank order, or one error."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_mgpu.errors import CollectiveHangError, DeviceOutOfMemoryError, MgpuError, RankError
from jupyter_mgpu.session import call_results as cr
from jupyter_mgpu.session.hang_watch import Diagnosis
from jupyter_mgpu.session.rank_errors import REBUILT_NOTE

GIB = 1 << 30


class Recovery:
    """A session's recovery, recording what it was asked (``session/recovery.py`` has the real one)."""

    def __init__(self, rebuilt: bool | Exception = False, released: set[int] | None = None) -> None:
        self.rebuilt, self.released = rebuilt, set(released or ())
        self.asked: list[dict[int, dict[str, Any]]] = []

    def after_failure(self, reports: dict[int, dict[str, Any]]) -> bool:
        self.asked.append(reports)
        if isinstance(self.rebuilt, Exception):
            raise self.rebuilt
        return self.rebuilt


class HangWatch:
    def __init__(self, report: Diagnosis | None = None) -> None:
        self.report = report

    def take_report(self) -> Diagnosis | None:
        report, self.report = self.report, None
        return report


def _session(n: int = 4, **kw: Any) -> SimpleNamespace:
    """The parts of a ``Session`` that ``call_results`` reads."""
    return SimpleNamespace(
        engine_seconds=0.0,
        said_both_sides=set(),
        recovery=kw.pop("recovery", Recovery()),
        hang_watch=kw.pop("hang_watch", HangWatch()),
        devices=[SimpleNamespace(total_memory=GIB) for _ in range(n)],
        device_kind="cpu",
        backend="gloo",
        cluster=SimpleNamespace(spec=SimpleNamespace(collective_timeout=60.0)),
        last_error=None,
        **kw,
    )


def ok(value: Any, seconds: float = 0.01, **kw: Any) -> dict[str, Any]:
    return {"ok": True, "value": value, "seconds": seconds, **kw}


def failed(ename: str = "ValueError", evalue: str = "bad input", **kw: Any) -> dict[str, Any]:
    """A failure report as ``engine/execution/calls.failure`` makes one (no frames of the user's)."""
    info = {"ok": False, "ename": ename, "evalue": evalue, "frames": [], "oom": False, "requested_bytes": None}
    info.update(interrupted=False, op=None, traceback=f"{ename}: {evalue}", seconds=0.02)
    return {**info, **kw}


@pytest.mark.parametrize("ranks", [[0], [0, 1, 2, 3], [3, 1], [2, 0, 1]])
def test_values_come_back_in_the_order_of_the_ranks_asked(ranks):
    s = _session()
    values = cr.results(s, [ok({"rank": r, "square": r * r}) for r in ranks], ranks)
    assert values == [{"rank": r, "square": r * r} for r in ranks]
    assert s.last_error is None and s.recovery.asked == []


def test_the_slowest_rank_sets_the_engine_time_of_a_call():
    s = _session()
    cr.results(s, [ok(1, 0.5), ok(2, 2.0), ok(3, 1.0)], [0, 1, 2])
    cr.results(s, [ok(1, 0.25), ok(2)], [0, 1])
    assert s.engine_seconds == pytest.approx(2.25)
    cr.results(s, [{"ok": True, "value": None}], [0])  # a report without a time counts nothing
    assert s.engine_seconds == pytest.approx(2.25)


def test_names_defined_on_both_sides_are_said_once_per_function(capsys):
    s = _session()
    reports = [ok(0, shadowed=[("train", ["lr"])]), ok(1, shadowed=[("train", ["model", "lr"])])]
    cr.results(s, reports, [0, 1])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train()" in err and "lr and model" in err  # the union, in one line
    cr.results(s, reports, [0, 1])
    assert capsys.readouterr().err == ""


def test_the_process_groups_notes_are_one_line_on_stdout(capsys):
    s = _session()
    notes = {"init": "gloo", "destroy": "kept"}
    cr.results(s, [ok(0, group_notes=notes), ok(1, group_notes=notes)], [0, 1])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "init_process_group()" in out and "destroy_process_group()" in out


def test_one_error_names_every_failed_rank_and_the_ones_that_succeeded():
    s = _session()
    ranks = [0, 1, 2, 3]
    reports = [ok(0), failed(), ok(2), failed()]
    with pytest.raises(RankError) as err:
        cr.results(s, reports, ranks)
    e = err.value
    assert e.ranks == [1, 3] and sorted(e.errors) == [1, 3]
    assert "ValueError on ranks 1, 3: bad input" in str(e) and "ranks 0, 2 succeeded" in str(e)
    assert s.last_error is e
    assert s.recovery.asked == [dict(zip(ranks, reports))]  # recovery sees every rank's report, by rank


def test_failures_are_keyed_by_rank_not_by_position():
    s = _session()
    with pytest.raises(RankError) as err:
        cr.results(s, [ok(None), failed("KeyError", "'w'")], [3, 2])
    assert err.value.ranks == [2] and "KeyError on rank 2" in str(err.value) and "rank 3 succeeded" in str(err.value)


@pytest.mark.parametrize("rebuilt", [True, False, RuntimeError("the group could not be rebuilt")])
def test_the_error_says_whether_the_process_group_was_rebuilt(rebuilt):
    s = _session(recovery=Recovery(rebuilt))
    with pytest.raises(MgpuError) as err:
        cr.results(s, [failed(), failed()], [0, 1])
    assert (REBUILT_NOTE in str(err.value)) is (rebuilt is True)
    assert s.last_error is err.value


def test_out_of_memory_names_the_rank_and_its_budget():
    s = _session()
    oom = failed("OutOfMemoryError", "DefaultCPUAllocator: not enough memory", oom=True, requested_bytes=3 * GIB)
    with pytest.raises(DeviceOutOfMemoryError) as err:
        cr.results(s, [ok(0), oom], [0, 1])
    assert "rank 1 ran out of device memory (budget 1" in str(err.value) and "allocating 3" in str(err.value)


def test_ranks_found_stuck_give_the_watchers_words():
    stuck = Diagnosis("hang", [0, 1], "ranks 0, 1 wait in all_reduce #3, rank 2 never called it")
    s = _session(hang_watch=HangWatch(stuck))
    reports = [failed("RuntimeError", "released", collective_failure=True)] * 2 + [ok(2)]
    with pytest.raises(CollectiveHangError) as err:
        cr.results(s, reports, [0, 1, 2])
    assert str(err.value).startswith(stuck.text) and "released at once" in str(err.value)
    assert s.hang_watch.report is None  # taken: the next call starts clean


def test_a_failed_call_still_says_what_the_ranks_noted(capsys):
    s = _session()
    with pytest.raises(RankError):
        cr.results(s, [failed(shadowed=[("f", ["x"])], group_notes={"timeout": "5"})], [0])
    said = capsys.readouterr()
    assert "x, defined both" in said.err and "timeout=5 s" in said.out
