"""The output relay: ranks' lines show live as they arrive; a %%mgpu cell ends grouped by rank."""

from __future__ import annotations

from types import SimpleNamespace

import IPython.display

from jupyter_mgpu.session.output_relay import OutputRelay, grouped_by_rank


def _relay(group: bool, live: bool = True) -> tuple[OutputRelay, list[dict]]:
    """A relay of 4 ranks; ``live``: in a notebook front end (which can clear a cell's output)."""
    md = [{"stdout": ""} for _ in range(4)]
    if group:
        with grouped_by_rank():
            relay = OutputRelay(SimpleNamespace(_metadata=md), [0, 1, 2, 3], live=live)
    else:
        relay = OutputRelay(SimpleNamespace(_metadata=md), [0, 1, 2, 3], live=live)
    return relay, md


def test_lines_show_live_as_they_arrive_then_grouped_by_rank(capsys, monkeypatch):
    cleared = []
    monkeypatch.setattr(IPython.display, "clear_output", lambda wait=False: cleared.append(wait))
    relay, md = _relay(group=True)
    for rank in (3, 2, 0, 1):  # the order the issue saw
        md[rank]["stdout"] += f"hello from {rank}\n"
        relay.poll()
    live = capsys.readouterr().out
    assert live.splitlines() == [f"[rank {r}] hello from {r}" for r in (3, 2, 0, 1)]  # live, as they came
    md[3]["stdout"] += "bye from 3\n"
    relay.flush()
    assert cleared == [True]  # cleared when the regrouped output arrives
    assert capsys.readouterr().out.splitlines()[-5:] == [
        "[rank 0] hello from 0",
        "[rank 1] hello from 1",
        "[rank 2] hello from 2",
        "[rank 3] hello from 3",
        "[rank 3] bye from 3",
    ]


def test_a_terminal_keeps_the_order_lines_came_in_and_shows_each_once(capsys, monkeypatch):
    cleared = []
    monkeypatch.setattr(IPython.display, "clear_output", lambda wait=False: cleared.append(wait))
    relay, md = _relay(group=True, live=False)  # IPython in a terminal: what it printed stays printed
    for rank in (1, 0):
        md[rank]["stdout"] += f"hello from {rank}\n"
        relay.poll()
    relay.flush()
    assert cleared == [] and capsys.readouterr().out.splitlines() == ["[rank 1] hello from 1", "[rank 0] hello from 0"]


def test_no_regrouping_when_already_in_order_or_not_asked(capsys, monkeypatch):
    cleared = []
    monkeypatch.setattr(IPython.display, "clear_output", lambda wait=False: cleared.append(wait))
    for group, order in ((True, (0, 1, 2, 3)), (False, (3, 2, 0, 1))):
        relay, md = _relay(group)
        for rank in order:
            md[rank]["stdout"] += f"line {rank}\n"
            relay.poll()
        relay.flush()
    assert cleared == []  # in order already; and a relay outside %%mgpu never clears a cell


def test_a_progress_bar_redraws_live_per_rank_and_ends_as_one_line(capsys, monkeypatch):
    shown = []

    class Handle:
        def update(self, bundle, raw=False):
            shown.append(bundle["text/plain"])

    def display(bundle, raw=False, display_id=False, **kw):
        shown.append(bundle["text/plain"])
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    md = [{"stderr": ""}, {"stderr": ""}]
    relay = OutputRelay(SimpleNamespace(_metadata=md), [0, 1], live=True)
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
    assert shown[-1] == ""  # nothing left being drawn
    err = capsys.readouterr().err
    assert err.splitlines() == ["[rank 0] 100%|##########|", "[rank 0] after", "[rank 1] 100%|##########|"]
    md[0]["stderr"] += "more\n"
    relay.poll()
    assert capsys.readouterr().err == "[rank 0] more\n"  # the count of relayed lines survives the rewrite


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
