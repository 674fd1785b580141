"""The output relay: ranks' lines show live, in rank order when they arrive together, and stay where they were shown."""

from __future__ import annotations

from types import SimpleNamespace

import IPython.display
from displays import recorded

from jupyter_mgpu.session.output_relay import SETTLE_S, OutputRelay


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _relay(live: bool = True) -> tuple[OutputRelay, list[dict], Clock]:
    """A relay of 4 ranks on a clock the test moves; ``live``: in a notebook front end."""
    md = [{"stdout": ""} for _ in range(4)]
    relay = OutputRelay(SimpleNamespace(_metadata=md), [0, 1, 2, 3], live=live)
    relay.clock = clock = Clock()
    return relay, md, clock


def test_lines_that_arrive_together_show_in_rank_order_and_never_move(capsys, monkeypatch):
    cleared = []
    monkeypatch.setattr(IPython.display, "clear_output", lambda wait=False: cleared.append(wait))
    relay, md, clock = _relay()
    for rank in (3, 2, 0, 1):  # the order the issue saw, within a few milliseconds
        md[rank]["stdout"] += f"hello from {rank}\n"
        relay.poll()
        clock.now += 0.01
    assert capsys.readouterr().out == ""  # they wait to settle
    clock.now += SETTLE_S
    relay.poll()
    assert capsys.readouterr().out.splitlines() == [f"[rank {r}] hello from {r}" for r in range(4)]
    md[3]["stdout"] += "bye from 3\n"
    relay.flush()
    assert capsys.readouterr().out.splitlines() == ["[rank 3] bye from 3"]  # after what was shown, nothing again
    assert cleared == []  # the output is never cleared: nothing moves when the cell ends


def test_lines_far_apart_show_in_the_order_they_came_within_the_settling_time(capsys):
    relay, md, clock = _relay(live=False)
    md[1]["stdout"] += "first\n"
    relay.poll()
    clock.now += SETTLE_S + 0.01
    relay.poll()
    assert capsys.readouterr().out.splitlines() == ["[rank 1] first"]  # shown within the settling time
    md[0]["stdout"] += "later\n"
    relay.flush()
    assert capsys.readouterr().out.splitlines() == ["[rank 0] later"]


def test_a_progress_bar_redraws_live_per_rank_and_ends_where_it_was_drawn(capsys, monkeypatch):
    shown = recorded(monkeypatch)
    md = [{"stderr": ""}, {"stderr": ""}]
    relay = OutputRelay(SimpleNamespace(_metadata=md), [0, 1], live=True)
    relay.clock = clock = Clock()
    md[0]["stderr"] = "\r 10%|#"
    md[1]["stderr"] = "\r 50%|#####"
    relay.poll()
    assert shown[-1] == "[rank 0]  10%|#\n[rank 1]  50%|#####"  # one live line per rank
    md[0]["stderr"] = "\r 60%|######"  # ipyparallel keeps only the last redraw of a line
    relay.poll()
    assert shown[-1] == "[rank 0]  60%|######\n[rank 1]  50%|#####"
    md[0]["stderr"] = "100%|##########|\nafter\n"
    md[1]["stderr"] = "\r 50%|#####\r100%|##########|\n"
    relay.poll()
    # the bars that ended stay in the live area as drawn (not moved into the stderr stream below)
    assert shown[-1] == "[rank 0] 100%|##########|\n[rank 1] 100%|##########|"
    clock.now += SETTLE_S
    relay.poll()
    assert capsys.readouterr().err.splitlines() == ["[rank 0] after"]
    md[0]["stderr"] += "more\n"
    relay.flush()
    assert capsys.readouterr().err == "[rank 0] more\n"  # the count of relayed lines survives the rewrite
    assert shown[-1] == "[rank 0] 100%|##########|\n[rank 1] 100%|##########|"


def test_a_line_flushed_in_parts_on_a_busy_machine_shows_whole_and_never_joins_another_rank_s(capsys, monkeypatch):
    """print() writes the text and its newline apart; under load a flush falls between them."""
    shown = recorded(monkeypatch)
    relay, md, clock = _relay()
    md[1]["stdout"] = "1 4 cpu tensor([6., 6.])"
    md[2]["stdout"] = "2 4 cpu tensor([6., 6.])\n"
    relay.poll()
    assert shown[-1] == "[rank 1] 1 4 cpu tensor([6., 6.])"  # being written: in the live area until its newline
    md[1]["stdout"] += "\n"
    clock.now += SETTLE_S
    relay.poll()
    assert capsys.readouterr().out.splitlines() == [
        "[rank 1] 1 4 cpu tensor([6., 6.])",
        "[rank 2] 2 4 cpu tensor([6., 6.])",
    ]
    assert shown[-1] == ""  # and gone from the live area once whole
    relay.flush()
    assert capsys.readouterr().out == ""


def test_a_new_line_begun_in_the_poll_that_ended_the_last_one_is_a_line_not_a_bar_s_redraw(capsys, monkeypatch):
    """Under load a poll sees a line without its newline, the next its newline and the start of another line:
    the new tail is a new line (seen in a fresh clone's loaded test: it was taken for a bar and left the cell)."""
    recorded(monkeypatch)
    relay, md, clock = _relay()
    md[1]["stdout"] = "1 29 cpu tensor([4., 4.])"
    relay.poll()
    md[1]["stdout"] += "\n1 written"
    clock.now += SETTLE_S
    relay.poll()
    md[1]["stdout"] += " in parts\n"
    clock.now += SETTLE_S
    relay.flush()
    assert capsys.readouterr().out.splitlines() == ["[rank 1] 1 29 cpu tensor([4., 4.])", "[rank 1] 1 written in parts"]


def test_a_bar_whose_redraws_arrive_without_their_carriage_return_still_stays_where_it_was_drawn(capsys, monkeypatch):
    """ipyparallel keeps only a line's last redraw, \r dropped: a tail replaced (not grown) is a bar too."""
    shown = recorded(monkeypatch)
    relay, md, clock = _relay()
    md[0]["stdout"] = "  3%|#"
    relay.poll()
    md[0]["stdout"] = " 40%|####"  # replaced, not grown
    relay.poll()
    md[0]["stdout"] = "100%|##########|\n"
    clock.now += SETTLE_S
    relay.flush()
    assert capsys.readouterr().out == ""  # not moved into the stream below
    assert shown[-1] == "[rank 0] 100%|##########|"


def test_show_folds_the_other_ranks_output_into_one_block(capsys, monkeypatch):
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda bundle, raw=False, **kw: shown.append(bundle))
    md = [{"stdout": ""} for _ in range(4)]
    relay = OutputRelay(SimpleNamespace(_metadata=md), [0, 1, 2, 3], show=[0], live=False)
    for rank in range(4):
        md[rank]["stdout"] = f"line of {rank}\nsecond of {rank}\n"
    relay.flush()
    assert capsys.readouterr().out.splitlines() == ["[rank 0] line of 0", "[rank 0] second of 0"]
    (folded,) = shown
    assert folded["text/plain"] == "(ranks 1–3: 6 lines not shown (--show))"
    assert "<details" in folded["text/html"] and "[rank 3] second of 3" in folded["text/html"]
