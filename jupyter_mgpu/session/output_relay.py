"""Relay engines' output to the notebook as it arrives, each line prefixed with its rank.

Lines show live and stay where they were shown: the cell's output never moves or re-sorts when it
ends. Lines that arrive together (within :data:`SETTLE_S` of each other: ranks printing the same
step) show in rank order; lines further apart show in the order they came.

A line still being written — a text progress bar redrawn with ``\\r`` (tqdm) — shows in one live area,
one line per rank, redrawn as the ranks redraw it; when it ends it stays there, as it was drawn. With
``show`` (``%%mgpu --show 0``) only those ranks' output shows; the others' is one click away at the end.
Both call paths feed it: ipyparallel's AsyncResult and the direct channel's ``session/streamed_call.py``.
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any

from jupyter_mgpu.wait_line import in_kernel

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SETTLE_S = 0.15  # lines that arrive this close together show in rank order
# HTML text in the size and font of the cell's stream output (an HTML <pre> is larger by default)
PRE_STYLE = (
    "font-family:var(--jp-code-font-family,monospace);font-size:var(--jp-code-font-size,13px);"
    "line-height:var(--jp-code-line-height,1.39);margin:0;padding:0"
)


def visible(line: str) -> str:
    """What a terminal shows of a line redrawn with carriage returns: its last non-empty part."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


class _Stream:
    """Where one rank's stdout or stderr has been relayed up to: complete lines, by count and offset."""

    def __init__(self) -> None:
        self.lines = 0
        self.offset = 0

    def resync(self, text: str) -> None:
        """ipyparallel rewrites text redrawn with ``\\r``: find the end of the lines already relayed."""
        pos = 0
        for _ in range(self.lines):
            nl = text.find("\n", pos)
            if nl < 0:
                break
            pos = nl + 1
        self.offset = pos


class OutputRelay:
    """Polls an ipyparallel AsyncResult's live stdout/stderr and prints new complete lines."""

    def __init__(
        self, ar: Any, ranks: list[int], prefix: bool = True, show: list[int] | None = None, live: bool | None = None
    ):
        self.ar = ar
        self.ranks = ranks
        self.prefix = prefix
        self.show = None if show is None else set(show)
        self.live = in_kernel() if live is None else live  # a front end that redraws output in place
        self.clock = time.monotonic
        self._streams = {(r, s): _Stream() for r in ranks for s in ("stdout", "stderr")}
        self._shown_outputs = dict.fromkeys(ranks, 0)
        self._waiting: list[tuple[float, int, str, Any]] = []  # (arrived, rank, kind, what) not shown yet
        self._hidden: list[tuple[int, str, Any]] = []  # (rank, "stdout" | "stderr" | "display", what), --show
        self._drawing: dict[tuple[int, str], str] = {}  # lines being redrawn now, by (rank, stream)
        self._drawn: dict[tuple[int, str], list[str]] = {}  # redrawn lines that ended: they stay in the area
        self._bars: set[tuple[int, str]] = set()  # lines being drawn that were redrawn with \r (progress bars)
        self._live_handle: Any = None
        self._live_text = ""

    def _write(self, rank: int, name: str, text: str) -> None:
        out = sys.stdout if name == "stdout" else sys.stderr
        out.write(self._prefixed(rank, text))
        out.flush()

    def _prefixed(self, rank: int, text: str) -> str:
        if self.prefix:
            return "".join(f"[rank {rank}] {line}\n" for line in text.split("\n"))
        return text + "\n"

    def _hides(self, rank: int) -> bool:
        return self.show is not None and rank not in self.show

    def _emit(self, rank: int, name: str, what: Any) -> None:
        if self._hides(rank):
            self._hidden.append((rank, name, what))
            return
        self._waiting.append((self.clock(), rank, name, what))

    def _release(self, final: bool) -> None:
        """Show what waited: all of it, in rank order, once the oldest has waited :data:`SETTLE_S`."""
        if not self._waiting or not (final or self.clock() - self._waiting[0][0] >= SETTLE_S):
            return
        batch = sorted(self._waiting, key=lambda item: item[1])  # stable: each rank's own order
        self._waiting = []
        for _, rank, name, what in batch:
            if name == "display":
                self._display(what, rank)
            else:
                self._write(rank, name, what)

    def poll(self, final: bool = False) -> None:
        metadata = self.ar._metadata
        for i, rank in enumerate(self.ranks):
            md = metadata[i] if i < len(metadata) else {}
            for name in ("stdout", "stderr"):
                self._poll_stream(rank, name, md.get(name) or "", final)
            outputs = md.get("outputs") or []
            for out in outputs[self._shown_outputs[rank] :]:
                self._emit(rank, "display", out)
            self._shown_outputs[rank] = len(outputs)
        self._release(final)
        self._redraw()

    def _poll_stream(self, rank: int, name: str, text: str, final: bool) -> None:
        stream = self._streams[(rank, name)]
        if "\r" in text or stream.offset > len(text):
            stream.resync(text)
        start = stream.offset
        end = len(text) if final else text.rfind("\n", start) + 1
        if end > start:
            chunk = text[start:end]
            stream.offset = end
            lines = (chunk[:-1] if chunk.endswith("\n") else chunk).split("\n")
            stream.lines += len(lines) if final and not chunk.endswith("\n") else chunk.count("\n")
            lines = [visible(line) for line in lines]
            if (rank, name) in self._bars and self.live and not self._hides(rank):
                self._drawn.setdefault((rank, name), []).append(lines.pop(0))  # a bar that ended stays put
            self._bars.discard((rank, name))
            if lines:  # a line written in parts (a busy machine flushed it mid-line) shows whole, as a line
                self._emit(rank, name, "\n".join(lines))
        rest = text[stream.offset :] if not final else ""
        tail = visible(rest)
        if tail and not self._hides(rank):
            # a newline since the last look ended the line drawn then: this tail is a new line, not its redraw
            before = self._drawing.get((rank, name)) if end <= start else None
            # redrawn in place (a \r, or a tail that is not the one before it with more text after: ipyparallel
            # keeps only a line's last redraw): a progress bar, which stays where it was drawn
            if "\r" in rest or (before is not None and not tail.startswith(before)):
                self._bars.add((rank, name))
            self._drawing[(rank, name)] = tail  # shown as being written until its newline arrives
        else:
            self._drawing.pop((rank, name), None)

    def _redraw(self) -> None:
        """Show the lines being redrawn (progress bars) in the live area, one per rank, and those that ended."""
        if not self.live:
            return
        rows = []
        for key in sorted(set(self._drawing) | set(self._drawn)):
            now = [self._drawing[key]] if key in self._drawing else []
            rows += [self._prefixed(key[0], line).rstrip("\n") for line in [*self._drawn.get(key, []), *now]]
        text = "\n".join(rows)
        if text == self._live_text:
            return
        self._live_text = text
        from IPython.display import display

        body = f"<pre class='mgpu-live' style='{PRE_STYLE}'>{html.escape(text)}</pre>" if text else ""
        bundle = {"text/plain": text, "text/html": body}
        if self._live_handle is None:
            self._live_handle = display(bundle, raw=True, display_id=True)
        else:
            self._live_handle.update(bundle, raw=True)

    def _display(self, output: Any, rank: int | None = None) -> None:
        try:
            from IPython.display import display

            data = output.get("data", {}) if isinstance(output, dict) else {}
            if not data:
                return
            if WIDGET_VIEW in data and rank is not None and len(self.ranks) > 1:  # tqdm.notebook: whose bar is it
                display(
                    {"text/plain": f"[rank {rank}]", "text/html": f"<b class='mgpu-rank-label'>rank {rank}</b>"},
                    raw=True,
                )
            display(data, raw=True, metadata=output.get("metadata", {}))
        except Exception:
            pass

    def settle(self) -> None:
        """Show every whole line that has arrived now, however recent (a pdb prompt is about to wait for
        the user: what the ranks printed before it comes first, not after the prompt is answered)."""
        client = getattr(self.ar, "_client", None)
        if client is not None:
            try:
                client.spin()  # ipyparallel's output that reached its sockets
            except Exception:
                pass
        self.poll()
        self._release(final=True)

    def flush(self) -> None:
        """Show what is left, then what ``show`` left out, folded."""
        self.poll(final=True)
        if self._hidden:
            self._show_hidden()

    def _show_hidden(self) -> None:
        """The output of the ranks ``show`` left out, one click away (a folded block in a notebook)."""
        from IPython.display import display

        from jupyter_mgpu.session.cell_values import rank_label

        texts = [(r, w) for r, n, w in sorted(self._hidden, key=lambda item: item[0]) if n != "display"]
        lines = sum(w.count("\n") + 1 for _, w in texts)
        displays = len(self._hidden) - len(texts)
        what = f"{lines} line{'s' if lines != 1 else ''}" + (f" and {displays} display(s)" if displays else "")
        summary = f"{rank_label(sorted({r for r, _, _ in self._hidden}))}: {what} not shown (--show)"
        body = "".join(self._prefixed(r, w) for r, w in texts)
        display(
            {
                "text/plain": f"({summary})",
                "text/html": f"<details class='mgpu-hidden'><summary>{html.escape(summary)}</summary>"
                f"<pre style='{PRE_STYLE}'>{html.escape(body)}</pre></details>",
            },
            raw=True,
        )
        self._hidden.clear()
