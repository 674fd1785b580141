"""notebooks/11_debugging_on_the_ranks.ipynb, run in real JupyterLab with Chromium, a person typing at
the input box (``tests/browser/notebook_hooks/11_debugging_on_the_ranks.mjs``): a bug only rank 2 has,
opened with ``%mgpu_debug --rank 2``, ``%mgpu_where`` showing rank 2 at its prompt while the others wait,
a ``breakpoint()`` stepped through on rank 2 only (its prompt served before the next cell runs), and
``PYTHONBREAKPOINT=0`` skipping it; then eight ranks, the bad one found with ``:where``'s tree and a cast."""

from labrun import assert_page_is_clean, notebook_module

SHOTS = {
    "01_post_mortem": "%mgpu_debug --rank 2",
    "02_where": "pending = _",
    "03_breakpoint": "pending.get()",
    "04_cast": "%%mgpu\nscale = ",
    "05_eight_ranks": "%%mgpu\ndef check(loss)",
}

pytestmark, run = notebook_module("11_debugging_on_the_ranks.ipynb", SHOTS, timeout_s=300)


def test_the_person_was_asked_by_rank_2_only_and_typed_every_answer(run):
    typed = run.steps["stdin"]["typed"]
    answers = ["p xs", "u", "p readings[rank]", "q", "n", "p mean", "c", ":all", "p scale", "c"]
    answers += [":where", ":all", "p lr, loss", "c"]
    assert [t["answer"] for t in typed] == answers
    assert {t["prompt"] for t in typed[:7]} == {"(Pdb rank 2) "}
    assert (
        typed[7]["prompt"].startswith("(Pdb rank ")
        and [t["prompt"] for t in typed[8:10]] == ["(Pdb ranks 0–3 (4)) "] * 2
    )
    # eight ranks: :where at the first rank's own prompt (asked again after the tree), then the cast
    assert typed[10]["prompt"] == typed[11]["prompt"] and typed[10]["prompt"].startswith("(Pdb rank ")
    assert [t["prompt"] for t in typed[12:]] == ["(Pdb ranks 0–7 (8)) "] * 2


def test_a_cast_asks_every_rank_once_and_the_odd_rank_stands_out(run):
    cast = run.text["%%mgpu\nscale = "]
    assert "ranks 0–2 (3): tensor([1., 1., 1.]) · rank 3: tensor([1.0000, 1.0000, 0.5000])" in cast, cast
    compared = run.text["import jupyter_mgpu as mg\n\nmg.compare_values"]
    assert "scale: 2 different values" in compared, compared
    assert "first differs at [2]: 0.5 here, 1.0 on rank 0" in compared, compared


def test_the_failure_names_rank_2_and_the_post_mortem_shows_its_values(run):
    text = run.text
    failed = text["%%mgpu\nreadings = "]
    assert "ZeroDivisionError on rank 2: division by zero" in failed and "average()" in failed
    assert "ranks 0, 1, 3 were left waiting in a collective" in failed
    debugged = text["%mgpu_debug --rank 2"]
    assert "post-mortem on rank 2" in debugged
    assert "-> return total / len(xs)" in debugged and debugged.count("[]") >= 2  # xs, then readings[rank]


def test_where_shows_rank_2_debugging_and_the_others_waiting(run):
    where = run.text["pending = _"]
    rows = {line.split()[0]: line for line in where.splitlines() if line[:1].isdigit()}
    assert "debugging" in rows["2"], where
    for r in "013":
        assert "collective" in rows[r] and "all_reduce" in rows[r], where


def test_a_line_under_the_noblock_cell_says_rank_2_waits_while_it_does(run):
    line = run.steps["stdin"]["lineUnder"]
    assert "mgpu: rank 2 waits at a pdb prompt at line 7 of the cell: run any cell to answer it" in line, line
    shown = str(run.outputs("%%mgpu --noblock"))
    assert "PendingResult" in shown and "waits at a pdb prompt" not in shown, shown  # gone once it was served


def test_the_breakpoint_steps_on_rank_2_and_the_all_reduce_completes(run):
    got = run.text["pending.get()"]
    assert "mgpu: rank 2 of the --noblock cell waits at a pdb prompt: answered here, before this cell runs" in got
    assert "(Pdb rank 2)  p mean\ntensor([0.])\n" in got  # rank 2's own value: the fix gives 0, not a crash
    assert "Out[ranks 0–3]: 13.75" in got  # 3.75 + 5.0 + 0.0 + 5.0, the same float on every rank: once
    assert "0.0" in run.text['%%mgpu\nimport os\nos.environ["PYTHONBREAKPOINT"]']


def test_eight_ranks_the_tree_puts_rank_5_apart_and_a_cast_shows_its_overflowed_loss(run):
    got = run.text["%%mgpu\ndef check(loss)"]
    tree = [
        [w.strip() for w in line.split("  ") if w.strip()]
        for line in got[got.index("the user's frames") :].splitlines()
    ]
    assert tree[0] == ["the user's frames of ranks 0–7 (8)"], got
    assert ["line 7 of the cell, in train_step()", "ranks 0–4, 6, 7 (7)"] in tree, got
    assert ["line 10 of the cell, in skip_step()", "rank 5"] in tree, got
    assert "ranks 0–4, 6, 7 (7): (0.1, tensor(0.0300)) · rank 5: (1e+30, tensor(inf))" in got, got
    assert "not at a prompt" not in got, got


def test_page_is_clean(run):
    assert_page_is_clean(run)
