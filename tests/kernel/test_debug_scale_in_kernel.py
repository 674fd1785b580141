"""Debugging all ranks at once at 16 ranks (issue 45), in one real ipykernel answered through stdin as a
notebook's input box answers: every rank stopped at one breakpoint, ``:where`` drawing their stacks as one
tree in three groups, a cast ``p`` answered in one reply with the odd rank apart, ``n`` stepping the group,
``c`` finishing the cell; ``%mgpu_debug --all`` with a cast after a failure on several ranks; a hang past
four ranks drawn as a tree under its error (``session/rank_debugging.py``, ``session/debug_cast.py``,
``session/stack_tree.py``). Its speed is ``benchmarks/debug_scale.py``'s."""

from __future__ import annotations

import re

import pytest
from kernel_client import Kernel, debug
from processes import wait_gone

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

N = 16
ALL = "ranks 0–15 (16)"
CELL = """%%mgpu
def check(v):
    breakpoint()
    w = v * 2
    return w
def forward(v):
    return check(v)
def backward(v):
    return check(v)
def step(v):
    return check(v)
value = float('nan') if rank == 7 else 1.0
fn = forward if rank < 10 else backward if rank < 15 else step
out = fn(value)
"""


def named_ranks(words: str) -> set[int]:
    """The ranks a message names: ``rank 3``, ``ranks 0, 2, 5`` or ``ranks 0–2, 4–15 (15)``."""
    ranks: set[int] = set()
    for part in re.sub(r"^ranks? | \(\d+\)$", "", words).split(", "):
        low, _, high = part.partition("–")
        ranks.update(range(int(low), int(high or low) + 1))
    return ranks


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    pids: list[int] = []
    try:
        pids = k.start_cluster(N, "--timeout 30")
        yield k
        k.km.shutdown_kernel(now=False)
    finally:
        k.close()
    assert wait_gone(pids, 20) == []


def test_sixteen_ranks_at_one_breakpoint_drawn_as_a_tree_cast_p_n_and_c(kernel):
    reply, prompts, out = debug(kernel, CELL, [":all", ":where", "p value", "n", "p w", "c"], timeout=120)
    assert reply["status"] == "ok", out
    # the lowest rank at a prompt when the desk looks is served first (rank 0 once all 16 have stopped; on a
    # loaded machine another may stop first), its prompt naming the others already waiting as ranges
    # ("ranks 1–15 (15)"); after :all every line goes to all 16
    first = re.fullmatch(r"\(Pdb rank (\d+)\) ", prompts[0])
    assert first and prompts[1:] == [f"(Pdb {ALL}) "] * 5, prompts
    also = re.search(rf"mgpu: (.+) also waits? at a pdb prompt, served after rank {first[1]} ", out)
    if also:
        others = named_ranks(also[1])
        assert int(first[1]) not in others and others <= set(range(N)), also[1]
        assert others != set(range(1, N)) or also[1] == "ranks 1–15 (15)", also[1]
    assert "not at a prompt" not in out, out
    # :where: three groups of stacks, the ranks counted and named as ranges, all at the prompt in check()
    tree = [line.split("  ") for line in out[out.index("the user's frames of") :].splitlines()[:8]]
    assert [[w.strip() for w in words if w.strip()] for words in tree] == [
        [f"the user's frames of {ALL}"],
        ["line 14 of the cell", ALL],
        ["line 7 of the cell, in forward()", "ranks 0–9 (10)"],
        ["line 4 of the cell, in check()", "·", "at a pdb prompt", "ranks 0–9 (10)"],
        ["line 9 of the cell, in backward()", "ranks 10–14 (5)"],
        ["line 4 of the cell, in check()", "·", "at a pdb prompt", "ranks 10–14 (5)"],
        ["line 11 of the cell, in step()", "rank 15"],
        ["line 4 of the cell, in check()", "·", "at a pdb prompt", "rank 15"],
    ], out
    # p: one reply, the 15 equal answers once, rank 7's apart
    assert "ranks 0–6, 8–15 (15): 1.0 · rank 7: nan" in out, out
    # n stepped every rank of the group over `w = v * 2`: one answer for all 16, then p w differs on rank 7
    assert f"{ALL}:\n> <mgpu-cell-" in out and out.count("-> return w") == 1, out
    assert "ranks 0–6, 8–15 (15): 2.0 · rank 7: nan" in out, out
    # c finished the cell on every rank: its values are there
    reply, prompts, out = debug(kernel, "%%mgpu --targets 6,7,8\nout", [])
    assert reply["status"] == "ok" and prompts == [], out
    assert "Out[rank 6]: 2.0" in out and "Out[rank 7]: nan" in out and "Out[rank 8]: 2.0" in out, out


def test_a_cast_to_four_of_sixteen_then_to_the_rest(kernel):
    """``:ranks 12-15`` asks four ranks and lets them go; the other twelve are then served, and ``:all`` names
    the four that already went on."""
    answers = [":ranks 12-15", "p rank * 10", "c", ":all", "p rank < 12", "c"]
    reply, prompts, out = debug(kernel, "%%mgpu\nbreakpoint()\nseen = rank", answers, timeout=120)
    assert reply["status"] == "ok", out
    assert prompts[1:3] == ["(Pdb ranks 12–15 (4)) "] * 2 and prompts[3] == "(Pdb rank 0) ", prompts
    assert prompts[4:] == ["(Pdb ranks 0–11 (12)) "] * 2, prompts
    assert "rank 12: 120 · rank 13: 130 · rank 14: 140 · rank 15: 150" in out, out
    assert "mgpu: ranks 12, 13, 14, 15 of the group are not at a prompt" in out, out
    assert "ranks 0–11 (12): True" in out and "False" not in out, out


def test_mgpu_debug_all_after_a_failure_on_five_ranks_answers_a_cast_for_all(kernel):
    failing = (3, 7, 11, 12, 13)
    reply, _, out = debug(
        kernel,
        f"%%mgpu\ndef g(v):\n    local_value = v * 11\n    if v in {failing}:\n        1 / 0\n    return v\ng(rank)",
        [],
        timeout=120,
    )
    assert reply["status"] == "error" and "ZeroDivisionError" in reply["evalue"], reply["evalue"]
    group = "ranks 3, 7, 11–13 (5)"
    reply, prompts, out = debug(kernel, "%mgpu_debug --all", [":ranks 3,7,11-13", "p local_value", "c"], timeout=120)
    assert reply["status"] == "ok", out
    assert f"mgpu: post-mortem on {group}; :all casts each line to them" in out, out
    assert prompts[0] == "(Pdb rank 3) " and prompts[1:] == [f"(Pdb {group}) "] * 2, prompts
    assert " · ".join(f"rank {r}: {r * 11}" for r in failing) in out, out
    assert "not at a prompt" not in out, out


def test_a_hang_of_sixteen_ranks_draws_their_three_places_as_a_tree_under_the_error(kernel):
    code = (
        "%%mgpu\nt = torch.ones(2)\ndef forward():\n    dist.all_reduce(t)\ndef backward():\n    dist.all_reduce(t)\n"
        "if rank < 10:\n    forward()\nelif rank < 14:\n    backward()\n"
    )
    reply, prompts, out = debug(kernel, code, [], timeout=120)
    assert reply["status"] == "error" and reply["ename"] == "CollectiveHangError", reply
    sentence, *tree = reply["evalue"].splitlines()
    assert sentence.startswith(
        "the ranks are stuck: ranks 0–9 (10) wait in all_reduce float32[2] at line 4 of the cell, in forward(); "
        "ranks 10, 11, 12, 13 wait in all_reduce float32[2] at line 6 of the cell, in backward(); "
    ), sentence
    assert "ranks 14, 15 finished the cell without calling it" in sentence, sentence
    words = [[w.strip() for w in line.split("  ") if w.strip()] for line in tree]
    assert words[0] == [f"the user's frames of {ALL}"], tree
    assert ["finished the cell", "ranks 14, 15"] in words, tree
    assert ["line 8 of the cell", "ranks 0–9 (10)"] in words and ["line 10 of the cell", "ranks 10–13 (4)"] in words
    waits = [w for w in words if w[-1] in ("ranks 0–9 (10)", "ranks 10–13 (4)") and "waiting in" in " ".join(w)]
    assert len(waits) == 2, tree
    # the session goes on: the group is rebuilt and a collective of all 16 is right
    reply, _, out = debug(kernel, "%%mgpu\nx = torch.ones(1)\ndist.all_reduce(x)\nx.item()", [])
    assert reply["status"] == "ok" and "16.0" in out and "Out[rank 0]: 1.0" not in out, out
