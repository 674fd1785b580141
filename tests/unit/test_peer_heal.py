"""The pure parts of ``mg.restart`` and ``mg.heal``: what a restart says, and a cell's function copied to a new
rank reading that rank's namespace (``session/rank_restart.py``, ``engine/execution/peer_heal.py``)."""

from __future__ import annotations

import pickle

import cloudpickle

from jupyter_mgpu.engine.execution import peer_heal
from jupyter_mgpu.session.rank_restart import Restarted


def test_a_restart_says_what_the_new_ranks_lack_and_counts_past_eight():
    one = Restarted([2], {2: 99}, 1.04, ["model", "opt"])
    assert str(one).splitlines() == [
        "rank 2 started again in 1.0 s; the process group was rebuilt",
        "rank 2 is new: model, opt are not defined there",
        "(mg.heal copies them from a peer, or run their cells again)",
    ]
    many = Restarted([1, 3], {1: 5, 3: 6}, 2.0, [f"n{i}" for i in range(11)])
    assert "\nranks 1, 3 are new: n0, n1, n2, n3, n4, n5, n6, n7 and 3 more are not defined there\n" in str(many)
    long = Restarted([1], {1: 5}, 2.0, ["a_rather_long_name_" + str(i) for i in range(5)])
    assert "new: a_rather_long_name_0, a_rather_long_name_1 and 3 more are not" in str(long)  # 60 characters
    assert str(Restarted([0], {0: 1}, 0.5)) == "rank 0 started again in 0.5 s; the process group was rebuilt"


def test_a_cells_function_copied_to_a_new_rank_reads_that_ranks_namespace():
    peer_ns: dict = {"scale": 2}
    exec("def f(x, *, plus=1):\n    '''doc'''\n    return x * scale + plus", peer_ns)
    copied = pickle.loads(cloudpickle.dumps(peer_ns["f"]))  # by value, with a globals dict of its own
    new_ns: dict = {"scale": 10}
    bound = peer_heal._in_namespace(copied, new_ns)
    assert bound(3) == 31 and bound(3, plus=0) == 30 and bound.__doc__ == "doc"
    new_ns["scale"] = 100  # a later cell on the new rank changes it: the function sees it, as a cell's does
    assert bound(1) == 101 and bound.__globals__ is new_ns
