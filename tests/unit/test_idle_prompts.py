"""What a ``--noblock`` call's ranks at a pdb prompt are said as while the notebook is idle, and which cells
run before their prompts are served (``session/idle_prompts.py``; served in a kernel:
``tests/kernel/test_rank_debugger_in_kernel.py``)."""

from __future__ import annotations

from jupyter_mgpu.session import idle_prompts


def test_the_status_line_names_the_ranks_their_line_and_how_to_answer():
    assert idle_prompts.status_text({}) == ""
    assert idle_prompts.status_text({2: "line 6 of the cell"}) == (
        "mgpu: rank 2 waits at a pdb prompt at line 6 of the cell: run any cell to answer it"
    )
    many = dict.fromkeys(range(1, 9), "line 3 of the cell")
    assert idle_prompts.status_text(many) == (
        "mgpu: ranks 1–8 (8) wait at a pdb prompt at line 3 of the cell: run any cell to answer them"
    )
    # ranks on different lines: the line is left out rather than naming one of them
    assert idle_prompts.status_text({0: "line 3 of the cell", 3: "line 5 of the cell"}) == (
        "mgpu: ranks 0, 3 wait at a pdb prompt: run any cell to answer them"
    )


def test_cells_that_only_look_at_the_ranks_run_before_the_prompts_are_served():
    assert idle_prompts.looks_only("%mgpu_where")
    assert idle_prompts.looks_only("pending = _\n%mgpu_where --tree")
    assert idle_prompts.looks_only("mg.where(merge=True)")
    assert not idle_prompts.looks_only("pending.get()")
    assert not idle_prompts.looks_only("%%mgpu\nx = 1")
    assert idle_prompts.looks_only("s.where()  # the session's own")
    assert idle_prompts.looks_only("import jupyter_mgpu as _mg\nprint(_mg.where()[0]['line'])")
    assert not idle_prompts.looks_only("y = torch.where(x > 0, x, 0)")  # work, though it says where(
    assert not idle_prompts.looks_only("%mgpu_where\nmg.matmul(a, b)")  # a look, then work
    assert not idle_prompts.looks_only("")
    # notebook 11's look: it waits for rank 2 to reach its prompt, which must not be answered first
    assert idle_prompts.looks_only("pending = _\nimport time; time.sleep(1.5)   # let the ranks get there\n%mgpu_where")
    assert not idle_prompts.looks_only("import time; x = work()")
    assert not idle_prompts.looks_only("time.sleep(n)")  # a wait on a notebook value: its own cell of work
    assert idle_prompts.serve_pending("%mgpu_status") == 0  # a look: nothing is served, whatever waits


def test_outside_a_kernel_nothing_is_watched():
    before = list(idle_prompts._watches)
    idle_prompts.watch(object())  # type: ignore[arg-type]  # never looked at: no kernel here
    assert idle_prompts._watches == before
