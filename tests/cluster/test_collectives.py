"""The collectives explorer with real engines: every collective × op × world size against a reference
computed here from the inputs captured on the ranks; the benchmark's #wrong; bad input; a dying rank."""

from __future__ import annotations

import time

import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.collectives.collective_run import holdings_equal
from jupyter_mgpu.errors import EngineDiedError, MgpuError, RankError
from jupyter_mgpu.ops import collective_run as coll
from jupyter_mgpu.ops import collective_schedule as sched
from jupyter_mgpu.ops import demo_inputs

pytestmark = pytest.mark.cluster


def _reduce(op, xs):
    stacked = torch.stack(xs)
    return {
        "sum": stacked.sum(0),
        "product": stacked.prod(0),
        "min": stacked.min(0).values,
        "max": stacked.max(0).values,
        "avg": stacked.mean(0),
    }[op]


def reference(name, xs, op, src):
    """What every rank must hold after ``name``, from the captured inputs (torch on the controller)."""
    n = len(xs)
    return {
        "broadcast": lambda: [xs[src] for _ in xs],
        "reduce": lambda: [_reduce(op, xs) if r == src else None for r in range(n)],
        "all_reduce": lambda: [_reduce(op, xs) for _ in xs],
        "all_gather": lambda: [list(xs) for _ in xs],
        "reduce_scatter": lambda: [_reduce(op, [x.chunk(n)[r] for x in xs]) for r in range(n)],
        "scatter": lambda: [xs[src].chunk(n)[r] for r in range(n)],
        "gather": lambda: [list(xs) if r == src else None for r in range(n)],
        "all_to_all": lambda: [[xs[j].chunk(n)[r] for j in range(n)] for r in range(n)],
        "barrier": lambda: list(xs),
        "send_recv": lambda: [xs[(r - 1) % n] for r in range(n)],
    }[name]()


def varied(rank):
    """Small whole numbers that differ per rank and per element (exact under every op)."""
    n = torch.distributed.get_world_size()
    return ((torch.arange(2 * n * 3).reshape(2 * n, 3) * (rank + 2)) % 4 + 1).float()


CASES = [(name, op) for name in coll.COLLECTIVES for op in (coll.OPS if name in coll.REDUCING else ("sum",))]


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("name,op", CASES)
@pytest.mark.slow
def test_every_collective_matches_the_reference(session_of, name, op, n):
    session_of(n)
    src = n - 1 if name in coll.ROOTED else 0
    r = mg.collective(name, varied, op=op, src=src)
    assert len(r.inputs) == len(r.before) == len(r.after) == n
    # the inputs were really built on the ranks: rank r's input is varied(r)
    assert not torch.equal(r.inputs[0], r.inputs[1])
    want = reference(name, r.inputs, op, src)
    for rank in range(n):
        assert holdings_equal(r.after[rank], want[rank]), (name, op, rank, r.after[rank], want[rank])
    # the before column shows what each rank contributes; the animation ends on the real result
    for rank in range(n):
        assert holdings_equal(r.before[rank], sched.before_entries(name, r.inputs[rank], rank, src, n))
    assert r.schedule_matches()
    assert r.seconds > 0


@pytest.mark.parametrize("name", ["all_reduce", "reduce", "all_gather", "broadcast", "gather"])
def test_demo_inputs_on_four_ranks_and_the_picture_shows_the_real_data(s4, name):
    r = mg.collective(name, op="max", src=2)
    assert [x.tolist() for x in r.inputs] == [demo_inputs.demo_tensor(k).tolist() for k in range(4)]
    want = reference(name, r.inputs, "max", 2)
    assert all(holdings_equal(a, b) for a, b in zip(r.after, want))
    svg = r._repr_svg_()
    assert svg == r.svg() and r._repr_html_().count("<svg") == 1
    if name in ("reduce", "gather"):
        assert svg.count(">receives nothing") == 3 and svg.count("root is rank 2)<") == 3
    player = r.animation()
    assert "logical schedule" in player.badge and len(player.frames) == len(r.schedule()) >= 2


def test_user_function_and_notebook_lambda(s2):
    r = mg.collective("all_reduce", lambda rank: torch.ones(3) * rank, op="max")
    assert [t.tolist() for t in r.after] == [[1.0, 1.0, 1.0]] * 2
    offset = 10.0  # closures travel with the function
    r = mg.collective("all_gather", lambda rank: torch.tensor([rank + offset]))
    assert [[t.item() for t in entry] for entry in r.after] == [[10.0, 11.0]] * 2


def test_roots_take_torch_s_names(s2, capsys):
    """reduce/gather take their root as dst, broadcast/scatter as src, as torch.distributed does."""
    image = lambda rank: torch.full((2, 2), float(rank + 1))  # noqa: E731
    for name, kwargs in (
        ("reduce", {"dst": 1}),
        ("gather", {"dst": 1}),
        ("broadcast", {"src": 1}),
        ("scatter", {"src": 1}),
        ("reduce", {"src": 1}),
    ):
        r = mg.collective(name, image, **kwargs)
        assert r.src == 1, name
        key = "src" if name in ("broadcast", "scatter") else "dst"
        assert f", {key}=1 " in repr(r)
    assert torch.equal(mg.collective("reduce", image, dst=1).after[1], torch.full((2, 2), 3.0))
    from ipshell import shell

    ip = shell()
    ip.user_ns["image"] = image
    result = ip.run_cell("%mgpu_collective reduce --dst 1 --inputs image --no-animate")
    assert result.success, result.error_in_exec
    result = ip.run_cell("%mgpu_collective gather --src 1 --inputs image --no-animate")
    assert result.success, result.error_in_exec


def test_dist_tensor_shards_are_the_inputs(s4):
    A = mg.arange(8, 3, dtype="float32")
    r = mg.collective("all_gather", A)
    whole = A.gather()
    assert torch.equal(torch.cat(r.after[0]), whole) and torch.equal(torch.cat(r.after[3]), whole)
    r = mg.collective("all_reduce", A, op="sum")
    assert torch.equal(r.after[1], sum(whole.chunk(4)))


def test_bad_input_is_one_sentence_and_the_session_stays_usable(s4):
    cases = [
        (dict(name="allsum"), "unknown collective 'allsum'"),
        (dict(name="all_reduce", op="xor"), "unknown reduce op 'xor'"),
        (dict(name="broadcast", src=4), "src rank 4 is out of range: this session has ranks 0-3"),
        (dict(name="reduce", dst=-1), "dst rank -1 is out of range: this session has ranks 0-3"),
        (
            dict(name="broadcast", dst=1),
            r"broadcast takes its root as src \(torch.distributed.broadcast\(..., src=0\)\)",
        ),
        (dict(name="gather", src=1, dst=2), "give the root of gather once: src=1 and dst=2 differ"),
        (dict(name="reduce_scatter"), "reduce_scatter splits dim 0 into 4 equal chunks.*such as shape 12x11"),
        (dict(name="scatter", inputs=lambda rank: torch.ones(6)), "scatter splits dim 0 .* has 6 rows.*such as 8"),
        (
            dict(
                name="all_reduce", inputs=lambda rank: torch.ones(2, dtype=torch.int64 if rank == 2 else torch.float32)
            ),
            r"dtypes differ across ranks \(rank 0 float32, rank 1 float32, rank 2 int64",
        ),
        (dict(name="all_gather", inputs=lambda rank: torch.ones(rank + 1)), "shapes differ across ranks"),
        (
            dict(name="all_reduce", inputs=lambda rank: torch.ones(2, device="meta")),
            "rank 0's input tensor is on meta but rank 0's device is cpu",
        ),
        (dict(name="all_reduce", inputs=lambda rank: [rank]), "is a list, not a torch.Tensor, on ranks 0, 1, 2, 3"),
        (dict(name="all_reduce", inputs=42), "inputs must be a function rank -> tensor"),
        (dict(name="reduce", op="avg", dtype="int64"), "op avg needs floating-point tensors, these are int64"),
        (
            dict(name="all_reduce", inputs=lambda rank: torch.ones(300), max_bytes=1024),
            "rank 0's input is .*, more than the .* a collective view captures and draws per rank",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(MgpuError, match=message) as info:
            mg.collective(**kwargs)
        assert "\n" not in str(info.value)
    # an input function failing on one rank: that rank's error, and no rank waits for it
    t0 = time.monotonic()
    with pytest.raises(RankError, match="ZeroDivisionError on rank 2: division by zero"):
        mg.collective("all_reduce", lambda rank: torch.ones(2) / 0 if rank != 2 else 1 / 0)
    assert time.monotonic() - t0 < 10
    r = mg.collective("all_reduce", lambda rank: torch.ones(2) * rank)
    assert [t.tolist() for t in r.after] == [[6.0, 6.0]] * 4


def test_benchmark_is_correct_and_the_wrong_column_catches_a_corrupted_result(s4):
    names = [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast",
        "reduce",
        "gather",
        "scatter",
        "send_recv",
        "barrier",
    ]
    res = mg.bench(names, "4K,64K", iters=2, warmup=1, op="max")
    assert [row["collective"] for row in res.rows] == [n for n in names for _ in range(1 if n == "barrier" else 2)]
    assert res.wrong == 0 and all(row["wrong"] == 0 for row in res.rows)
    row = res.rows[0]
    assert row["size"] == 4096 and row["count"] == 1024 and row["time_us"] > 0
    assert row["busbw"] == pytest.approx(row["algbw"] * 1.5)
    assert res.rows[2]["busbw"] == pytest.approx(res.rows[2]["algbw"] * 0.75)
    text = res.table()
    assert "#wrong" in text and "# all_gather" in text and "busbw" in text
    fig = res.figure()
    assert {t.name for t in fig.data} == set(names) - {"barrier"}
    # corrupt one element of the root's result: every collective that delivers data to rank 0 notices
    bad = mg.bench(names, "4K", iters=1, warmup=0, corrupt=0)
    for row in bad.rows:
        assert (row["wrong"] > 0) == (row["collective"] != "barrier"), row
    assert "wrong result elements" in bad.table()


def test_benchmark_bad_input(s2):
    for kwargs, message in [
        (dict(collectives="allsum"), "unknown collective"),
        (dict(sizes="1Q"), "cannot read the size"),
        (dict(iters=0), "iters must be a whole number"),
        (dict(root=2), "root rank 2 is out of range"),
        (dict(collectives=["all_reduce"], op="avg", dtype="int32"), "needs a floating-point"),
    ]:
        with pytest.raises(MgpuError, match=message):
            mg.bench(**kwargs)


def _die_soon(rank):
    import os
    import signal
    import threading
    import time

    import torch

    if rank == 1:
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    else:
        time.sleep(3)
    return torch.ones(4)


@pytest.mark.slow
def test_a_rank_dying_during_a_collective_is_named_without_a_hang(own_session):
    import os
    import signal

    with own_session(2) as s:
        t0 = time.monotonic()
        with pytest.raises(EngineDiedError, match="rank 1") as info:
            mg.collective("all_reduce", _die_soon, session=s)
        assert time.monotonic() - t0 < s.timeout + 5
        assert info.value.ranks == [1]
    with own_session(2) as s:
        # rank 1 alone enters the exchange before the collective (it waits there for rank 0) and is killed
        pending = s.run(
            coll.execute,
            ("demo", (4, 4), "float32"),
            "all_reduce",
            "sum",
            0,
            False,
            targets=[1],
            label="all_reduce",
            block=False,
        )
        deadline = time.monotonic() + 10
        while s.memory()[1].get("op") != "all_reduce" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.memory()[1].get("op") == "all_reduce" and not pending.ready()
        t0 = time.monotonic()
        os.kill(s.cluster.engine_pids[1], signal.SIGKILL)
        with pytest.raises(EngineDiedError, match="rank 1"):
            pending.get()
        with pytest.raises(EngineDiedError, match="rank 1"):
            mg.collective("all_reduce", session=s)
        assert time.monotonic() - t0 < s.timeout


def test_magics_show_the_figure_and_the_player_and_take_notebook_variables(s2):
    from ipshell import shell

    ip = shell()  # a session is current: no spare engines are pre-warmed
    saved = ip.display_formatter.active_types
    ip.display_formatter.active_types = list(ip.display_formatter.format_types)  # as a notebook kernel does
    try:
        _magics_tour(ip)
    finally:
        ip.display_formatter.active_types = saved


def _magics_tour(ip):
    from IPython.utils.capture import capture_output

    ip.run_cell("import torch\nmy_inputs = lambda rank: torch.arange(4.) * (rank + 1)")
    with capture_output() as cap:
        r = ip.run_cell("%mgpu_collective all_gather --inputs my_inputs")
    assert r.success, r.error_in_exec
    svg = [o.data["image/svg+xml"] for o in cap.outputs if "image/svg+xml" in o.data]
    assert (
        len(svg) == 1 and ">all_gather<" in svg[0] and svg[0].count(">from rank 1<") == 3
    )  # both ranks' slot 1, and the key
    assert any("application/vnd.jupyter.widget-view+json" in o.data for o in cap.outputs)  # the player
    with capture_output() as cap:
        r = ip.run_cell("%mgpu_bench all_reduce broadcast --sizes 1K,4K --iters 2 --warmup 1")
    assert r.success, r.error_in_exec
    table = "".join(o.data.get("text/plain", "") for o in cap.outputs)
    assert "# all_reduce" in table and "# broadcast" in table
    assert any("application/vnd.plotly.v1+json" in o.data and "image/svg+xml" in o.data for o in cap.outputs)
    for line, message in [
        ("%mgpu_collective broadcast --src 7", "src rank 7 is out of range"),
        ("%mgpu_collective all_reduce --inputs nothing_here", "--inputs names no notebook variable"),
        ("%mgpu_bench all_reduce --iters x", "--iters takes a number"),
    ]:
        with capture_output() as cap:
            r = ip.run_cell(line)
        assert not r.success and message in str(r.error_in_exec), (line, r.error_in_exec)
