"""The ranks' failures in the notebook: one line, each failed rank's whole traceback folded under it,
and ``%mgpu_tb [--rank R]`` to print those tracebacks again.

The rank side formats a traceback as IPython colours one (``engine/rank_traceback.py``); here it
becomes a ``<details>`` block per group of ranks with the same traceback (ANSI colours as HTML), shown
under the one-line error in a notebook. A terminal gets a hint to ``%mgpu_tb`` instead.
"""

from __future__ import annotations

import html
import re
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_mgpu.errors import RankError, rank_list
from jupyter_mgpu.magics.arguments import argument, magic_arguments, parse_line, rank_number

# JupyterLab's ANSI colours: black, red, green, yellow, blue, magenta, cyan, white; then the bright ones
PALETTE = (
    "#3e424d #e75c58 #00a250 #ddb62b #208ffb #d160c4 #60c6c8 #c5c1b4 "
    "#282c36 #b22b31 #007427 #b27d12 #0065ca #a03196 #258f8f #a1a6b2"
).split()
SGR = re.compile(r"\x1b\[([0-9;]*)m")
HINT = "%mgpu_tb prints each failed rank's whole traceback"


def _colour_256(n: int) -> str:
    if n < 16:
        return PALETTE[n]
    if n < 232:
        n -= 16
        levels = (0, 95, 135, 175, 215, 255)
        return "#%02x%02x%02x" % (levels[n // 36], levels[n // 6 % 6], levels[n % 6])
    grey = 8 + 10 * (n - 232)
    return "#%02x%02x%02x" % (grey, grey, grey)


def _apply_sgr(codes: list[int], state: dict[str, Any]) -> None:
    """Update ``state`` (fg, bg, bold, italic, underline) by one SGR escape's codes."""
    i = 0
    while i < len(codes):
        c = codes[i]
        if c == 0:
            state.clear()
        elif c == 1:
            state["bold"] = True
        elif c == 3:
            state["italic"] = True
        elif c == 4:
            state["underline"] = True
        elif c == 22:
            state.pop("bold", None)
        elif c == 23:
            state.pop("italic", None)
        elif c == 24:
            state.pop("underline", None)
        elif 30 <= c <= 37 or 90 <= c <= 97:
            state["fg"] = PALETTE[c - 30 if c < 90 else c - 82]
        elif 40 <= c <= 47 or 100 <= c <= 107:
            state["bg"] = PALETTE[c - 40 if c < 100 else c - 92]
        elif c in (39, 49):
            state.pop("fg" if c == 39 else "bg", None)
        elif c in (38, 48) and i + 1 < len(codes):
            key = "fg" if c == 38 else "bg"
            if codes[i + 1] == 5 and i + 2 < len(codes):
                state[key] = _colour_256(codes[i + 2])
                i += 2
            elif codes[i + 1] == 2 and i + 4 < len(codes):
                state[key] = "#%02x%02x%02x" % tuple(codes[i + 2 : i + 5])
                i += 4
        i += 1


def _style(state: dict[str, Any]) -> str:
    parts = []
    if "fg" in state:
        parts.append(f"color:{state['fg']}")
    if "bg" in state:
        parts.append(f"background-color:{state['bg']}")
    if state.get("bold"):
        parts.append("font-weight:bold")
    if state.get("italic"):
        parts.append("font-style:italic")
    if state.get("underline"):
        parts.append("text-decoration:underline")
    return ";".join(parts)


def ansi_to_html(text: str) -> str:
    """``text`` with ANSI colour escapes (SGR: 16, 256 and true colours, bold, italic, underline) as
    HTML spans; everything else escaped."""
    out, state, pos = [], {}, 0  # type: ignore[var-annotated]
    for m in SGR.finditer(text):
        out.append(_span(text[pos : m.start()], state))
        _apply_sgr([int(c) if c else 0 for c in m.group(1).split(";")], state)
        pos = m.end()
    out.append(_span(text[pos:], state))
    return "".join(out)


def _span(chunk: str, state: dict[str, Any]) -> str:
    if not chunk:
        return ""
    style = _style(state)
    escaped = html.escape(chunk)
    return f'<span style="{style}">{escaped}</span>' if style else escaped


def ansi_tracebacks(err: RankError) -> dict[int, str]:
    """Each failed rank's traceback with its colours (what the rank formatted): the ranks that failed on
    their own first, then those released from a collective they waited in for them, each in rank order."""
    texts = {r: e for r, e in sorted(err.errors.items()) if isinstance(e, dict) and e.get("traceback")}
    order = sorted(texts, key=lambda r: (bool(texts[r].get("collective_failure")), r))
    return {r: texts[r]["traceback"] for r in order}


PEER = re.compile(r"\[[0-9A-Fa-f.:]+\]:\d+")  # gloo names the peer's address: ranks released together differ only there


def grouped(tracebacks: dict[int, str]) -> list[tuple[list[int], str]]:
    """Ranks with the same traceback together (peer addresses aside), in the order of each group's first
    rank in ``tracebacks``, each shown with its first rank's text."""
    groups: dict[str, tuple[list[int], str]] = {}
    for r, text in tracebacks.items():
        groups.setdefault(PEER.sub("[peer]", text), ([], text))[0].append(r)
    return list(groups.values())


def details_html(err: RankError) -> str | None:
    """The folded tracebacks shown under the one-line error, or None when there are none."""
    blocks = []
    for ranks, text in grouped(ansi_tracebacks(err)):
        blocks.append(
            "<details class='mgpu-traceback'><summary>"
            f"Traceback on {rank_list(ranks)}</summary>"
            "<pre style='overflow-x:auto;margin:0;padding:4px 6px;"
            "background:var(--jp-rendermime-error-background, #fdd);"
            "font-family:var(--jp-code-font-family, monospace);font-size:var(--jp-code-font-size, 13px)'>"
            f"{ansi_to_html(text.rstrip())}</pre></details>"
        )
    return "".join(blocks) or None


def show_mgpu_error(shell: Any, etype: type, evalue: BaseException, tb: Any, tb_offset: Any = None) -> Any:
    """Show jupyter_mgpu errors as one line, without the controller-side traceback; a failure on the
    ranks also shows each rank's traceback folded under it (a notebook) or a hint (a terminal)."""
    stb = [f"{etype.__name__}: {evalue}"]
    sys.last_type, sys.last_value, sys.last_traceback = etype, evalue, tb  # as IPython keeps any error's
    shell._showtraceback(etype, evalue, stb)
    if isinstance(evalue, RankError):
        folded = details_html(evalue)
        if folded:
            from IPython.display import display

            display({"text/html": folded, "text/plain": f"({HINT})"}, raw=True)
        if getattr(shell, "call_pdb", False):  # %pdb on: the post-mortem opens on the rank's frames
            shell.debugger(force=True)
    return stb


def last_failure() -> RankError | None:
    """The last failure on the ranks: the error the notebook showed last, else the session's last one."""
    shown = getattr(sys, "last_value", None)
    if isinstance(shown, RankError) and ansi_tracebacks(shown):
        return shown
    from jupyter_mgpu.session import lifecycle

    s = lifecycle.current(required=False)
    err = getattr(s, "last_error", None)
    return err if isinstance(err, RankError) else None


@magics_class
class TracebackMagics(Magics):
    """``%mgpu_tb``."""

    @magic_arguments()
    @argument("--rank", "-r", default=None, help="the rank whose traceback to print (default: every failed rank)")
    @line_magic
    def mgpu_tb(self, line: str = "") -> None:
        """Print the whole traceback of each rank that failed last (``--rank R``: that rank's only)."""
        args = parse_line(self.mgpu_tb, line)
        rank = rank_number(args.rank)
        err = last_failure()
        if err is None:
            print("mgpu: no rank has failed yet in this session")
            return
        texts = ansi_tracebacks(err)
        if rank is not None:
            if rank not in texts:
                raise UsageError(f"rank {rank} did not fail in the last failure ({rank_list(sorted(texts))} did)")
            texts = {rank: texts[rank]}
        from jupyter_mgpu.session.scripts import output_shows_colour

        colour = output_shows_colour()
        for ranks, text in grouped(texts):
            body = text if colour else SGR.sub("", text)
            print(f"{rank_list(ranks)}:\n{body.rstrip()}\n")
