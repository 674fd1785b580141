"""The debugger panel's bridge without a kernel or ranks (``magics/debug_panel.py``): which lines of a
``%%mgpu`` cell go to the ranks, which rank the panel shows while several are stopped, which rank a step
request is for (JupyterLab sends ``continue`` for thread 1), and the kernel's own requests passed on."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_mgpu.magics import debug_panel
from jupyter_mgpu.magics.debug_panel import THREADS, PanelBridge

CODE = "%%mgpu\nx = rank\ny = x + 1\ny"


class Debugger:
    """ipykernel's debugger, as far as the bridge sees it: started, its events, its own replies."""

    def __init__(self) -> None:
        self.is_started = True
        self.stopped_threads: set[int] = set()
        self.events: list[dict[str, Any]] = []
        self.forwarded: list[str] = []

    def event_callback(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    async def process_request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.forwarded.append(message["command"])
        body = {"threads": [{"id": 1, "name": "MainThread"}]} if message["command"] == "threads" else {}
        return {"success": True, "command": message["command"], "body": body}


@pytest.fixture
def bridge(monkeypatch):
    kernel = SimpleNamespace(debugger=Debugger(), get_parent=lambda channel=None: {"content": {"code": CODE}})
    b = PanelBridge(kernel)
    b.session = SimpleNamespace(world_size=2, cluster=SimpleNamespace(path="/nowhere"))
    sent: list[tuple[int, str, Any]] = []

    def ask(rank: int, command: str, body: str | None = None) -> dict[str, Any]:
        sent.append((rank, command, body))
        return {"n": 7, "prompt": f"(Pdb rank {rank}) "} if command == "debug-take" else {"ok": True}

    monkeypatch.setattr(b, "_ask", ask)
    b.sent = sent
    return b


def _request(b: PanelBridge, command: str, **arguments: Any) -> dict[str, Any]:
    return asyncio.run(b.process_request({"seq": 1, "command": command, "arguments": arguments}))


def _stopped(b: PanelBridge) -> list[int]:
    return [e["body"]["threadId"] - THREADS for e in b.debugger.events if e["event"] == "stopped"]


def test_the_cells_breakpoints_go_to_the_ranks_in_the_editors_numbering(bridge):
    from ipykernel.compiler import get_file_name

    path = str(get_file_name(CODE))
    _request(bridge, "setBreakpoints", source={"path": path}, breakpoints=[{"line": 1}, {"line": 3}])
    assert bridge.debugger.forwarded == ["setBreakpoints"]  # the kernel's debugger keeps its own list
    # line 1 is %%mgpu itself; the ranks number as the editor
    assert bridge.cell_breaks("x = rank\ny = x + 1\ny") == {"cell": [[3, None, None]], "files": {}}
    assert bridge.cell == {"path": path}
    bridge.debugger.is_started = False
    assert bridge.cell_breaks("x = rank") is None


def test_one_rank_is_shown_at_a_time_and_continue_shows_the_next(bridge, monkeypatch):
    bridge.cell = {"path": "/tmp/cell.py"}
    bridge.rank_stopped(bridge.session, 0, {})
    bridge.rank_stopped(bridge.session, 1, {})
    assert _stopped(bridge) == [0] and bridge.stopped == [0, 1]  # rank 1 waits its turn
    # JupyterLab's continue names thread 1 once it has forgotten the shown thread: the shown rank goes on
    reply = _request(bridge, "continue", threadId=1)
    assert reply["success"] and bridge.sent[-1][:2] == (0, "debug-line") and '"line": "c"' in bridge.sent[-1][2]
    assert bridge.debugger.forwarded == []
    bridge.tick()
    assert _stopped(bridge) == [0]  # not before the panel settled
    monkeypatch.setattr(debug_panel.time, "monotonic", lambda: 1e12)
    bridge.tick()
    assert _stopped(bridge) == [0, 1]


def test_next_keeps_the_rank_shown_and_a_rank_thread_is_answered_here(bridge):
    bridge.cell = {"path": "/tmp/cell.py"}
    bridge.rank_stopped(bridge.session, 1, {})
    assert _request(bridge, "next", threadId=THREADS + 1)["success"]
    assert '"line": "n"' in bridge.sent[-1][2]
    bridge.rank_stopped(bridge.session, 0, {})  # another rank stops meanwhile: not shown
    bridge.rank_stopped(bridge.session, 1, {})  # the stepping rank stops again: shown
    assert _stopped(bridge) == [1, 1]
    # the console's evaluate in rank 1's frame 0 is asked of rank 1 (this fake rank answers nothing)
    reply = _request(bridge, "evaluate", expression="x", frameId=debug_panel.FRAMES + 10_000)
    assert bridge.sent[-1][:2] == (1, "debug-eval") and '"index": 0' in bridge.sent[-1][2]
    assert not reply["success"] and reply["message"] == "rank 1: no answer"
    reply = _request(bridge, "pause", threadId=THREADS + 1)
    assert not reply["success"] and "use the input box" in reply["message"]


def test_the_kernels_own_requests_go_to_its_debugger(bridge):
    bridge.debugger.stopped_threads = {1}
    bridge.cell = {"path": "/tmp/cell.py"}
    bridge.shown = 0
    _request(bridge, "continue", threadId=1)  # the kernel's own thread is stopped: its continue
    _request(bridge, "stackTrace", threadId=1)
    threads = _request(bridge, "threads")["body"]["threads"]
    assert bridge.debugger.forwarded == ["continue", "stackTrace", "threads"]
    assert [t["name"] for t in threads] == ["MainThread", "rank 0", "rank 1"]


def test_a_variable_s_value_shows_in_the_panel_not_just_its_type(bridge, monkeypatch):
    got = [
        {"name": "device", "value": "device(type='cpu')", "type": "device"},
        {"name": "n", "value": "3", "type": "int"},
    ]
    monkeypatch.setattr(bridge, "_ask", lambda rank, command, body=None: {"variables": got})
    shown = bridge._variables(1, 0)
    # JupyterLab shows the type in place of the value for all but int, float, bool and str
    assert shown[0] == {
        "name": "device",
        "value": "device(type='cpu')",
        "variablesReference": 0,
        "evaluateName": "device",
    }
    assert shown[1]["type"] == "int" and shown[1]["value"] == "3"


def test_continue_all_ranks_sends_c_to_every_rank_stopped_for_the_panel(bridge, monkeypatch):
    """The "Continue all ranks" button's request: ``c`` to each rank at a panel prompt, shown or not; a rank at
    a ``breakpoint()`` in the code (served by the input box) is left alone; one continued event per rank."""
    prompts = {0: {"n": 3, "prompt": "(Pdb) ", "panel": True}, 1: {"n": 4, "prompt": "(Pdb) ", "panel": False}}
    prompts[2] = {"n": 5, "prompt": "(Pdb) ", "panel": True}
    sent: list[tuple[int, str]] = []

    def ask(rank: int, command: str, body: str | None = None) -> dict[str, Any]:
        if command == "debug-take":
            return prompts.get(rank) or {"prompt": None}
        sent.append((rank, body or ""))
        return {"ok": True}

    monkeypatch.setattr(bridge, "_ask", ask)
    bridge.session.world_size = 4
    bridge.cell = {"path": "/tmp/cell.py"}
    bridge.rank_stopped(bridge.session, 0, {})  # rank 0 shown; rank 2 stopped too, not announced yet
    reply = _request(bridge, "continue", threadId=THREADS, singleThread=False, allRanks=True)
    assert reply["success"] and reply["body"] == {"allThreadsContinued": True}, reply
    assert [r for r, _ in sent] == [0, 2] and all('"line": "c"' in body for _, body in sent)
    continued = [e["body"] for e in bridge.debugger.events if e["event"] == "continued"]
    assert continued == [{"threadId": THREADS + r, "allThreadsContinued": True} for r in (0, 2)]
    assert bridge.stopped == [] and bridge.shown is None and bridge.debugger.forwarded == []
    bridge.rank_stopped(bridge.session, 2, {})  # a rank that reaches a breakpoint again is shown at once
    assert _stopped(bridge) == [0, 2]


def test_continue_all_ranks_with_none_stopped_says_so_and_without_ranks_goes_to_the_kernels_debugger(
    bridge, monkeypatch
):
    monkeypatch.setattr(bridge, "_ask", lambda rank, command, body=None: {"prompt": None})
    bridge.cell = {"path": "/tmp/cell.py"}
    reply = _request(bridge, "continue", threadId=THREADS, singleThread=False, allRanks=True)
    assert not reply["success"] and reply["message"] == "no rank is stopped at a breakpoint of the debugger panel"
    bridge.cell = None  # no %%mgpu cell with breakpoints: DAP's continue of all the kernel's threads
    assert _request(bridge, "continue", threadId=1, singleThread=False, allRanks=True)["success"]
    assert bridge.debugger.forwarded == ["continue"]


def test_a_files_path_from_the_labextension_may_start_with_the_home_folder(bridge):
    """file_breakpoints.ts names a file by the server's root, which JupyterLab may give as ``~/...``."""
    _request(bridge, "setBreakpoints", source={"path": "~/work/helper.py"}, breakpoints=[{"line": 2}])
    assert bridge.breaks == {os.path.expanduser("~/work/helper.py"): [[2, None, None]]}
