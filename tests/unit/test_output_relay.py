"""The output relay: ranks' lines show live as they arrive; a %%mgpu cell ends grouped by rank."""

from __future__ import annotations

from types import SimpleNamespace

import IPython.display

from jupyter_mgpu.session.output_relay import OutputRelay, grouped_by_rank


def _relay(group: bool) -> tuple[OutputRelay, list[dict]]:
    md = [{"stdout": ""} for _ in range(4)]
    if group:
        with grouped_by_rank():
            relay = OutputRelay(SimpleNamespace(_metadata=md), [0, 1, 2, 3])
    else:
        relay = OutputRelay(SimpleNamespace(_metadata=md), [0, 1, 2, 3])
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
