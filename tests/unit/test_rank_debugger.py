"""pdb on a rank and the kernel's desk that serves it, without engines: a RankPdb in a thread stands for a
rank's main thread, its prompts go through a real guard socket, and the desk answers them from a list
(``engine/execution/rank_debugger.py``, ``session/rank_debugging.py``); where a rank at a prompt is,
and the hang rule's view of it."""

from __future__ import annotations

import gc
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_mgpu.engine import state as rank_state
from jupyter_mgpu.engine.execution import collector_frames, rank_debugger
from jupyter_mgpu.engine.state import EngineState
from jupyter_mgpu.engine.watch import collective_guard, collective_watch
from jupyter_mgpu.errors import MgpuError, RankError
from jupyter_mgpu.session import rank_debugging
from jupyter_mgpu.session.hang_watch import diagnose
from jupyter_mgpu.session.rank_errors import build_error

NOW = 1000.0


@pytest.fixture
def rank(tmp_path, monkeypatch):
    """This process as rank 1 of 2: its state, and its guard socket serving the debugger's requests."""
    st = EngineState(
        cluster_id="c",
        rundir=str(tmp_path),
        rank=1,
        world_size=2,
        device_kind="cpu",
        device_index=1,
        backend="gloo",
        budget_bytes=1 << 30,
        timeout=5.0,
        threads=1,
    )
    monkeypatch.setattr(rank_state, "STATE", st)
    monkeypatch.setattr(collective_guard, "commands", dict(collective_guard.commands))
    saved = (sys.breakpointhook, __import__("pdb").set_trace)
    collective_guard.commands.update(rank_debugger.install())
    listener = collective_guard.start(str(tmp_path), st)
    yield st
    listener.sock.close()
    sys.breakpointhook, __import__("pdb").set_trace = saved


def _desk(tmp_path) -> rank_debugging.DebugDesk:
    s = SimpleNamespace(cluster=SimpleNamespace(path=str(tmp_path), exits=dict), world_size=2, last_error=None)
    desk = rank_debugging.DebugDesk(s)  # type: ignore[arg-type]
    return desk


def _answer(monkeypatch, lines: list[str]) -> list[str]:
    """The person at the input box types ``lines`` in turn; returns the prompts they saw."""
    prompts: list[str] = []

    def read_line(prompt: str) -> tuple[str, bool]:
        prompts.append(prompt)
        return (lines.pop(0), False) if lines else ("", True)

    monkeypatch.setattr(rank_debugging, "read_line", read_line)
    return prompts


def _on_rank(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _serve_until_done(desk: rank_debugging.DebugDesk, t: threading.Thread, seconds: float = 20) -> None:
    end = time.monotonic() + seconds
    while t.is_alive() and time.monotonic() < end:
        desk.serve([1])
        time.sleep(0.02)
    assert not t.is_alive(), "the rank is still at its prompt"


def test_breakpoint_prompts_through_the_guard_and_runs_the_persons_commands(rank, tmp_path, monkeypatch, capsys):
    prompts = _answer(monkeypatch, ["p secret * 2", "n", "p later", "c"])

    def cell() -> int:
        secret = 21
        breakpoint()
        later = secret + 1
        return later + 1

    t, out = _on_rank(cell)
    _serve_until_done(_desk(tmp_path), t)
    assert out == {"value": 23}
    assert prompts == ["(Pdb rank 1) "] * 4
    printed = capsys.readouterr().out
    assert "\n42\n" in printed and "\n22\n" in printed and "-> later = secret + 1" in printed
    assert rank.debugging is None  # the prompt is over: where() no longer says debugging


def test_pythonbreakpoint_0_skips_and_another_hook_is_called(rank, monkeypatch):
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    assert sys.breakpointhook() is None  # nothing asked, nothing waited for
    monkeypatch.setenv("PYTHONBREAKPOINT", "json.dumps")
    assert sys.breakpointhook([1]) == "[1]"


def test_end_of_input_quits_as_pdb_does_at_ctrl_d(rank, tmp_path, monkeypatch):
    _answer(monkeypatch, [])  # a frontend with no input box

    def cell() -> None:
        breakpoint()
        raise AssertionError("not reached")

    t, out = _on_rank(cell)
    _serve_until_done(_desk(tmp_path), t)
    assert type(out["error"]).__name__ == "BdbQuit"


def test_step_does_not_stop_in_what_the_garbage_collector_runs(rank, tmp_path, monkeypatch, capsys):
    prompts = _answer(monkeypatch, ["s", "c"])
    seen: list[str] = []

    def on_collect(phase: str, info: dict[str, Any]) -> None:  # as hypothesis registers one
        seen.append(phase)

    def cell() -> int:
        breakpoint()
        gc.collect()
        after = 1
        return after

    gc.callbacks.append(on_collect)
    try:
        t, out = _on_rank(cell)
        _serve_until_done(_desk(tmp_path), t)
    finally:
        gc.callbacks.remove(on_collect)
    assert out == {"value": 1} and "start" in seen  # the callback ran, inside the step (and the weakref
    # callbacks and finalizers of earlier tests' garbage: plain pdb stops in those too)
    assert len(prompts) == 2
    printed = capsys.readouterr().out
    assert "-> after = 1" in printed and "on_collect" not in printed
    assert gc.callbacks[0] is collector_frames._on_collection  # first: it says a collection began before others run


def test_post_mortem_opens_the_frames_of_the_last_failure(rank, tmp_path, monkeypatch, capsys):
    prompts = _answer(monkeypatch, ["p local_value", "q"])

    def failing() -> None:
        local_value = "kept for the post-mortem"  # noqa: F841 - read by pdb
        raise ValueError("boom")

    try:
        failing()
    except ValueError as exc:
        rank_debugger.remember(exc.__traceback__)
    assert rank_debugger.failure_state() == "kept"
    t, out = _on_rank(rank_debugger.post_mortem)
    _serve_until_done(_desk(tmp_path), t)
    assert out == {"value": None} and prompts == ["(Pdb rank 1) "] * 2
    assert "'kept for the post-mortem'" in capsys.readouterr().out
    rank_debugger.remember(None)


def test_an_out_of_memory_failure_lets_its_frames_go():
    """The memory an out-of-memory failure's frames hold is what ran out: kept, the next call fails too."""
    import weakref

    class Big:
        pass

    def failing() -> None:
        held = Big()
        ref.append(weakref.ref(held))
        raise MemoryError("out of memory")

    ref: list[Any] = []
    try:
        failing()
    except MemoryError as exc:
        rank_debugger.remember(exc.__traceback__, out_of_memory=True)
    assert ref[0]() is None  # nothing keeps the failing frame's values
    assert rank_debugger.failure_state().startswith("it ran out of memory")
    rank_debugger.remember(None)
    assert rank_debugger.failure_state() == "none"


def test_a_line_for_an_old_prompt_is_refused():
    port = rank_debugger._Port()
    port.pending = {"n": 3, "prompt": "(Pdb rank 0) "}
    assert port.give('{"n": 2, "line": "c"}') == {"ok": False}
    assert port.give('{"n": 3, "line": "c"}') == {"ok": True} and port.lines.get_nowait() == (3, "c\n")
    assert port.take() == {"prompt": None}


def test_a_rank_at_a_prompt_says_debugging_and_is_neither_busy_nor_stuck(rank):
    rank.debugging = {"since": NOW - 30, "line": "line 3 of the cell"}
    w = collective_watch.where(rank)
    assert w == {"state": "debugging", "since": NOW - 30, "collective": None, "line": "line 3 of the cell"}
    assert collective_watch.describe(w, NOW) == "at a pdb prompt at line 3 of the cell for 30 s"
    waiting = {
        "state": "collective",
        "since": NOW - 30,
        "collective": "all_reduce #1",
        "call": "all_reduce",
        "line": "line 5 of the cell",
        "group": [0, 1],
        "key": ["0", 1, 0],
        "fp": "a",
    }
    # rank 0 waits for rank 1 in all_reduce: not stuck while rank 1 is at its prompt
    assert diagnose({0: waiting, 1: w}, set(), NOW) is None
    assert diagnose({0: waiting, 1: {"state": "idle"}}, set(), NOW) is not None  # the same wait on a done rank


def test_q_on_a_rank_is_one_sentence():
    failures = {
        1: {
            "ok": False,
            "ename": "BdbQuit",
            "evalue": "",
            "debug_quit": True,
            "frames": [{"file": "<cell>", "line": 3, "name": "<cell>", "code": "y = 2", "entry": True}],
        },
    }
    err = build_error(failures, succeeded=[0])
    assert str(err) == (
        "debugging ended with q on rank 1 at line 3 of the cell: y = 2, "
        "and the code after that line did not run there (rank 0 finished)"
    )


def test_the_default_rank_is_the_lowest_that_failed_on_its_own():
    errors = {0: {"collective_failure": True}, 2: {}, 3: {}}
    assert rank_debugging.default_rank(RankError("x", [0, 2, 3], errors)) == 2
    assert (
        rank_debugging.default_rank(
            RankError("x", [0, 1], {0: {"collective_failure": True}, 1: {"collective_failure": True}})
        )
        == 0
    )
    assert rank_debugging.default_rank(MgpuError("not on the ranks")) is None
    s = SimpleNamespace(last_error=None, world_size=2)
    with pytest.raises(MgpuError, match="^there is no failure to debug"):
        rank_debugging.post_mortem(s)  # type: ignore[arg-type]
    with pytest.raises(MgpuError, match=r"^--rank 5 is not a rank of this session \(0 to 1\)$"):
        rank_debugging.post_mortem(s, 5)  # type: ignore[arg-type]


def test_debug_and_pdb_on_open_the_ranks_frames_only_after_a_failure_there(monkeypatch):
    from jupyter_mgpu.magics import rank_debug

    calls: list[tuple[str, Any]] = []
    shell = SimpleNamespace(
        call_pdb=False,
        debugger=lambda force=False: calls.append(("ipython", force)),
        register_magics=lambda magics: calls.append(("magics", magics.__name__)),
    )
    rank_debug.install(shell)
    rank_debug.install(shell)  # a second %load_ext wraps nothing twice
    monkeypatch.setattr(rank_debug, "debug_rank_failure", lambda err: calls.append(("rank", err.ranks)))
    monkeypatch.setattr(sys, "last_value", ValueError("in the kernel"), raising=False)
    shell.debugger(force=True)  # %debug after an ordinary error: IPython's own debugger
    monkeypatch.setattr(sys, "last_value", RankError("on the ranks", [1], {1: {}}), raising=False)
    shell.debugger(force=True)  # %debug after a failure on the ranks: that rank's frames
    shell.debugger()  # an error shown with %pdb off: nothing opens
    assert calls == [
        ("magics", "DebugMagics"),
        ("magics", "DebugMagics"),
        ("ipython", True),
        ("rank", [1]),
        ("ipython", False),
    ]


def test_a_rank_option_is_a_number_or_one_clear_sentence():
    from IPython.core.error import UsageError

    from jupyter_mgpu.magics.arguments import rank_number

    assert rank_number(None) is None and rank_number("3") == 3
    with pytest.raises(UsageError, match=r"^--rank takes a rank number, got 'two'$"):
        rank_number("two")


def test_a_short_call_pays_nothing_for_the_desk(tmp_path, monkeypatch):
    from jupyter_mgpu.session import call_wait

    looks: list[int] = []
    monkeypatch.setattr(call_wait, "read_where", lambda s: looks.append(1) or {})
    desk = _desk(tmp_path)
    desk.start_call()
    desk.serve([0, 1])  # the call's first moments: no telemetry read, no guard asked
    assert looks == []
    monkeypatch.setattr(rank_debugging.time, "monotonic", lambda: time.time() + 1e6)
    desk.serve([0, 1])
    assert looks == [1]


def test_a_cast_line_names_its_ranks_and_a_bad_one_says_what_is_wrong():
    import pytest

    from jupyter_mgpu.errors import MgpuError
    from jupyter_mgpu.session.debug_cast import asks_tree, grouped_answers, parse_group, prompt_of

    assert parse_group("p x", 4) is None and parse_group(" :all ", 4) == [0, 1, 2, 3]
    assert parse_group(":ranks 0-2, 5", 8) == [0, 1, 2, 5] and parse_group(":rank 3", 4) == [3]
    with pytest.raises(MgpuError, match=r"^ranks 4, 5 are not in this session \(0 to 3\)$"):
        parse_group(":ranks 2-5", 4)
    with pytest.raises(
        MgpuError, match=r"^':some' is not a cast: write :all, :ranks 0-3 or :rank 2 \(:where draws the tree\)$"
    ):
        parse_group(":some", 4)
    assert prompt_of([0, 1, 2, 3]) == "(Pdb ranks 0–3 (4)) "
    assert asks_tree(" :where ") and asks_tree(":tree") and not asks_tree("where") and not asks_tree(":all")
    assert grouped_answers({2: "5\n", 0: "4\n", 1: "4\n"}) == "ranks 0, 1: 4 · rank 2: 5"
    assert grouped_answers({0: "> a\n-> b\n", 1: "> a\n-> b\n"}) == "ranks 0, 1:\n> a\n-> b"
