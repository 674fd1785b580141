"""JupyterLab's debugger panel across the ranks, driven over the kernel's debug protocol exactly as
JupyterLab drives it (debug_request on the control channel, debug_event on iopub): a breakpoint set in a
``%%mgpu`` cell stops the ranks, which are threads ``rank 0``, ``rank 1``; a rank's stack points into the
cell, its variables are its own; ``next`` steps that rank; ``continue`` (which JupyterLab sends for thread
1 once it has forgotten the shown one) lets it go and shows the next; an ordinary cell keeps ipykernel's
own debugging (``magics/debug_panel.py``)."""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest
from kernel_client import Kernel
from processes import wait_gone

pytestmark = pytest.mark.kernel

THREADS = 1_000_000


class Panel:
    """The debugger panel's side of the protocol: requests, and the events seen so far."""

    def __init__(self, k: Kernel) -> None:
        self.kc, self.seq, self.events = k.kc, 0, []

    def request(self, command: str, **arguments: Any) -> dict[str, Any]:
        self.seq += 1
        body = {"type": "request", "seq": self.seq, "command": command, "arguments": arguments}
        msg = self.kc.session.msg("debug_request", body)
        self.kc.control_channel.send(msg)
        while True:
            reply = self.kc.control_channel.get_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return reply["content"]

    def wait_event(self, name: str, seconds: float = 30, **body: Any) -> dict[str, Any]:
        """The next ``name`` event whose body has ``body``'s items (events before it are kept)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                m = self.kc.iopub_channel.get_msg(timeout=0.1)
            except queue.Empty:
                continue
            if m["msg_type"] != "debug_event":
                continue
            event = m["content"]
            self.events.append(event)
            if event["event"] == name and all(event["body"].get(k) == v for k, v in body.items()):
                return event
        raise AssertionError(f"no {name} {body} event in {seconds} s; seen: {[e['event'] for e in self.events]}")

    def set_breakpoint(self, code: str, line: int) -> str:
        path = self.request("dumpCell", code=code)["body"]["sourcePath"]
        reply = self.request(
            "setBreakpoints", source={"path": path}, breakpoints=[{"line": line}], sourceModified=False
        )
        assert reply["success"], reply
        return path


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    pids: list[int] = []
    try:
        pids = k.start_cluster(2)
        panel = Panel(k)
        assert panel.request("initialize", clientID="test", adapterID="python", pathFormat="path")["success"]
        assert panel.request("attach")["success"]
        assert panel.request("configurationDone")["success"]
        k.panel = panel
        yield k
        panel.request("disconnect", restart=False, terminateDebuggee=False)
        k.km.shutdown_kernel(now=False)
    finally:
        k.close()
    assert wait_gone(pids, 10) == []


@pytest.mark.slow
def test_a_breakpoint_in_an_mgpu_cell_stops_the_ranks_as_threads_with_their_own_values(kernel):
    panel = kernel.panel
    code = "%%mgpu\nvalue = rank * 10 + 3\ndoubled = value * 2\ntripled = value * 3\n(doubled, tripled)"
    path = panel.set_breakpoint(code, 3)
    msg_id = kernel.kc.execute(code)
    first = panel.wait_event("stopped")["body"]["threadId"]
    rank = first - THREADS
    assert rank in (0, 1)
    threads = {t["id"]: t["name"] for t in panel.request("threads")["body"]["threads"]}
    assert threads[THREADS] == "rank 0" and threads[THREADS + 1] == "rank 1"
    frames = panel.request("stackTrace", threadId=first)["body"]["stackFrames"]
    assert [(f["name"], f["line"], f["source"]["path"]) for f in frames] == [(f"rank {rank} · <module>", 3, path)]
    scopes = panel.request("scopes", frameId=frames[0]["id"])["body"]["scopes"]
    names = {
        v["name"]: v["value"]
        for v in panel.request("variables", variablesReference=scopes[0]["variablesReference"])["body"]["variables"]
    }
    assert names["value"] == str(rank * 10 + 3) and names["rank"] == str(rank) and "doubled" not in names

    # next: the same rank, one line on, its new value seen
    assert panel.request("next", threadId=first)["success"]
    panel.wait_event("stopped", threadId=first)
    frames = panel.request("stackTrace", threadId=first)["body"]["stackFrames"]
    assert frames[0]["line"] == 4
    scopes = panel.request("scopes", frameId=frames[0]["id"])["body"]["scopes"]
    names = {
        v["name"]: v["value"]
        for v in panel.request("variables", variablesReference=scopes[0]["variablesReference"])["body"]["variables"]
    }
    assert names["doubled"] == str((rank * 10 + 3) * 2)
    # the panel's console evaluates in the shown rank's frame: its values, its errors, a statement run there
    said = panel.request("evaluate", expression="doubled + rank", frameId=frames[0]["id"], context="repl")
    assert said["success"] and said["body"]["result"] == str((rank * 10 + 3) * 2 + rank), said
    failed = panel.request("evaluate", expression="nope + 1", frameId=frames[0]["id"], context="repl")
    assert not failed["success"] and failed["message"] == f"rank {rank}: NameError: name 'nope' is not defined"
    assert panel.request("evaluate", expression="seen = 7", frameId=frames[0]["id"], context="repl")["success"]

    # continue as JupyterLab sends it (thread 1, the shown one already forgotten): the other rank is shown
    assert panel.request("continue", threadId=1)["success"]
    second = panel.wait_event("stopped")["body"]["threadId"]
    assert second == THREADS + 1 - rank
    assert panel.request("continue", threadId=1)["success"]
    assert kernel.reply(msg_id)["content"]["status"] == "ok"
    reply = kernel.execute("%%mgpu\n(doubled, tripled, globals().get('seen'))")
    assert (
        "(6, 9, " in reply[1] and "(26, 39, " in reply[1] and f"{(6, 9, 7) if rank == 0 else (26, 39, 7)}" in reply[1]
    )


def test_a_breakpoint_in_a_helper_file_with_a_condition_stops_that_rank_there(kernel, tmp_path):
    """A gutter breakpoint in a ``.py`` file a cell imports, with the condition ``rank == 1``: rank 1 stops in
    the file (its frame points at it, the console evaluates there), rank 0 runs through."""
    panel = kernel.panel
    helper = tmp_path / "mgpu_panel_helper.py"
    helper.write_text("def scaled(v):\n    out = v * 7\n    return out\n")
    marks = [{"line": 3, "condition": "rank == 1"}]
    assert panel.request("setBreakpoints", source={"path": str(helper)}, breakpoints=marks, sourceModified=False)[
        "success"
    ]
    code = f"%%mgpu\nimport sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport mgpu_panel_helper\nmgpu_panel_helper.scaled(rank + 1)"
    seen = len(panel.events)
    try:
        msg_id = kernel.kc.execute(code)
        stopped = panel.wait_event("stopped")["body"]["threadId"]
        assert stopped == THREADS + 1
        frames = panel.request("stackTrace", threadId=stopped)["body"]["stackFrames"]
        assert (frames[0]["name"], frames[0]["line"], frames[0]["source"]["path"]) == (
            "rank 1 · scaled",
            3,
            str(helper),
        )
        assert (
            panel.request("evaluate", expression="out", frameId=frames[0]["id"], context="repl")["body"]["result"]
            == "14"
        )
        assert panel.request("continue", threadId=stopped)["success"]
        reply = kernel.reply(msg_id)["content"]
        assert reply["status"] == "ok", reply
        assert [e["body"]["threadId"] for e in panel.events[seen:] if e["event"] == "stopped"] == [THREADS + 1]
    finally:
        panel.request("setBreakpoints", source={"path": str(helper)}, breakpoints=[], sourceModified=False)


def test_a_breakpoint_given_a_condition_after_a_cell_stopped_there_stops_only_that_rank_next_time(kernel, tmp_path):
    """The ranks' pdb keeps no breakpoint of an earlier cell: the same line, now ``rank == 1``, stops rank 1
    alone (pdb's breakpoints are process-wide; a stale one would stop rank 0 too)."""
    panel = kernel.panel
    helper = tmp_path / "mgpu_panel_again.py"
    helper.write_text("def scaled(v):\n    out = v * 7\n    return out\n")
    code = f"%%mgpu\nimport sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport mgpu_panel_again\nmgpu_panel_again.scaled(rank)"
    try:
        for marks, stops in (([{"line": 3}], 2), ([{"line": 3, "condition": "rank == 1"}], 1)):
            assert panel.request("setBreakpoints", source={"path": str(helper)}, breakpoints=marks)["success"]
            seen = len(panel.events)
            msg_id = kernel.kc.execute(code)
            for _ in range(stops):
                thread = panel.wait_event("stopped")["body"]["threadId"]
                assert panel.request("continue", threadId=thread)["success"]
            assert kernel.reply(msg_id)["content"]["status"] == "ok"
            shown = [e["body"]["threadId"] - THREADS for e in panel.events[seen:] if e["event"] == "stopped"]
            assert sorted(shown) == ([0, 1] if stops == 2 else [1]), (marks, shown)
    finally:
        panel.request("setBreakpoints", source={"path": str(helper)}, breakpoints=[], sourceModified=False)


def test_a_breakpoint_in_a_script_run_with_mgpu_run_stops_every_rank_there_in_turn(kernel, tmp_path):
    panel = kernel.panel
    script = tmp_path / "mgpu_panel_script.py"
    script.write_text("import os\nrank = int(os.environ['RANK'])\nvalue = rank + 40\nprint('done', value)\n")
    marks = [{"line": 4}]
    assert panel.request("setBreakpoints", source={"path": str(script)}, breakpoints=marks, sourceModified=False)[
        "success"
    ]
    seen = len(panel.events)
    try:
        msg_id = kernel.kc.execute(f"%mgpu_run {script}")
        for _ in range(2):  # each rank stops at line 4 of the script, shown one after the other
            thread = panel.wait_event("stopped")["body"]["threadId"]
            frames = panel.request("stackTrace", threadId=thread)["body"]["stackFrames"]
            assert (frames[0]["line"], frames[0]["source"]["path"]) == (4, str(script)), frames
            said = panel.request("evaluate", expression="value", frameId=frames[0]["id"], context="repl")
            assert said["body"]["result"] == str(thread - THREADS + 40), said
            assert panel.request("continue", threadId=thread)["success"]
        assert kernel.reply(msg_id)["content"]["status"] == "ok"
        stops = sorted(e["body"]["threadId"] - THREADS for e in panel.events[seen:] if e["event"] == "stopped")
        assert stops == [0, 1], stops
    finally:
        panel.request("setBreakpoints", source={"path": str(script)}, breakpoints=[], sourceModified=False)


def _both_ranks_at_the_breakpoint(panel: Panel, seconds: float = 30) -> None:
    """Wait until both ranks are at a prompt: a rank's stack is known only while it is stopped."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if all(panel.request("stackTrace", threadId=THREADS + r)["body"]["stackFrames"] for r in (0, 1)):
            return
        time.sleep(0.1)
    raise AssertionError(f"the ranks did not both stop in {seconds} s")


@pytest.mark.slow
def test_continue_all_ranks_lets_every_stopped_rank_go_on_and_they_stop_again_at_the_next_hit(kernel):
    """The labextension's "Continue all ranks" button: ``continue`` marked ``allRanks`` is ``c`` on every
    stopped rank, the one not shown too; a breakpoint in a loop stops them all again at its next hit."""
    panel = kernel.panel
    code = "%%mgpu\ntotal = 0\nfor i in range(2):\n    total += rank + i\ntotal"
    path = panel.set_breakpoint(code, 4)
    seen = len(panel.events)
    msg_id = kernel.kc.execute(code)
    try:
        for hit in (0, 1):
            shown = panel.wait_event("stopped")["body"]["threadId"]
            _both_ranks_at_the_breakpoint(panel)
            frames = panel.request("stackTrace", threadId=shown)["body"]["stackFrames"]
            said = panel.request("evaluate", expression="i", frameId=frames[0]["id"], context="repl")
            assert said["body"]["result"] == str(hit), said
            went = panel.request("continue", threadId=shown, singleThread=False, allRanks=True)
            assert went["success"] and went["body"] == {"allThreadsContinued": True}, went
            mark = len(panel.events)
            panel.wait_event("continued", threadId=THREADS + 1, allThreadsContinued=True)  # sent last
            went_on = [e["body"]["threadId"] for e in panel.events[mark:] if e["event"] == "continued"]
            assert went_on == [THREADS, THREADS + 1], went_on
        reply = kernel.reply(msg_id)["content"]
        assert reply["status"] == "ok", reply
        stops = [e["body"]["threadId"] for e in panel.events[seen:] if e["event"] == "stopped"]
        assert len(stops) == 2, stops  # one rank shown per hit; the other went on with it, never shown
    finally:
        panel.request("setBreakpoints", source={"path": path}, breakpoints=[], sourceModified=False)


def test_a_cell_without_breakpoints_runs_straight_through_with_the_panel_on(kernel):
    reply, out = kernel.execute("%%mgpu\nrank + 100")
    assert reply["status"] == "ok" and "100" in out and "101" in out


def test_an_ordinary_cell_keeps_ipykernels_own_debugging(kernel):
    panel = kernel.panel
    code = "a = 40\nb = a + 2\nb"
    panel.set_breakpoint(code, 2)
    msg_id = kernel.kc.execute(code)
    stopped = panel.wait_event("stopped")["body"]
    assert stopped["threadId"] < THREADS  # the kernel's own thread, stopped by debugpy
    frames = panel.request("stackTrace", threadId=stopped["threadId"])["body"]["stackFrames"]
    assert frames[0]["line"] == 2
    assert panel.request("continue", threadId=stopped["threadId"])["success"]
    assert kernel.reply(msg_id)["content"]["status"] == "ok"
