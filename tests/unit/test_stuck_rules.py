"""The pure rules of "busy is not hung" (issue 34), without engines: what a collective's fingerprint
holds, how a disagreement is said, the host's table of calls, and when ranks count as stuck — a rank
that runs is never stuck; ranks all blocked (or done) with nothing moving for the still time are."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from jupyter_mgpu import stack_merge
from jupyter_mgpu.engine.watch import collective_calls
from jupyter_mgpu.engine.watch.collective_table import CollectiveTable, crc
from jupyter_mgpu.session.hang_watch import diagnose, status_line

NOW = 1000.0


def _waiting(call: str, line: str, group: list[int], since: float = NOW - 3, key=("0", 5, 0), fp: str = "a") -> dict:
    label = f"{call.split()[0]} #{key[1]}"
    return {
        "state": "collective",
        "since": since,
        "collective": label,
        "call": call,
        "line": line,
        "group": group,
        "key": list(key),
        "fp": fp,
    }


def _running(line: str, since: float = NOW - 40) -> dict:
    return {"state": "running", "since": since, "collective": None, "line": line}


def test_a_fingerprint_holds_what_must_agree_and_says_it_in_words():
    x = torch.ones(4)
    assert collective_calls.fingerprint("all_reduce", {"tensor": x, "op": torch.distributed.ReduceOp.SUM}) == (
        "all_reduce|all_reduce float32[4]|sum",
        "all_reduce float32[4]",
    )
    fp, words = collective_calls.fingerprint("all_reduce", {"tensor": x.double(), "op": torch.distributed.ReduceOp.MAX})
    assert words == "all_reduce float64[4] (max)" and "max" in fp
    assert collective_calls.fingerprint("broadcast", {"tensor": x, "src": 1})[1] == "broadcast float32[4] from rank 1"
    assert collective_calls.fingerprint("gather", {"tensor": x, "dst": 0})[1] == "gather float32[4] to rank 0"
    a2a = collective_calls.fingerprint("all_to_all_single", {"input": torch.ones(3, 2)})
    assert a2a[1] == "all_to_all_single float32" and "[3" not in a2a[0]  # splits may differ across ranks
    assert collective_calls.fingerprint("barrier", {}) == ("barrier", "barrier")


def test_a_disagreement_groups_the_ranks_that_called_the_same():
    calls = {r: {"call": "all_reduce float32[4]", "line": "line 3 of the cell"} for r in (0, 1, 3)}
    calls[2] = {"call": "broadcast float32[4] from rank 0", "line": "line 5 of the cell"}
    assert collective_calls.mismatch_text(7, [0, 1, 2, 3], calls, 4) == (
        "the ranks called different collectives at #7: ranks 0, 1, 3: all_reduce float32[4] at line 3 of the "
        "cell; rank 2: broadcast float32[4] from rank 0 at line 5 of the cell"
    )
    assert " of group [0, 2]" in collective_calls.mismatch_text(1, [0, 2], {0: calls[0], 2: calls[2]}, 4)


def test_the_table_gives_a_peers_record_of_the_same_call_only(tmp_path):
    a, b = CollectiveTable(tmp_path, 2), CollectiveTable(tmp_path, 2)  # two ranks map one file
    a.write(0, "0", 3, 1, "all_reduce|f32[4]", "all_reduce float32[4]", "line 2 of the cell")
    assert b.fingerprint(0, "0", 3, 1) == a.fingerprint(0, "0", 3, 1) is not None
    assert b.record(0, "0", 3, 1) == {"call": "all_reduce float32[4]", "line": "line 2 of the cell"}
    assert b.fingerprint(0, "0", 4, 1) is None and b.fingerprint(0, "0", 3, 2) is None  # another call, generation
    assert b.fingerprint(1, "0", 3, 1) is None  # rank 1 wrote nothing
    b.write(1, "0", 3, 1, "broadcast|f32[4]", "broadcast", "line 3 of the cell")
    assert a.fingerprint(1, "0", 3, 1) != a.fingerprint(0, "0", 3, 1)
    at = a._offset(0, crc("0"), 3)
    a.map[at : at + 4] = b"\xff\xff\xff\x7f"  # a header caught half-written
    assert b.record(0, "0", 3, 1) is None


def test_a_peers_record_that_comes_to_agree_at_once_is_no_mismatch(tmp_path):
    """CI saw two ranks raise a mismatch at #118 whose records all named the same call a moment later: a
    record being replaced under the number is not a disagreement; one that stays different is."""
    a, b = CollectiveTable(tmp_path, 2), CollectiveTable(tmp_path, 2)
    b.write(1, "0", 9, 0, "barrier", "barrier", "line 2")
    threading.Timer(0.03, b.write, (1, "0", 9, 0, "all_to_all_single|float32", "all_to_all_single", "line 3")).start()
    t0 = time.monotonic()
    assert not a.differs(1, "0", 9, 0, crc("all_to_all_single|float32"), settle=2.0)
    assert time.monotonic() - t0 < 1.0
    assert a.differs(1, "0", 9, 0, crc("all_reduce|float32[4]"), settle=0.05)
    assert not a.differs(1, "0", 10, 0, crc("all_reduce|float32[4]"))  # no record of that call: nothing to compare


def test_a_rank_that_skipped_the_collective_and_finished_is_named():
    where = {
        0: _waiting("all_reduce float32[4]", "line 3 of the cell", [0, 1, 2]),
        2: _waiting("all_reduce float32[4]", "line 3 of the cell", [0, 1, 2]),
    }
    found = diagnose(where, done={1}, now=NOW, what="the cell")
    assert found is not None and found.kind == "hang" and found.release == [0, 2]
    assert found.text == (
        "the ranks are stuck: ranks 0, 2 wait in all_reduce float32[4] at line 3 of the cell; "
        "rank 1 finished the cell without calling it"
    )


def test_a_running_rank_is_busy_however_long_and_a_fresh_wait_is_not_stuck_yet():
    where = {0: _running("line 5 of the cell"), 1: _waiting("barrier", "line 6 of the cell", [0, 1])}
    assert diagnose(where, done=set(), now=NOW) is None
    young = {0: _waiting("barrier", "line 6", [0, 1], since=NOW - 1)}
    assert diagnose(young, done={1}, now=NOW) is None  # still for 1 s of the 2
    assert diagnose(young, done={1}, now=NOW + 1.5) is not None


def test_a_wait_sampled_before_its_peer_finished_is_not_judged_on_that_sample():
    """CI: rank 1's latest sample still showed DDP's bucket all_reduce both ranks had just passed when rank 0's
    result came back; a hang named on it released rank 1, and the next cell found its group's sockets shut."""
    bucket = _waiting("all_reduce float32[20] issued by torch", "line 6", [0, 1], since=NOW - 6)
    before = {**bucket, "sampled": NOW - 0.05}
    assert diagnose({1: before}, done={0}, now=NOW, done_at={0: NOW - 0.02}) is None
    assert diagnose({1: {**before, "sampled": NOW}}, done={0}, now=NOW, done_at={0: NOW - 0.02}) is not None
    idle = {"state": "idle", "since": NOW - 0.02, "collective": None, "line": None}  # since: when its call ended
    assert diagnose({0: idle, 1: before}, done=set(), now=NOW) is None
    assert diagnose({0: idle, 1: {**before, "sampled": NOW}}, done=set(), now=NOW) is not None


def test_a_rank_idle_since_its_last_call_has_not_begun_this_one_and_is_not_taken_for_finished():
    from jupyter_mgpu.session.hang_watch import HangWatch

    released: list[int] = []
    where: dict[int, dict] = {}
    watch = HangWatch(lambda: where, released.extend)
    watch.start_call()
    now = time.time()
    where[1] = {**_waiting("barrier", "line 2 of the cell", [0, 1], since=now - 3), "sampled": now}
    where[0] = {"state": "idle", "since": watch.started - 5, "collective": None, "line": None, "sampled": now}
    watch.watch([0, 1], set(), "the cell")
    assert watch.report is None and released == []  # rank 0 has not picked the call up yet (a loaded machine)
    where[0] = {**where[0], "since": watch.started + 0.5}  # it ran the cell and left without the barrier
    where[1] = {**where[1], "sampled": watch.started + 1}  # and rank 1 is seen waiting after that
    watch._next = 0.0
    watch.watch([1], set(), "the cell")
    assert released == [1] and watch.report is not None and "rank 0 finished the cell" in watch.report.text


def test_every_rank_of_a_group_in_the_very_same_collective_is_a_long_one_running_not_a_hang():
    """A large all_reduce (or DDP's bucket of a large model) takes its time on every rank: all arrived."""
    cpp = {"arrival": ["0", 8], "key": None}
    same = {r: {**_waiting("all_reduce float32[1000000] issued by torch", "line 4", [0, 1]), **cpp} for r in (0, 1)}
    assert diagnose(same, done=set(), now=NOW + 60) is None
    python = {r: _waiting("all_reduce float32[4]", "line 3", [0, 1], key=("0", 5, 0)) for r in (0, 1)}
    assert diagnose(python, done=set(), now=NOW + 60) is None
    apart = {0: same[0], 1: {**same[1], "arrival": ["0", 9]}}  # one rank a collective further: never meets
    assert diagnose(apart, done=set(), now=NOW) is not None
    mixed = {0: same[0], 1: python[1]}  # DDP's bucket on one rank, the user's all_reduce on the other
    assert diagnose(mixed, done=set(), now=NOW) is not None


def _p2p(op: str, me: int, peer: int | None, tag: int = 0, since: float = NOW - 60) -> dict:
    call = f"{op} {'to' if op == 'send' else 'from'} rank {peer}"
    group = sorted({me, peer}) if peer is not None else [0, 1, 2]
    return {"state": "collective", "since": since, "collective": call, "call": call, "line": "line 3",
            "group": group, "p2p": [op, peer, tag]}  # fmt: skip


def test_a_send_whose_recv_waits_on_the_other_rank_is_a_large_message_on_its_way_not_a_hang():
    """CI: a 128 MiB send and its recv on a loaded machine, both waiting past the still time, were named stuck
    and released; a pair that never meets (the same direction, another tag, a rank that left) still is."""
    pair = {0: _p2p("recv", 0, 1), 1: _p2p("send", 1, 0)}
    assert diagnose(pair, done=set(), now=NOW) is None
    assert diagnose({0: _p2p("recv", 0, None), 1: _p2p("send", 1, 0), 2: _running("line 9")}, set(), NOW) is None
    for apart in (
        {0: _p2p("send", 0, 1), 1: _p2p("send", 1, 0)},  # both send: each waits for a recv that never comes
        {0: _p2p("recv", 0, 1, tag=1), 1: _p2p("send", 1, 0, tag=2)},
        {0: _p2p("recv", 0, 1), 1: _p2p("send", 1, 2), 2: _p2p("recv", 2, 0)},  # a cycle of wrong peers
    ):
        found = diagnose(apart, done=set(), now=NOW)
        assert found is not None and found.release == sorted(apart), apart
    left = diagnose({0: _p2p("recv", 0, 1)}, done={1}, now=NOW)
    assert left is not None and "rank 1 finished the call without calling it" in left.text


def test_a_wait_on_a_subgroup_is_judged_by_that_group_only():
    where = {0: _waiting("barrier", "line 2", [0, 1], key=("1", 1, 0)), 2: _running("line 9")}
    found = diagnose(where, done={1}, now=NOW)
    assert found is not None and found.release == [0]  # rank 2 runs, but it is not in rank 0's group
    chained = {
        0: _waiting("barrier", "line 2", [0, 1], key=("1", 1, 0)),
        1: _waiting("barrier", "line 4", [1, 2], key=("2", 1, 0)),
        2: _running("line 9"),
    }
    assert diagnose(chained, done=set(), now=NOW) is None  # rank 1 may still go on once rank 2 joins


def test_different_fingerprints_at_one_number_are_a_mismatch_at_once():
    where = {
        0: _waiting("all_reduce float32[4]", "line 3 of the cell", [0, 1], since=NOW, fp="x"),
        1: _waiting("broadcast float32[4] from rank 0", "line 5 of the cell", [0, 1], since=NOW, fp="y"),
    }
    found = diagnose(where, done=set(), now=NOW)
    assert found is not None and found.kind == "mismatch" and found.release == [0, 1]
    assert found.text == (
        "the ranks called different collectives at #5: rank 0: all_reduce float32[4] at line 3 of the cell; "
        "rank 1: broadcast float32[4] from rank 0 at line 5 of the cell"
    )


@pytest.mark.parametrize("idle_as_done", [True])
def test_the_status_line_says_who_runs_and_who_waits(idle_as_done):
    where = {0: _running("line 3 of the cell", since=NOW - 45)}
    where.update(
        {r: _waiting("barrier", "line 6 of the cell", [0, 1, 2, 3], since=NOW - 44, key=("0", 7, 0)) for r in (1, 2, 3)}
    )
    assert status_line(where, NOW) == (
        "mgpu: rank 0 running line 3 of the cell for 45 s · ranks 1, 2, 3 waiting in barrier #7 for 44 s"
    )


def test_mgpu_where_shows_one_row_per_rank_as_text_and_html():
    from jupyter_mgpu.magics.rank_where import WhereTable

    rows = [
        {"rank": 0, "state": "running", "seconds": 45.2, "collective": None, "line": "line 3 of the cell", "stack": []},
        {"rank": 1, "state": "collective", "seconds": 44.0, "collective": "barrier #7", "line": "line 6 of the cell"},
        {"rank": 2, "state": "unknown", "seconds": None, "collective": None, "line": None},
    ]
    table = WhereTable(rows)
    assert repr(table).splitlines() == [
        "rank  state       for   collective  line",
        "0     running     45 s              line 3 of the cell",
        "1     collective  44 s  barrier #7  line 6 of the cell",
        "2     unknown",
    ]
    assert table._repr_html_().startswith("<table class='mgpu-where'>") and "<td>barrier #7</td>" in table._repr_html_()


def test_a_collectives_bytes_are_counted_as_nccl_tests_counts_them():
    x = torch.ones(4)  # 16 bytes
    assert collective_calls.message_bytes("all_reduce", {"tensor": x}, 4) == 16
    assert (
        collective_calls.message_bytes("all_gather", {"tensor": x, "tensor_list": [x] * 4}, 4) == 64
    )  # the whole output
    assert collective_calls.message_bytes("reduce_scatter_tensor", {"input": torch.ones(16), "output": x}, 4) == 64
    assert collective_calls.message_bytes("all_to_all", {"input_tensor_list": [x, x]}, 2) == 32
    assert collective_calls.message_bytes("barrier", {}, 4) == 0


def test_ranks_are_said_as_ranges_with_their_count():
    from jupyter_mgpu.session.stack_tree import rank_span

    assert rank_span is stack_merge.rank_span  # one way of naming ranks, in the notebook and the sidebar
    assert rank_span([4]) == "rank 4" and rank_span([1, 0]) == "ranks 0, 1"
    assert rank_span([*range(60), 62]) == "ranks 0–59, 62 (61)"
    assert rank_span([0, 2, 3, 5, 6, 7]) == "ranks 0, 2, 3, 5–7 (6)"


def _row(r, state, stack, collective=None):
    return {"rank": r, "state": state, "collective": collective, "line": stack[-1] if stack else None, "stack": stack}


def test_sixteen_ranks_in_three_places_are_one_tree_counted_per_frame():
    from jupyter_mgpu.session.stack_tree import StackTree

    top = "line 9 of the cell: train(model)"
    rows = [_row(r, "collective", [top, "line 4 of train() in model.py"], "all_reduce #8") for r in range(12)]
    rows += [_row(r, "running", [top, "line 3 of train() in model.py"]) for r in (12, 13, 14)]
    rows += [_row(15, "debugging", ["line 2 of the cell: check()"])]
    tree = StackTree(rows)
    assert repr(tree).splitlines() == [
        "the user's frames of ranks 0–15 (16)",
        "  line 9 of the cell: train(model)                              ranks 0–14 (15)",
        "    line 4 of train() in model.py  ·  waiting in all_reduce #8  ranks 0–11 (12)",
        "    line 3 of train() in model.py  ·  running                   ranks 12–14 (3)",
        "  line 2 of the cell: check()  ·  at a pdb prompt               rank 15",
    ]
    html = tree._repr_html_()
    assert html.count("<tr>") == 5 and "ranks 0–11 (12)" in html


def test_a_hang_of_more_than_four_ranks_says_them_as_ranges_and_draws_the_tree():
    from jupyter_mgpu.session.rank_errors import build_error

    now = 1000.0
    where = {
        r: {
            "state": "collective",
            "since": now - 5,
            "collective": "all_reduce #3",
            "call": "all_reduce float32[4]",
            "line": "line 4 of the cell, in step()",
            "group": list(range(8)),
            "key": ["g", 3, 0],
            "fp": "x",
            "stack": ["line 9 of the cell: step()", "line 4 of the cell, in step()"],
        }
        for r in range(6)
    }
    where.update({6: {"state": "idle", "since": now - 5}, 7: {"state": "idle", "since": now - 5}})
    found = diagnose(where, set(), now, "the cell")
    assert found.text == (
        "the ranks are stuck: ranks 0–5 (6) wait in all_reduce float32[4] at line 4 of the cell, in step(); "
        "ranks 6, 7 finished the cell without calling it"
    )
    err = str(build_error({r: {"collective_failure": True} for r in range(6)}, stuck=found))
    sentence, *tree = err.splitlines()
    assert sentence.endswith("; ranks 0–5 (6) released at once"), sentence
    assert tree[0] == "the user's frames of ranks 0–7 (8)" and tree[1].split() == [
        "finished",
        "the",
        "cell",
        "ranks",
        "6,",
        "7",
    ]
    assert tree[-1].endswith("waiting in all_reduce #3  ranks 0–5 (6)"), tree
    four = {r: w for r, w in where.items() if r < 3} | {3: where[6]}
    for w in four.values():
        w["group"] = [0, 1, 2, 3]
    assert diagnose(four, set(), now, "the cell").tree == ""  # four ranks: the sentence says it all


def test_the_sidebar_s_tree_lines_are_the_notebook_s_and_idle_ranks_end_at_the_root():
    rows = [_row(0, "idle", []), _row(1, "running", ["line 3 of the cell: wait_here()", "line 2 of wait_here()"])]
    assert stack_merge.lines(stack_merge.merge(rows)) == [
        (0, "idle", "rank 0"),
        (0, "line 3 of the cell: wait_here()", "rank 1"),
        (1, "line 2 of wait_here()  ·  running", "rank 1"),
    ]
