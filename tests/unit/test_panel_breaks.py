"""The debugger panel's breakpoints as a rank's pdb takes them (``engine/execution/panel_breaks.py``): the cell's
and other files', conditions naming ``rank`` in any file, and DAP's hit conditions."""

from __future__ import annotations

from jupyter_mgpu.engine.execution.panel_breaks import hit_count, places, with_rank


def test_the_cells_lines_and_other_files_breakpoints_with_conditions_and_hits():
    assert places("<mgpu-cell-3>", [3, 5]) == [("<mgpu-cell-3>", 3, None, None), ("<mgpu-cell-3>", 5, None, None)]
    breaks = {"cell": [[4, "x > 1", None]], "files": {"/w/helper.py": [[2, None, 3], [9, "rank == 2", None]]}}
    assert places("<c>", breaks) == [
        ("<c>", 4, "x > 1", None),
        ("/w/helper.py", 2, None, 3),
        ("/w/helper.py", 9, "rank == 2", None),
    ]
    assert places("<c>", None) == [] and places("<c>", {}) == []


def test_rank_in_a_condition_is_this_ranks_number_but_an_attribute_named_rank_is_left():
    cond = with_rank("rank == 2 and batch.rank < world_size", 2, 4)
    assert eval(cond, {"batch": type("B", (), {"rank": 1})}) is True
    assert eval(with_rank("rank == 2", 1, 4), {}) is False  # no name rank needed in the frame


def test_dap_hit_conditions_give_the_hit_to_stop_at():
    assert [hit_count(c) for c in ("3", "== 3", ">= 3", "", None, "x", "0")] == [3, 3, 3, None, None, None, None]
