"""Relay engines' output to the notebook as it arrives, each line prefixed with its rank.

Lines show live, in the order they arrive (rank 3 may well print first). A relay made inside
:func:`grouped_by_rank` (the ``%%mgpu`` magic, whose cell output is all the ranks' output) ends by
showing the cell's output again grouped by rank — rank 0's lines, then rank 1's, … — when the ranks'
lines arrived interleaved or out of order (in a notebook; a terminal keeps the order they came in, as
it cannot clear what it printed).

A line still being written — a text progress bar redrawn with ``\\r`` (tqdm) — shows in one live area
below, one line per rank, redrawn as the ranks redraw it; it joins the output when it ends. With
``show`` (``%%mgpu --show 0``) only those ranks' output shows; the others' is one click away at the end.
"""

from __future__ import annotations

import contextlib
import contextvars
import html
import sys
from collections.abc import Iterator
from typing import Any

_GROUP = contextvars.ContextVar("mgpu_group_by_rank", default=False)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@contextlib.contextmanager
def grouped_by_rank() -> Iterator[None]:
    """Relays made inside end by regrouping the output they showed by rank (clearing the cell's output:
    use it only where the relay's output is all the cell shows)."""
    token = _GROUP.set(True)
    try:
        yield
    finally:
        _GROUP.reset(token)


def visible(line: str) -> str:
    """What a terminal shows of a line redrawn with carriage returns: its last non-empty part."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython

        return getattr(get_ipython(), "kernel", None) is not None
    except Exception:
        return False


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
        self.live = _in_kernel() if live is None else live  # a front end that redraws and clears output
        self.group = _GROUP.get() and self.live  # a terminal cannot clear what it printed: no second copy
        self._streams = {(r, s): _Stream() for r in ranks for s in ("stdout", "stderr")}
        self._shown_outputs = dict.fromkeys(ranks, 0)
        self._shown: list[tuple[int, str, Any]] = []  # (rank, "stdout" | "stderr" | "display", what), as shown
        self._hidden: list[tuple[int, str, Any]] = []  # the same, for ranks --show leaves out
        self._drawing: dict[tuple[int, str], str] = {}  # lines being redrawn now, by (rank, stream)
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

    def _emit(self, rank: int, name: str, text: str) -> None:
        if self._hides(rank):
            self._hidden.append((rank, name, text))
            return
        if self.group:  # kept only to be shown again in rank order at the end
            self._shown.append((rank, name, text))
        self._write(rank, name, text)

    def poll(self, final: bool = False) -> None:
        metadata = self.ar._metadata
        for i, rank in enumerate(self.ranks):
            md = metadata[i] if i < len(metadata) else {}
            for name in ("stdout", "stderr"):
                self._poll_stream(rank, name, md.get(name) or "", final)
            outputs = md.get("outputs") or []
            for out in outputs[self._shown_outputs[rank] :]:
                if self._hides(rank):
                    self._hidden.append((rank, "display", out))
                    continue
                if self.group:
                    self._shown.append((rank, "display", out))
                self._display(out, rank)
            self._shown_outputs[rank] = len(outputs)
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
            self._emit(rank, name, "\n".join(visible(line) for line in lines))
        tail = visible(text[stream.offset :]) if not final else ""
        if tail and not self._hides(rank):
            self._drawing[(rank, name)] = tail
        else:
            self._drawing.pop((rank, name), None)

    def _redraw(self) -> None:
        """Show the lines being redrawn now (progress bars) in the live area, one per rank."""
        if not self.live:
            return
        text = "\n".join(self._prefixed(r, line).rstrip("\n") for (r, _), line in sorted(self._drawing.items()))
        if text == self._live_text:
            return
        self._live_text = text
        from IPython.display import display

        bundle = {"text/plain": text, "text/html": f"<pre class='mgpu-live'>{html.escape(text)}</pre>" if text else ""}
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

    def in_rank_order(self) -> bool:
        """Whether what was shown is already grouped by rank, in rank order."""
        ranks = [r for r, _, _ in self._shown]
        return ranks == sorted(ranks)

    def flush(self) -> None:
        """Show what is left; then, when grouping, show the whole output again grouped by rank if needed;
        then what ``show`` left out, folded."""
        self.poll(final=True)
        if self.group and not self.in_rank_order():
            self._regroup()
        if self._hidden:
            self._show_hidden()

    def _regroup(self) -> None:
        from IPython.display import clear_output

        clear_output(wait=True)
        self._live_handle, self._live_text = None, ""
        for rank, name, what in sorted(self._shown, key=lambda item: item[0]):  # stable: each rank's own order
            if name == "display":
                self._display(what, rank)
            else:
                self._write(rank, name, what)
        self._shown.sort(key=lambda item: item[0])

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
                f"<pre>{html.escape(body)}</pre></details>",
            },
            raw=True,
        )
        self._hidden.clear()
