"""The rank side of a streamed call: writes to the engine's stream objects (and to handlers holding them)
and ``display()`` come back as ordered, coalesced events, and everything is put back afterwards."""

from __future__ import annotations

import io
import sys
import time

from jupyter_mgpu.engine.execution import streamed_output
from jupyter_mgpu.engine.execution.streamed_output import StreamedOutput


class Stream(io.TextIOBase):
    """An object like ipykernel's OutStream: a Python stream class, so it takes instance attributes."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> int:
        self.text += s
        return len(s)


def test_writes_come_back_in_order_coalesced_and_the_streams_are_put_back(monkeypatch):
    out, err = Stream(), Stream()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    held = sys.stderr  # what a logging handler made earlier holds
    batches: list[list] = []
    with StreamedOutput(batches.append):
        print("a")
        print("b")
        held.write("warned\n")
        print("c")
    events = [e for batch in batches for e in batch]
    assert events == [["stdout", "a\nb\n"], ["stderr", "warned\n"], ["stdout", "c\n"]]
    print("after")
    assert out.text == "after\n" and "write" not in out.__dict__  # the object's own write again


def test_output_is_sent_while_the_call_runs(monkeypatch):
    monkeypatch.setattr(sys, "stdout", Stream())
    sent: list[float] = []
    with StreamedOutput(lambda events: sent.append(time.monotonic())):
        print("first")
        time.sleep(streamed_output.FLUSH_S * 6)
        mid = time.monotonic()
    assert sent and sent[0] < mid  # flushed by the engine's flusher thread, not only at the end


def test_a_closed_notebook_end_drops_output_but_not_the_call(monkeypatch):
    monkeypatch.setattr(sys, "stdout", Stream())

    def broken(events: list) -> None:
        raise BrokenPipeError

    with StreamedOutput(broken) as output:
        print("x")
    assert output.broken


def test_the_notebook_keeps_the_events_as_ipyparallel_keeps_a_tasks_output():
    from jupyter_mgpu.session.streamed_call import StreamedCall

    call = StreamedCall([2, 5])
    call.add(5, [["stdout", "a\n"], ["stderr", "\r 10%"], ["display", {"data": {"text/plain": "x"}}]])
    call.add(5, [["stderr", "\r 90%"], ["stdout", "b\n"]])
    md = call._metadata[1]
    assert md["stdout"] == "a\nb\n" and md["stderr"] == " 90%"  # only the last redraw of a line is kept
    assert md["outputs"] == [{"data": {"text/plain": "x"}}] and call._metadata[0]["stdout"] == ""
