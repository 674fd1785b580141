"""Cast: one pdb command to many ranks at once (``session/rank_debugging.py`` serves it).

At any rank's prompt, ``:all``, ``:ranks 0-3,6`` or ``:rank 2`` chooses the ranks the following commands go
to; the prompt then names them (``(Pdb ranks 0–3 (4)) ``). Every rank of the group that sits at a prompt
gets the line, and their answers come back as one reply, equal answers once (``ranks 0–2 (3):
torch.Size([4, 8]) · rank 3: torch.Size([3, 8])``); ``c``, ``n``, ``s`` step the group together. Monarch's
``monarch debug`` casts the same way; Linaro DDT calls such a set a process group. ``:where`` (or ``:tree``) at
any prompt draws every rank's stack as one tree (``session/stack_tree.py``), the ranks counted per frame.
"""

from __future__ import annotations

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.session.stack_tree import rank_span

TREE_WORDS = (":where", ":tree")


def asks_tree(line: str) -> bool:
    """Whether ``line`` asks for every rank's stack as one tree (``:where``, ``:tree``)."""
    return line.strip() in TREE_WORDS


def parse_group(line: str, world_size: int) -> list[int] | None:
    """The ranks a ``:`` line names, or None when the line is not a cast command; raises a one-sentence
    :class:`MgpuError` for a group it cannot read."""
    words = line.strip().split(None, 1)
    if not words or not words[0].startswith(":"):
        return None
    word, rest = words[0][1:], (words[1] if len(words) > 1 else "").replace(" ", "")
    if word == "all" and not rest:
        return list(range(world_size))
    if word not in ("rank", "ranks") or not rest:
        raise MgpuError(f"{line.strip()!r} is not a cast: write :all, :ranks 0-3 or :rank 2 (:where draws the tree)")
    ranks: set[int] = set()
    for part in rest.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise MgpuError(f"{part!r} in {line.strip()!r} is not a rank or a range of ranks such as 0-3")
        ranks.update(range(int(lo), int(hi or lo) + 1))
    outside = sorted(r for r in ranks if r >= world_size)
    if outside:
        raise MgpuError(
            f"{rank_span(outside)} {'is' if len(outside) == 1 else 'are'} not in this session (0 to {world_size - 1})"
        )
    return sorted(ranks)


def prompt_of(ranks: list[int]) -> str:
    """``(Pdb ranks 0–3 (4)) ``: the prompt of a group at its prompts."""
    return f"(Pdb {rank_span(ranks)}) "


def grouped_answers(answers: dict[int, str]) -> str:
    """The ranks' answers to one command, equal ones once: ``ranks 0–2 (3): 4 · rank 3: 5`` when every answer
    is one line, else each group's ranks on a line of their own above its answer."""
    by_text: dict[str, list[int]] = {}
    for r in sorted(answers):
        by_text.setdefault(answers[r].rstrip("\n"), []).append(r)
    if all("\n" not in text for text in by_text):
        return " · ".join(f"{rank_span(ranks)}: {text}" for text, ranks in by_text.items())
    return "\n".join(f"{rank_span(ranks)}:\n{text}" for text, ranks in by_text.items())
