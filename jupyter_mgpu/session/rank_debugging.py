"""The kernel's half of pdb on the ranks (``engine/execution/rank_debugger.py``): while a call waits, a
rank at a pdb prompt is served through the notebook's input box (stdin, as IPython's ``%debug`` asks),
one rank at a time, lowest first; and ``%mgpu_debug``'s post-mortem on one rank.

A rank says ``debugging`` in its telemetry the moment it stops at a prompt; the wait loop
(``session/call_wait.py``) calls :meth:`DebugDesk.serve`, which takes that prompt over the rank's guard
socket, prints what pdb printed, asks for a line and hands it back. Time at a prompt does not count
against the call's timeout.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine.watch import collective_guard
from jupyter_mgpu.errors import MgpuError, RankError, rank_list
from jupyter_mgpu.session import debug_cast
from jupyter_mgpu.session.stack_tree import rank_words
from jupyter_mgpu.units import format_bytes

if TYPE_CHECKING:
    from jupyter_mgpu.session.core import Session
    from jupyter_mgpu.session.output_relay import OutputRelay

POLL_S = 0.1  # how often the wait loop looks for a rank at a prompt
ASK_GUARD_S = 1.0  # how often a rank with no fresh telemetry (telemetry off, busy in C++) is asked
FOLLOW_S = 0.5  # after a line, how long the desk waits for that rank's next prompt before looking round
MAX_NAP = 0.1  # s: the longest pause between two looks for a rank's next prompt
# JupyterLab's debugger panel, when the kernel has one (``magics/debug_panel.py``): a rank stopped at one of
# its breakpoints is announced to it instead of asking in the input box
panel: Any = None
NO_FAILURE = "there is no failure to debug: no %%mgpu cell, mg.* call or script has failed on the ranks of this session"


def ask(s: Session, rank: int, command: str, body: str | None = None) -> dict[str, Any]:
    """A debugger request to ``rank``'s guard (``debug-take``, ``debug-line``, ``debug-frames``,
    ``debug-vars``); ``{}`` when it cannot be reached."""
    return collective_guard.ask(s.cluster.path, rank, command, body=body) or {}


def read_line(prompt: str) -> tuple[str, bool]:
    """A line from the person (the notebook's input box); ``("", True)`` when this frontend takes no
    input, which pdb reads as end of input (it quits), as a terminal's Ctrl-D."""
    try:
        return input(prompt), False
    except (EOFError, OSError):  # no stdin: a script, a test's captured stdin
        return "", True
    except Exception as exc:  # ipykernel's StdinNotImplementedError: the frontend has no input box
        if type(exc).__name__ == "StdinNotImplementedError":
            return "", True
        raise


class DebugDesk:
    """Serves the ranks' pdb prompts while one call runs."""

    def __init__(self, s: Session) -> None:
        self.s = s
        self._next = 0.0
        self._asked = 0.0
        self.served: dict[int, int] = {}  # rank -> the number of the last prompt answered
        self.paused_s = 0.0  # seconds the current call spent at prompts
        self._told: tuple[int, ...] = ()
        self.group: list[int] | None = None  # the ranks a cast sends each line to (``:all``, ``:ranks 0-3``)
        self._printed: dict[int, int] = {}  # rank -> the prompt whose output was printed
        self.lines = 0  # lines sent to the ranks' prompts, all told

    def start_call(self) -> None:
        """A call starts: its first look comes ``POLL_S`` in, so a short call pays nothing for the desk."""
        now = time.monotonic()
        self._next, self._asked, self.paused_s, self._told = now + POLL_S, now, 0.0, ()
        self.group, self._printed = None, {}

    def serve(self, pending: list[int], relay: OutputRelay | None = None) -> None:
        """One look (at most every ``POLL_S``): answer the lowest rank waiting at a prompt, and follow it
        from prompt to prompt while it stops again at once."""
        now = time.monotonic()
        if not pending or now < self._next:
            return
        self._next = now + POLL_S
        from jupyter_mgpu.session.call_wait import read_where

        where = read_where(self.s)
        waiting = [r for r in pending if (where.get(r) or {}).get("state") == "debugging"]
        if now - self._asked >= ASK_GUARD_S:  # ranks whose telemetry says nothing: ask them
            self._asked = now
            waiting += [r for r in pending if r not in where]
        if self.group is not None and set(waiting) & set(self.group):
            self._cast(relay)
            self._next = time.monotonic()
            return
        rank, prompt = None, None
        for r in sorted(set(waiting)):
            p = self._take(r)
            if p is not None and p.get("panel") and panel is not None:
                self.served[r] = int(p["n"])  # the panel drives this rank: announced once per stop
                panel.rank_stopped(self.s, r, p)
            elif p is not None:
                rank, prompt = r, p
                break
        if panel is not None:
            panel.tick()
        while rank is not None and prompt is not None:
            if self._answer(rank, prompt, sorted(set(waiting) - {rank}), relay):
                self._cast(relay)  # a cast was chosen at this prompt: the group is served from now on
                break
            prompt = self._follow(rank)
        self._next = time.monotonic()  # another rank may be at a prompt already

    def serve_now(self, ranks: list[int], relay: OutputRelay | None = None) -> None:
        """Serve the prompts of ``ranks`` now, outside any wait (a ``--noblock`` call's, before the next cell
        runs: ``session/idle_prompts.py``), until a look finds none of them at a new prompt."""
        self.start_call()
        while True:
            before = self.lines
            self._next = self._asked = 0.0
            self.serve(ranks, relay)
            if self.lines == before:
                return

    def _take(self, rank: int) -> dict[str, Any] | None:
        p = collective_guard.ask(self.s.cluster.path, rank, "debug-take")
        if not p or not p.get("prompt") or self.served.get(rank) == p.get("n"):
            return None
        return p

    def _follow(self, rank: int) -> dict[str, Any] | None:
        """``rank``'s next prompt, if it stops again within ``FOLLOW_S`` (not waited for once its call ended)."""
        end, nap = time.monotonic() + FOLLOW_S, 0.01
        while time.monotonic() < end:
            p = self._take(rank)
            if p is not None:
                return p
            if self._call_ended([rank]):
                return None
            time.sleep(nap)
            nap = min(nap * 1.5, MAX_NAP)  # a step's next prompt comes at once; a long run is asked less often
        return None

    def _answer(self, rank: int, p: dict[str, Any], others: list[int], relay: OutputRelay | None) -> bool:
        """Serve ``rank``'s prompt ``p``; True when the line chose a cast instead (``:all``), which leaves the
        prompt waiting for :meth:`_cast`."""
        start = time.monotonic()
        if relay is not None:
            relay.settle()  # what the ranks printed before it stopped comes first
        if p.get("output") and self._printed.get(rank) != p["n"]:
            sys.stdout.write(p["output"])
        self._printed[rank] = int(p["n"])
        if tuple(others) != self._told:
            self._told = tuple(others)
            if others:
                verb = "waits" if len(others) == 1 else "wait"
                print(
                    f"mgpu: {rank_words(others)} also {verb} at a pdb prompt, served after rank {rank} (:all casts to every rank)"
                )
        sys.stdout.flush()
        try:
            line, eof = read_line(str(p["prompt"]))
            while not eof and debug_cast.asks_tree(line):
                self.show_tree()
                line, eof = read_line(str(p["prompt"]))
        finally:
            self.paused_s += time.monotonic() - start
        if not eof and self._chose_group(line):
            return True
        self._send(rank, p, line, eof)
        return False

    def show_tree(self) -> None:
        """``:where`` at a prompt: every rank's stack as one tree, the ranks counted per frame."""
        from jupyter_mgpu.session import rank_status
        from jupyter_mgpu.session.stack_tree import StackTree

        print(StackTree(rank_status.where(self.s.cluster, self.s.world_size)).text(), flush=True)

    def _send(self, rank: int, p: dict[str, Any], line: str, eof: bool) -> None:
        self.served[rank] = int(p["n"])
        self.lines += 1
        body = json.dumps({"n": p["n"], "line": line, "eof": eof})
        collective_guard.ask(self.s.cluster.path, rank, "debug-line", body=body)

    def _chose_group(self, line: str) -> bool:
        """Whether ``line`` is a cast (``:all``, ``:ranks 0-3``); a bad one is said, and chooses nothing."""
        try:
            group = debug_cast.parse_group(line, self.s.world_size)
        except MgpuError as exc:
            print(f"mgpu: {exc}")
            return False
        if group is None:
            return False
        self.group = group
        return True

    def _gather(self, group: list[int]) -> dict[int, dict[str, Any]]:
        """The group's ranks at a prompt, waiting up to ``FOLLOW_S`` for those still on their way; a rank whose
        call has ended (a ``c`` that ran it to the end) is not waited for."""
        end = time.monotonic() + FOLLOW_S
        at: dict[int, dict[str, Any]] = {}
        ended: set[int] = set()
        nap = 0.01
        while True:
            for r in group:
                if r not in at and (p := self._take(r)) is not None and not p.get("panel"):
                    at[r] = p
            if len(at) + len(ended) >= len(group) or time.monotonic() >= end:
                return at
            ended |= self._call_ended([r for r in group if r not in at and r not in ended])
            time.sleep(nap)
            nap = min(nap * 1.5, MAX_NAP)

    def _call_ended(self, ranks: list[int]) -> set[int]:
        """Of ``ranks``, those no longer inside a call (nothing there will stop at a prompt again)."""
        replies = collective_guard.ask_all(self.s.cluster.path, ranks, "progress")
        return {r for r, p in replies.items() if p is not None and not p.get("in_call")}

    def _cast(self, relay: OutputRelay | None) -> None:
        """Serve the group's prompts together, one line for all of them, their answers grouped, until none
        of its ranks comes back to a prompt (they ran on; the group stays for their next stop)."""
        while self.group:
            at = self._gather(self.group)
            if not at:
                return
            start = time.monotonic()
            if relay is not None:
                relay.settle()
            fresh = {r: str(p.get("output") or "") for r, p in at.items() if self._printed.get(r) != p["n"]}
            self._printed.update({r: int(p["n"]) for r, p in at.items()})
            said = debug_cast.grouped_answers({r: t for r, t in fresh.items() if t.strip()})
            if said:
                print(said)
            missing = [r for r in self.group if r not in at]
            if missing:
                print(
                    f"mgpu: {rank_words(missing)} of the group {'is' if len(missing) == 1 else 'are'} not at a prompt"
                )
            sys.stdout.flush()
            try:
                line, eof = read_line(debug_cast.prompt_of(sorted(at)))
            finally:
                self.paused_s += time.monotonic() - start
            if not eof and debug_cast.asks_tree(line):
                self.show_tree()
                continue
            if not eof and (self._chose_group(line) or line.strip().startswith(":")):
                continue
            for r, p in at.items():
                self._send(r, p, line, eof)


def default_rank(err: BaseException | None) -> int | None:
    """The rank ``%mgpu_debug`` opens without ``--rank``: the lowest that failed on its own (not one left
    waiting in a collective for it), else the lowest that failed."""
    if not isinstance(err, RankError) or not err.ranks:
        return None
    errors = err.errors or {}
    own = [r for r in err.ranks if not (errors.get(r) or {}).get("collective_failure")]
    return min(own or err.ranks)


def post_mortem(s: Session, rank: int | None = None) -> None:
    """pdb on ``rank``'s frames of the last failure (the lowest failed rank by default), through the
    notebook's input box."""
    from jupyter_mgpu.engine.execution import rank_debugger

    err = s.last_error
    if rank is None:
        rank = default_rank(err)
        if rank is None:
            raise MgpuError(NO_FAILURE)
    if not 0 <= rank < s.world_size:
        raise MgpuError(f"--rank {rank} is not a rank of this session (0 to {s.world_size - 1})")
    state = s.run(rank_debugger.failure_state, targets=[rank], label="%mgpu_debug")[0]
    if state == "none":
        raise MgpuError(f"rank {rank} has no failure to debug: nothing has failed on it in this session")
    if state != "kept":
        raise MgpuError(f"rank {rank}'s last failure cannot be debugged: {state}")
    print(f"mgpu: post-mortem on rank {rank}; q or c ends it")
    s.run(rank_debugger.post_mortem, targets=[rank], label="%mgpu_debug")


def post_mortem_all(s: Session) -> None:
    """pdb on every rank that keeps a failure, at once (``%mgpu_debug --all``): their prompts are served as a
    cell's are, so ``:all`` casts each line to all of them."""
    from jupyter_mgpu.engine.execution import rank_debugger

    states = s.run(rank_debugger.failure_state, label="%mgpu_debug")
    kept = [r for r, state in enumerate(states) if state == "kept"]
    if not kept:
        raise MgpuError("no rank keeps a failure to debug: nothing failed, or its frames were let go")
    print(f"mgpu: post-mortem on {rank_words(kept)}; :all casts each line to them; q or c ends each")
    s.run(rank_debugger.post_mortem, targets=kept, label="%mgpu_debug")


def release(s: Session, rank: int | None = None) -> str:
    """Let the kept failure's frames go on ``rank`` (default: every rank) (``%mgpu_debug --release``);
    what that gave back, in one line."""
    from jupyter_mgpu.engine.execution import rank_debugger

    if rank is not None and not 0 <= rank < s.world_size:
        raise MgpuError(f"--rank {rank} is not a rank of this session (0 to {s.world_size - 1})")
    ranks = list(range(s.world_size)) if rank is None else [rank]
    freed = dict(zip(ranks, s.run(rank_debugger.release_failure, targets=ranks, label="%mgpu_debug --release")))
    gave = [f"{format_bytes(n)} on rank {r}" for r, n in freed.items() if n]
    if not gave:
        return f"no failure's frames held memory on {rank_list(ranks)}"
    return "released the failed call's frames: " + ", ".join(gave)
