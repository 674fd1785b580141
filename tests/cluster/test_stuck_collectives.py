"""Busy is not hung (issue 34), on real clusters started with the default options (torch's own collective
timeout, 30 min for gloo): a rank computing for a long time before a barrier is busy and the cell
passes, while mg.where() shows who is where; a rank that skips a collective, or ranks that call
different ones (op, shape, dtype, root), are named within seconds with every rank's call and line,
and the next collective is right. The same in %mgpu_run scripts and in calls through Session.run."""

from __future__ import annotations

import textwrap
import threading
import time

import pytest

from jupyter_mgpu.errors import CollectiveHangError, CollectiveMismatchError, MgpuError

pytestmark = pytest.mark.cluster

NAMED_WITHIN = 20.0  # "within seconds": far from torch's 30 min collective timeout, yet a loaded machine (another worker, a busy node) passes


@pytest.fixture(scope="module")
def default_sessions():
    """``default_sessions(n)``: an n-rank session started with no options but cpu (one per size)."""
    from processes import cluster_pids, wait_gone

    from jupyter_mgpu.session.lifecycle import start_session

    made: dict[int, object] = {}

    def get(n: int):
        if n not in made:
            made[n] = start_session(n, cpu=True)
        return made[n]

    yield get
    pids = [p for s in made.values() for p in cluster_pids(s)]
    for s in made.values():
        s.shutdown()
    assert wait_gone(pids) == []


def _sum_is_right(s) -> None:
    n = s.world_size
    out = s.run_cell("x = torch.ones(2) * (rank + 1)\ndist.all_reduce(x)\nx.tolist()", stream=False)
    assert out == [str([float(n * (n + 1) // 2)] * 2)] * n


def _fails_within(s, code: str, error: type, seconds: float = NAMED_WITHIN) -> str:
    start = time.monotonic()
    with pytest.raises(MgpuError) as info:
        s.run_cell(textwrap.dedent(code), stream=False)
    took = time.monotonic() - start
    # another error says what each rank raised in full (a report's text is cut short in pytest's locals)
    raised = {r: f"{f.get('ename')}: {f.get('evalue')}" for r, f in (getattr(info.value, "errors", None) or {}).items()}
    assert isinstance(info.value, error), f"{type(info.value).__name__} after {took:.1f} s: {info.value}; {raised}"
    assert took < seconds, f"named after {took:.1f} s: {info.value}"
    _sum_is_right(s)  # the group was rebuilt: the next collective is right
    return str(info.value)


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_a_skipped_all_reduce_is_named_with_each_ranks_place(default_sessions, n):
    s = default_sessions(n)
    msg = _fails_within(s, "x = torch.ones(4)\nif rank != 1:\n    dist.all_reduce(x)\n", CollectiveHangError)
    waiting = "rank 0 waits" if n == 2 else "ranks 0, 2, 3 wait"
    assert f"the ranks are stuck: {waiting} in all_reduce float32[4] at line 3 of the cell" in msg, msg
    assert "rank 1 finished the cell without calling it" in msg, msg


@pytest.mark.parametrize("n", [2])  # many waiting ranks are grouped in the skipped all_reduce's 4-rank case
def test_a_barrier_skipped_inside_a_helper_names_the_helpers_line(default_sessions, n):
    s = default_sessions(n)
    code = "def sync():\n    dist.barrier()\n\nif rank != n - 1:\n    sync()\n".replace("n - 1", str(n - 1))
    msg = _fails_within(s, code, CollectiveHangError)
    assert "in barrier at line 2 of the cell, in sync()" in msg, msg
    assert f"rank {n - 1} finished the cell without calling it" in msg, msg


MISMATCHES = {
    "op": (
        "x = torch.ones(4)\nif rank == 0:\n    dist.all_reduce(x)\nelse:\n    dist.broadcast(x, src=0)\n",
        ["all_reduce float32[4] at line 3 of the cell", "broadcast float32[4] from rank 0 at line 5 of the cell"],
    ),
    "shape": (
        "x = torch.ones(4 + (rank > 0))\ndist.all_reduce(x)\n",
        ["all_reduce float32[4] at", "all_reduce float32[5] at"],
    ),
    "dtype": (
        "x = torch.ones(4, dtype=torch.float64 if rank else torch.float32)\ndist.all_reduce(x)\n",
        ["all_reduce float32[4] at line 2", "all_reduce float64[4] at line 2"],
    ),
    "src": (
        "x = torch.ones(4)\ndist.broadcast(x, src=min(rank, 1))\n",
        ["from rank 0 at line 2", "from rank 1 at line 2"],
    ),
}


# every case on 2 ranks; on 4 the op case only: the others name the same calls (and send/recv's test below
# checks the grouping of 3 agreeing ranks in a mismatch)
@pytest.mark.parametrize(
    "case, n", [(c, 2) for c in sorted(MISMATCHES)] + [pytest.param("op", 4, marks=pytest.mark.slow)]
)
def test_ranks_calling_different_collectives_are_named_at_once(default_sessions, n, case):
    s = default_sessions(n)
    code, calls = MISMATCHES[case]
    msg = _fails_within(s, code, CollectiveMismatchError)
    assert msg.startswith("the ranks called different collectives at #"), msg
    for call in calls:
        assert call in msg, msg
    assert "rank 0" in msg and ("rank 1" in msg or "ranks 1" in msg), msg


EVERY_RANK_WRITES_FIRST = """
from jupyter_mgpu.engine.watch import collective_watch as _cw
_table, _write = _cw._table, _cw._table.write
def _held_write(r, group, number, generation, *rest):  # compared only once every rank has written its record
    _write(r, group, number, generation, *rest)
    end = time.monotonic() + 2
    while time.monotonic() < end and any(_table.fingerprint(p, group, number, generation) is None for p in range(world_size)):
        time.sleep(0.005)
"""


def test_a_mismatch_every_rank_found_before_joining_leaves_no_record_for_the_next_call(default_sessions):
    """Every rank found the mismatch and none joined, so no sequence number moved; each rank's record of the
    call that never ran stays in the table under the number its next collective takes. A rank that reaches
    the next call first must not be compared with a slower peer's record of the failed one (it was, about
    once in six full runs, when the ranks of the 4-rank src case all raised): the group is rebuilt."""
    s = default_sessions(2)
    s.run_cell("import time\n" + EVERY_RANK_WRITES_FIRST, stream=False)
    cell = "_table.write = _held_write\ntry:\n    dist.broadcast(torch.ones(4), src=rank)\nfinally:\n    _table.write = _write\n"
    with pytest.raises(CollectiveMismatchError) as info:
        s.run_cell(cell, stream=False)
    assert "rank 0: broadcast float32[4] from rank 0" in str(info.value), str(info.value)
    assert "rank 1: broadcast float32[4] from rank 1" in str(info.value), str(info.value)
    assert "was left waiting" not in str(info.value), str(info.value)  # neither joined
    out = s.run_cell(
        "if rank:\n    time.sleep(0.3)\nx = torch.ones(2) * (rank + 1)\ndist.all_reduce(x)\nx.tolist()", stream=False
    )
    assert out == [str([3.0, 3.0])] * 2


def _group_timeout() -> float:
    import torch
    from torch.distributed import distributed_c10d as c10d

    return float(c10d._get_default_group()._get_backend(torch.device("cpu")).options._timeout.total_seconds())


@pytest.mark.slow
def test_long_work_on_one_rank_before_a_barrier_is_busy_not_hung(default_sessions):
    """Work many times ``--hang-after`` (2 s) before a barrier the others wait in: never named, never cut
    short. With default options the group keeps torch's own collective timeout (30 min for gloo), not the
    session's 60 s for waits: checked on the group itself rather than by 75 s of real waiting."""
    from torch.distributed import distributed_c10d as c10d

    s = default_sessions(4)
    assert s.run(_group_timeout) == [c10d.default_pg_timeout.total_seconds()] * 4
    work = 8  # four times --hang-after, and past the 5 s a live status line and where() need
    seen: list[list[dict]] = []
    trees: list[str] = []

    def look() -> None:
        time.sleep(5)  # rank 0 computes, the others have reached the barrier
        seen.append(s.where())
        trees.append(repr(s.where(merge=True)))

    watcher = threading.Thread(target=look)
    watcher.start()
    start = time.monotonic()
    out = s.run_cell(
        f"import time\nif rank == 0:\n    deadline = time.monotonic() + {work}\n    while time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\ndist.barrier()\n'passed'",
        stream=False,
    )
    watcher.join()
    # rank 0 counts its work on the clock this test reads (the wall clock stepped 20 ms ahead of it once, in session 45)
    assert out == ["'passed'"] * 4 and time.monotonic() - start >= work
    rows = seen[0]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["state"] == "running" and rows[0]["line"] in ("line 4 of the cell", "line 5 of the cell"), rows[0]
    assert rows[0]["seconds"] >= 4 and rows[0]["stack"] == [rows[0]["line"]]
    for row in rows[1:]:
        assert row["state"] == "collective" and row["collective"].startswith("barrier #"), row
        assert row["line"] == "line 6 of the cell" and row["seconds"] >= 4, row
    tree = [line.split("  ") for line in trees[0].splitlines()]
    assert [[w.strip() for w in words if w.strip()] for words in tree] == [
        ["the user's frames of ranks 0–3 (4)"],
        [rows[0]["line"], "·", "running", "rank 0"],
        ["line 6 of the cell", "·", f"waiting in {rows[1]['collective']}", "ranks 1–3 (3)"],
    ], trees[0]
    assert [r["state"] for r in s.where()] == ["idle"] * 4


def test_the_same_in_a_script_and_in_session_run(default_sessions, tmp_path):
    s = default_sessions(2)
    script = tmp_path / "skip.py"
    script.write_text(
        "import torch, torch.distributed as dist\ndist.init_process_group()\n"
        "if dist.get_rank() == 0:\n    dist.all_reduce(torch.ones(3))\n"
    )
    start = time.monotonic()
    with pytest.raises(CollectiveHangError) as info:
        s.run_script(str(script))
    assert time.monotonic() - start < NAMED_WITHIN
    assert f"rank 0 waits in all_reduce float32[3] at line 4 of {script}" in str(info.value), str(info.value)
    assert "rank 1 finished the script without calling it" in str(info.value)
    _sum_is_right(s)

    def skip() -> None:
        import torch
        import torch.distributed as dist

        if dist.get_rank() == 1:
            dist.all_reduce(torch.ones(2))

    start = time.monotonic()
    with pytest.raises(CollectiveHangError, match=r"rank 1 waits in all_reduce float32\[2\] at line \d+ of skip\(\)"):
        s.run(skip)
    assert time.monotonic() - start < NAMED_WITHIN
    _sum_is_right(s)


DDP = "from torch.nn.parallel import DistributedDataParallel as DDP\nddp_model = DDP(torch.nn.Linear(4, 4))"


@pytest.mark.parametrize(
    "n", [2]
)  # on 4 ranks: notebook 06's test_uneven_batches_are_named_in_seconds_then_fixed_with_join
def test_ddp_with_uneven_batches_is_named_with_its_bucket_and_join(default_sessions, n):
    """The classic distributed hang, from C++: rank 0 runs a step more, its backward waits in DDP's bucket
    all_reduce that the others never issue. Named within seconds (torchrun: when rank 1 exits, 17 s; a rank
    that outlives its cell: the group's 30 minutes without the watch), then the next collective right."""
    s = default_sessions(n)
    s.run_cell(DDP, stream=False)
    start = time.monotonic()
    with pytest.raises(CollectiveHangError) as info:
        s.run_cell(
            "steps = 3 if rank == 0 else 2\nfor _ in range(steps):\n    loss = ddp_model(torch.ones(2, 4)).sum()\n"
            "    loss.backward()",
            stream=False,
        )
    took = time.monotonic() - start
    msg = str(info.value)
    assert took < NAMED_WITHIN, (took, msg)
    assert "rank 0 waits in all_reduce float32[20] issued by torch" in msg, msg
    assert "torch.distributed.algorithms.Join" in msg and "at line 4 of the cell" in msg, msg
    assert f"{'rank 1' if n == 2 else 'ranks 1, 2, 3'} finished the cell without calling it" in msg, msg
    _sum_is_right(s)


UNEVEN_SCRIPT = """import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group()
model = DDP(torch.nn.Linear(4, 4))
for _ in range(3 if dist.get_rank() == 0 else 2):
    loss = model(torch.ones(2, 4)).sum()
    loss.backward()
dist.destroy_process_group()
"""


def _uneven_steps() -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(torch.nn.Linear(4, 4))
    for _ in range(3 if dist.get_rank() == 0 else 2):
        model(torch.ones(2, 4)).sum().backward()


@pytest.mark.slow
def test_ddp_with_uneven_batches_in_a_script_and_through_session_run(default_sessions, tmp_path):
    s = default_sessions(2)
    script = tmp_path / "uneven.py"
    script.write_text(UNEVEN_SCRIPT)
    start = time.monotonic()
    with pytest.raises(CollectiveHangError) as info:
        s.run_script(str(script))
    msg = str(info.value)
    assert time.monotonic() - start < NAMED_WITHIN + 2, msg  # the script's own DDP set-up and first import
    assert "rank 0 waits in all_reduce float32[20] issued by torch (a gradient bucket of DDP's" in msg, msg
    assert f"at line 7 of {script}" in msg and "rank 1 finished the script without calling it" in msg, msg
    _sum_is_right(s)

    start = time.monotonic()
    with pytest.raises(CollectiveHangError) as info:
        s.run(_uneven_steps)
    msg = str(info.value)
    assert time.monotonic() - start < NAMED_WITHIN, msg
    line = _uneven_steps.__code__.co_firstlineno + 7  # its backward()
    assert "rank 0 waits in all_reduce float32[20] issued by torch" in msg and "Join" in msg, msg
    assert f"at line {line} of _uneven_steps()" in msg and "rank 1 finished the call (_uneven_steps)" in msg, msg
    _sum_is_right(s)


ONE_RANK_ONLY = {
    # torch issues these from C++: DTensor's all_gather, FSDP2's all_gather of the parameters; the third is the
    # user's own async_op call, which returns at once: the rank waits in its wait() (line 5)
    "full_tensor": (
        "from torch.distributed.tensor import distribute_tensor, Shard\n"
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "d = distribute_tensor(torch.ones(8, 4), init_device_mesh('cpu', (world_size,)), [Shard(0)])\n"
        "if rank == 0:\n    full = d.full_tensor()",
        "all_gather float32[",
        "issued by torch at line 5 of the cell",
    ),
    "fsdp2": (
        "from torch.distributed.fsdp import fully_shard\n"
        "m = fully_shard(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)))\n"
        "if rank == 0:\n    m(torch.ones(2, 8)).sum().backward()",
        "all_gather float32[",
        "issued by torch at line 4 of the cell",
    ),
    "async_op wait": (
        "x = torch.ones(3)\nif rank == 0:\n    w = dist.all_reduce(x, async_op=True)\n    y = x * 2\n    w.wait()",
        "all_reduce float32[3]",
        "issued at line 3 of the cell with async_op=True, waited for at line 5 of the cell",
    ),
}


# every case on 2 ranks; on 4 FSDP2 only (its parameters sharded 4 ways): the others' 4-rank runs named the same
@pytest.mark.parametrize(
    "case, n", [(c, 2) for c in ONE_RANK_ONLY] + [pytest.param("fsdp2", 4, marks=pytest.mark.slow)]
)
def test_a_collective_torch_runs_on_one_rank_only_is_named(default_sessions, n, case):
    """DTensor's full_tensor(), an FSDP2 step and an async_op all_reduce's wait() on rank 0 only: the rank waits
    in a collective the Python watch never saw block; named in seconds, released, the next collective right."""
    code, call, where = ONE_RANK_ONLY[case]
    msg = _fails_within(default_sessions(n), code, CollectiveHangError)
    others = "rank 1" if n == 2 else "ranks 1, 2, 3"
    assert f"rank 0 waits in {call}" in msg and where in msg, msg
    assert f"{others} finished the cell without calling it" in msg, msg


@pytest.mark.slow
def test_send_and_recv_on_some_ranks_leave_the_numbers_of_all_agreeing(default_sessions):
    """gloo counts send/recv in its group's sequence, on the two ranks involved only; torch's recorder does not,
    nor does the watch: after them the next mismatch is still found at one number, with every rank's line."""
    s = default_sessions(4)
    out = s.run_cell(
        "x = torch.ones(2)\nif rank == 0:\n    dist.send(x, 1)\nelif rank == 1:\n    dist.recv(x, 0)\n"
        "w = dist.isend(x, 3) if rank == 2 else dist.irecv(x, 2) if rank == 3 else None\nw and w.wait()\n"
        "y = torch.ones(3)\ndist.all_reduce(y)\ny.tolist()",
        stream=False,
    )
    assert out == ["[4.0, 4.0, 4.0]"] * 4
    msg = _fails_within(s, "y = torch.ones(3 if rank else 4)\ndist.all_reduce(y)", CollectiveMismatchError)
    assert "rank 0: all_reduce float32[4] at line 2 of the cell; ranks 1, 2, 3: all_reduce float32[3] at line 2" in msg


BUCKET_AGAINST_PYTHON = {
    # rank 0's backward issues DDP's bucket all_reduce (20 floats) from C++ where the others call their own
    "other size": ("0", "y = torch.ones(4)", "rank{s} {others}: all_reduce float32[4] at line 8 of the cell"),
    # the same size would be summed with it, silently: a bucket against a call outside backward() is refused
    "same size": ("0", "y = torch.ones(20)", "rank{s} {others}: all_reduce float32[20] at line 8 of the cell"),
    # the others arrive first and wait for rank 0's number, so gloo never joins the two (it aborts a process)
    "bucket later": ("1.5", "y = torch.ones(4)", "rank{s} {others}: all_reduce float32[4] at line 8 of the cell"),
}


# every case on 2 ranks; on 4 the bucket issued later only (three ranks waiting for rank 0's number)
@pytest.mark.parametrize(
    "case, n",
    [(c, 2) for c in BUCKET_AGAINST_PYTHON] + [pytest.param("bucket later", 4, marks=pytest.mark.slow)],
)
def test_a_ddp_bucket_against_a_python_all_reduce_is_a_mismatch_named_before_it_runs(default_sessions, n, case):
    """Torch's number for a collective is the watch's: rank 0's bucket all_reduce issued from C++ and the other
    ranks' own all_reduce at the same number are compared before they join (no process lost, nothing summed)."""
    s = default_sessions(n)
    s.run_cell(DDP, stream=False)
    done = s.run_cell("dist.group.WORLD._get_sequence_number_for_group()", stream=False)  # torch's count
    delay, other, said = BUCKET_AGAINST_PYTHON[case]
    others = "1" if n == 2 else "1, 2, 3"
    msg = _fails_within(
        s,
        f"import time\nif rank == 0:\n    time.sleep({delay})\n    loss = ddp_model(torch.ones(2, 4)).sum()\n"
        f"    loss.backward()\nelse:\n    {other}\n    dist.all_reduce(y)\n",
        CollectiveMismatchError,
    )
    assert msg.startswith(f"the ranks called different collectives at #{int(done[0]) + 1}:"), msg
    assert "rank 0: all_reduce float32[20] issued by torch (a gradient bucket of DDP's, in backward()) at line 5" in msg
    assert said.format(s="" if n == 2 else "s", others=others) in msg, msg
    assert s.run_cell("len(dist.group.WORLD and [1])", stream=False) == ["1"] * n  # every rank's process lived


def test_a_rank_released_as_its_call_ends_has_the_group_rebuilt_before_the_next_call(default_sessions, capsys):
    """A release that comes once the collectives it was for are over (a hang named on a late sample) still shuts
    the rank's group sockets: the call ends well and the next rebuilds the group, not meets a closed connection."""
    import jupyter_mgpu as mg

    s = default_sessions(2)

    def release_when_past_the_all_reduce() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and {r.get("line") for r in mg.where(s)} != {"line 4 of the cell"}:
            time.sleep(0.05)
        s.recovery.release([0])

    thread = threading.Thread(target=release_when_past_the_all_reduce)
    thread.start()
    try:
        out = s.run_cell("x = torch.ones(1)\ndist.all_reduce(x)\nimport time\ntime.sleep(1)\nx.item()", stream=False)
    finally:
        thread.join()
    assert out == ["2.0", "2.0"]
    _sum_is_right(s)
    assert (
        "mgpu: after the release of rank 0 as the call ended, the process group was rebuilt" in capsys.readouterr().err
    )


@pytest.mark.slow
def test_a_rank_busy_before_its_backward_is_not_hung_and_where_shows_the_other_in_ddps_all_reduce(default_sessions):
    s = default_sessions(2)
    s.run_cell(DDP, stream=False)
    seen: list[list[dict]] = []

    def look() -> None:
        time.sleep(4)  # rank 0 computes, rank 1 waits in its bucket all_reduce
        seen.append(s.where())

    watcher = threading.Thread(target=look)
    watcher.start()
    out = s.run_cell(
        "import time\nif rank == 0:\n    deadline = time.time() + 6\n    while time.time() < deadline:\n"
        "        sum(range(1000))\nddp_model(torch.ones(2, 4)).sum().backward()\n'passed'",
        stream=False,
    )
    watcher.join()
    assert out == ["'passed'"] * 2
    rows = seen[0]
    assert rows[0]["state"] == "running", rows
    assert rows[1]["state"] == "collective" and rows[1]["collective"].startswith("all_reduce #"), rows
    assert rows[1]["line"] == "line 6 of the cell", rows


@pytest.mark.slow
def test_a_dump_of_the_uneven_batches_hang_is_read_by_torchfrtrace_which_names_the_missing_rank(
    default_sessions, tmp_path
):
    """``mg.where(dump=DIR)`` while rank 0 waits in DDP's bucket: every rank's flight recorder, as torch's own
    ``torchfrtrace DIR`` reads it (the watch held off meanwhile, then let name the hang as usual)."""
    import subprocess
    import sys
    from pathlib import Path

    import jupyter_mgpu as mg

    s = default_sessions(2)
    s.run_cell(DDP, stream=False)
    folder = tmp_path / "fr"
    rows: list[list[dict]] = []
    still = s.hang_watch.still

    def dump_then_let_go() -> None:
        try:  # once rank 0 is seen waiting in the bucket and rank 1 done (a loaded machine takes longer)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                now = mg.where(s)
                if [r["state"] for r in now] == ["collective", "idle"]:
                    break
                time.sleep(0.2)
            rows.append(mg.where(s, dump=str(folder)))
        finally:
            s.hang_watch.still = still

    s.hang_watch.still = 600.0
    thread = threading.Thread(target=dump_then_let_go)
    thread.start()
    try:
        with pytest.raises(CollectiveHangError, match="rank 0 waits in all_reduce"):
            s.run_cell(
                "for _ in range(3 if rank == 0 else 2):\n    ddp_model(torch.ones(2, 4)).sum().backward()", stream=False
            )
    finally:
        thread.join()
        s.hang_watch.still = still
    assert [r["state"] for r in rows[0]] == ["collective", "idle"], rows
    assert sorted(p.name for p in folder.iterdir()) == ["rank_0", "rank_1"]
    tool = Path(sys.executable).with_name("torchfrtrace")
    out = subprocess.run([str(tool), str(folder)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    report = out.stdout + out.stderr  # its findings are logged
    assert "Not all ranks joining collective" in report and "missing ranks: {1}" in report, report[:2000]
    assert "collective: gloo:all_reduce" in report and "input sizes: [[20]]" in report, report[:2000]
    _sum_is_right(s)


# last in the module: gloo counts send/recv in the group's sequence number, which the DDP bucket test reads
# as torch's number for the next collective (the watch does not count them)
def test_a_send_and_a_recv_waiting_for_their_peer_say_whom_and_which_tag(default_sessions, tmp_path):
    """What the hang watch pairs a message by (``p2p``: op, peer, tag; a recv from any rank has no peer): rank 1
    waits in its send while rank 0 is held in Python, then rank 0 in a recv from any rank while rank 1 is held.
    The rule that a send whose recv waits is a message on its way, not a hang: ``tests/unit/test_stuck_rules.py``."""
    from jupyter_mgpu.session.call_wait import read_where

    s = default_sessions(2)
    seen: list[dict] = []

    def release_when(rank: int, go: str) -> None:
        deadline = time.monotonic() + NAMED_WITHIN
        while time.monotonic() < deadline and not (read_where(s).get(rank) or {}).get("p2p"):
            time.sleep(0.05)
        seen.append(read_where(s).get(rank) or {})
        (tmp_path / go).touch()

    def both() -> None:
        release_when(1, "go1")
        release_when(0, "go2")

    watcher = threading.Thread(target=both)
    watcher.start()
    cell = f"""
        import os, time
        def held(go):  # until the test has seen the other rank wait
            t = time.monotonic()
            while not os.path.exists({str(tmp_path)!r} + go) and time.monotonic() - t < 30:
                time.sleep(0.02)
        x = torch.zeros(4)
        if rank == 0:
            held("/go1")
            dist.recv(x, 1, tag=7)
            dist.recv(x, tag=8)
        else:
            dist.send(x + 1, 0, tag=7)
            held("/go2")
            dist.send(x + 2, 0, tag=8)
        x.tolist()"""
    out = s.run_cell(textwrap.dedent(cell).strip(), stream=False)
    watcher.join()
    assert out == ["[2.0, 2.0, 2.0, 2.0]", "[0.0, 0.0, 0.0, 0.0]"]
    assert [(w.get("call"), w.get("group"), w.get("p2p")) for w in seen] == [
        ("send to rank 0", [0, 1], ["send", 0, 7]),
        ("recv from any rank", [0, 1], ["recv", None, 8]),
    ], seen
