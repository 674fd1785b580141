"""mg.compare on real engines: every strategy trains like single, measured as the formulas say, pipeline
events recorded live, out-of-memory as a row, bad input refused before any rank runs."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest
import torch
from ipshell import shell
from torch import nn

import jupyter_mgpu as mg
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.strategies import expected as ex

pytestmark = pytest.mark.cluster

ALL = "single,ddp,fsdp,tp,pp,pp-1f1b"
EXACT = ("params", "grads")  # measured bytes equal to the formula's, to the byte


def model() -> nn.Sequential:
    """4 Linear layers (TP pairs (0, 3) and (5, 7)), GELU, seeded dropout inside a pair, LayerNorm outside."""
    torch.manual_seed(3)
    return nn.Sequential(
        nn.Linear(12, 32),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.Linear(32, 16),
        nn.LayerNorm(16),
        nn.Linear(16, 32),
        nn.ReLU(),
        nn.Linear(32, 5),
    )


def data(n: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return torch.randn(n, 12, generator=g), torch.randint(0, 5, (n,), generator=g)


# SGD (no optimizer state) on 2 ranks, Adam (two moments, sharded by ZeRO and FSDP) on 4: each formula at both
# sizes and with both states would check the same arithmetic again (issue 44: 2-adam and 4-sgd removed)
@pytest.mark.parametrize("n, optimizer", [(2, "sgd"), (4, "adam")])
@pytest.mark.slow
def test_every_strategy_trains_like_single_and_measures_as_the_formulas_say(session_of, n, optimizer):
    session_of(n)
    r = mg.compare(
        model(),
        data=data(),
        batch=16,
        steps=5,
        strategies=ALL,
        microbatches=4,
        optimizer=optimizer,
        lr=0.05,
        timeout=60,
        live=False,
    )
    assert r.strategies == ALL.split(",")
    for st in r.strategies:
        assert r.ok(st), r.table
        assert r.matches(st), (st, r.losses[st], r.losses["single"])  # |Δ| ≤ 1e-4·|loss| + 1e-6 at every step
    assert r.losses["single"][-1] != r.losses["single"][0]  # it trained
    expected = {(e["strategy"], e["rank"]): e for e in r.expected}
    for row in r.table:
        e = expected[(row["strategy"], row["rank"])]
        for c in EXACT:
            assert row[c] == e[c], (row["strategy"], row["rank"], c, row[c], e[c])
        # optimizer state: Adam's two moments (+ a 4-byte step count per tensor), none for plain SGD
        assert e["optimizer"] <= row["optimizer"] <= e["optimizer"] + 64, (row["strategy"], row["optimizer"])
        assert row["bytes_by"] == pytest.approx(e["bytes_by"], abs=64), (row["strategy"], row["rank"])
        assert row["step_time"] > 0 and row["device_peak"] > 0
    pp = r.schedule("pp")
    assert len([e for e in pp.events if e["action"] == "compute"]) == 5 * n * 4 * 2
    for k in range(5):
        for stage in range(n):
            mine = [e for e in pp.events if e["action"] == "compute" and e["step"] == k and e["rank"] == stage]
            assert sorted((e["kind"], e["mb"]) for e in mine) == sorted(
                (kind, mb) for kind in ("forward", "backward") for mb in range(4)
            )
    assert all(0 <= b < 1 for b in pp.bubble())
    # GPipe runs every forward before any backward; under 1F1B the last stage alternates from the first one
    for name, interleaved in (("pp", False), ("pp-1f1b", True)):
        last = [
            e for e in r.schedule(name).events if e["action"] == "compute" and e["rank"] == n - 1 and e["step"] == 4
        ]
        kinds = [e["kind"] for e in sorted(last, key=lambda e: e["start"])]
        assert (kinds != sorted(kinds, key=["forward", "backward"].index)) == interleaved, (name, kinds)


def pipeline_demo() -> tuple[nn.Sequential, tuple[torch.Tensor, torch.Tensor]]:
    """Notebook 07's pipeline model and data: stages heavy enough that computing, not sending, fills a step.

    A thin first layer, 16 Linear(512, 512), a 10-class head: four stages of four 512×512 layers each, the
    first stage's thin layer making up for the input gradient it never computes.
    """
    torch.manual_seed(0)
    x = torch.randn(2048, 64)
    y = (x @ torch.randn(64, 10)).argmax(dim=1)
    layers: list[nn.Module] = [nn.Linear(64, 512), nn.ReLU()]
    for _ in range(16):
        layers += [nn.Linear(512, 512), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(512, 10)), (x, y)


PIPELINE_DEMO = {"batch": 512, "microbatches": 8, "steps": 10, "loss": "cross_entropy", "optimizer": "adam"}


@pytest.mark.slow
def test_the_bubble_read_off_the_ranks_times_is_the_formulas(s4):
    model, xy = pipeline_demo()
    r = mg.compare(model, data=xy, strategies="pp,pp-1f1b", lr=1e-3, timeout=120, live=False, **PIPELINE_DEMO)
    p, m = 4, PIPELINE_DEMO["microbatches"]
    formula = (p - 1) / (m + p - 1)
    for name in ("pp", "pp-1f1b"):
        sched = r.schedule(name)
        assert sched.expected_bubble == pytest.approx(formula)
        bubble, split = sched.bubble(), sched.split()
        # near (p-1)/(m+p-1) on every stage, even with 4 ranks sharing 2 busy cores: within 20 points (a fresh clone
        # on a machine at its slowest read 0.29-0.45 against 0.27; a measurement gone wrong reads 0 or past 0.6)
        assert all(abs(b - formula) <= 0.20 for b in bubble), (name, bubble, split)
        assert all(sum(x.values()) == pytest.approx(1) for x in split), split
        times = r.raw[name]
        timed = [st for st in sched.steps() if st["step"] >= sched.timed_from]
        assert len(timed) == PIPELINE_DEMO["steps"] - sched.timed_from
        for st in timed:
            k = st["step"]
            # the step's wall time: no longer than the slowest rank's own timer around the whole step
            assert st["span"] <= max(t["step_times"][k] for t in times) + 1e-3, (name, k)
            for s in range(p):
                mine = [e for e in sched.events if e["action"] == "compute" and e["step"] == k and e["rank"] == s]
                computed = sum(e["end"] - e["start"] - e["wait"] for e in mine)
                assert st["busy"][s] == pytest.approx(computed)  # the stage's own boxes, less its waits for a core
                assert all(0 <= e["wait"] <= e["end"] - e["start"] for e in mine)
                parts = st["busy"][s] + st["bubble"][s] + st["other"][s]
                assert parts == pytest.approx(st["span"], rel=1e-6), (name, k, s)  # busy + bubble + other = wall
                assert min(st["bubble"][s], st["other"][s]) >= 0
        assert [row["bubble"] for row in r.table if row["strategy"] == name] == pytest.approx(bubble)


@pytest.mark.slow
def test_who_holds_which_part_of_each_weight(s2):
    r = mg.compare(
        model(), data=data(), batch=16, steps=4, strategies="ddp,fsdp,tp,pp", microbatches=2, timeout=60, live=False
    )

    tp = r.show("tp", layers=[0, 3]).data
    col, row = tp["panels"]
    assert col["rows"] == [0, 16, 32] and col["cols"] == [0, 12]  # column-parallel: output features split
    assert row["rows"] == [0, 16] and row["cols"] == [0, 16, 32]  # row-parallel: input features split
    assert sorted(tp["frames"][0]["add"]) == [[0, 0], [0, 2], [1, 1], [1, 3]]
    fsdp = r.show("fsdp", layers=[5]).data
    assert fsdp["panels"][0]["rows"] == [0, 16, 32]  # dim-0 shards
    pp = r.show("pp").data  # stage 0 holds layers 0 and 3 whole; rank 1 none of them
    assert [rank for rank, _ in pp["frames"][0]["add"]] == [0, 0]
    ddp = r.show("ddp", layers=[7]).data  # every rank holds every weight
    assert sorted(rank for rank, _ in ddp["frames"][0]["add"]) == [0, 1]
    with pytest.raises(MgpuError, match="layer 1 is not a Linear layer"):
        r.show("tp", layers=[1])


def test_the_schedule_is_followed_live_while_the_pipeline_trains(s2):
    import sys

    compare_module = sys.modules["jupyter_mgpu.comparison.compare_run"]
    seen: dict = {}
    orig_start = compare_module.Comparison._run_one

    def run_one(self, strategy):
        if strategy == "pp":

            def watch():
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    sched = self.result.schedules.get("pp")
                    if sched is not None and sched.running and sched.events:
                        player = sched.play()
                        seen["during"] = (len(sched.events), player.live, player.n_frames)
                        seen["player"] = player
                        return
                    time.sleep(0.05)

            threading.Thread(target=watch, daemon=True).start()
        return orig_start(self, strategy)

    compare_module.Comparison._run_one = run_one
    try:
        r = mg.compare("mlp:256x4", batch=32, steps=40, strategies="pp", microbatches=8, timeout=60, live=False)
    finally:
        compare_module.Comparison._run_one = orig_start
    total = len(r.schedule("pp").events)
    assert "during" in seen, "no pipeline event reached the notebook while the pipeline trained"
    count, live, frames = seen["during"]
    assert live and 0 < count < total and frames > 0
    player = seen["player"]  # the live player got every event when the run ended, and stopped being live
    assert not player.live and player.n_frames == 40 * 2 * 8 * 2


@pytest.mark.slow
def test_out_of_memory_is_a_row_and_the_session_stays_usable(own_session):
    with own_session(2, mem_per_device="96MiB", timeout=30) as s:
        r = mg.compare("mlp:512x32", batch=8, steps=4, strategies="single,ddp,fsdp", optimizer="adam", live=False)
        (single,) = [x for x in r.table if x["strategy"] == "single"]
        assert single["status"] == "oom"
        assert single["note"].startswith("OOM on rank 0: needs ≥ ") and single["note"].endswith("budget 96.0 MiB)")
        # DDP needs as much on each rank: one runs out; a rank whose budget left it a little more room (its
        # process's own memory counts) may get past that point and be stopped waiting for the first, as said
        ddp = [x for x in r.table if x["strategy"] == "ddp"]
        assert any(x["status"] == "oom" for x in ddp), ddp
        assert all(
            x["status"] == "oom"
            or (x["status"] == "peer" and re.match(r"stopped: rank \d ran out of memory$", x["note"]))
            for x in ddp
        ), ddp
        assert r.ok("fsdp")  # the strategy that fits still ran, after two that did not
        fsdp = [x for x in r.table if x["strategy"] == "fsdp"]
        assert all(x["device_peak"] < 96 * 2**20 for x in fsdp)
        predicted = {e["strategy"]: e["fits"] for e in r.expected if e["rank"] == 0}
        assert predicted == {"single": False, "ddp": False, "fsdp": True}
        # a pipeline whose first stage cannot fit: rank 0 runs out, and rank 1, waiting for its activations,
        # is released at once (rank 0 closes their group), not after the 30 s timeout
        big = nn.Sequential(
            nn.Linear(64, 3072),
            nn.ReLU(),
            nn.Linear(3072, 3072),
            nn.ReLU(),
            nn.Linear(3072, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
        )
        start = time.monotonic()
        r = mg.compare(
            big,
            data=(torch.randn(64, 64), torch.randint(0, 64, (64,))),
            batch=16,
            steps=4,
            strategies="pp",
            microbatches=2,
            live=False,
        )
        assert time.monotonic() - start < 20
        assert [(x["rank"], x["status"]) for x in r.table] == [(0, "oom"), (1, "peer")]
        assert r.table[1]["note"] == "stopped: rank 0 ran out of memory"
        assert len(set(s.run(os.getpid))) == 2  # the session is still usable


def test_bad_input_is_refused_before_any_rank_runs(s2, monkeypatch):
    calls = []
    real_run = type(s2).run

    def counting_run(self, fn, *args, **kwargs):
        calls.append(getattr(fn, "__name__", fn))
        return real_run(self, fn, *args, **kwargs)

    monkeypatch.setattr(type(s2), "run", counting_run)
    three = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 5))
    cases = [
        (dict(model=model(), strategies="ddp,zero"), r"^unknown strategy 'zero'"),
        (dict(model=model(), optimizer="lion"), r"^unknown optimizer 'lion'"),
        (dict(model=three, strategies="tp"), r"layer 4 \(Linear 8→5\) is Linear number 3 and has no partner"),
        (
            dict(model=nn.Sequential(nn.Linear(12, 5)), strategies="pp"),
            r"needs at least one Linear layer per stage: 2 stages, but the model has 1 Linear layer$",
        ),
        (dict(model=model(), batch=15), r"^batch 15 does not split evenly over 2 ranks"),
        (dict(model=model(), strategies="pp", batch=12, microbatches=8), r"^batch 12 is not divisible into 8"),
        (dict(model=nn.Sequential(nn.Linear(12, 5), nn.BatchNorm1d(5))), r"^layer 1 \(BatchNorm1d\) is not supported"),
        (
            dict(model=model(), data=(torch.randn(48, 7), torch.zeros(48, dtype=torch.long))),
            r"data X must have shape \(samples, 12\)",
        ),
        (dict(model=model(), data=(torch.randn(48, 12), torch.full((48,), 9))), r"class labels 0 to 4"),
        (dict(model=model(), loss="mse", data=(torch.randn(48, 12), torch.randn(48, 3))), r"^mse needs y of shape"),
        (dict(model="mlp:12", strategies="ddp"), r"^unknown bundled model 'mlp:12'"),
        (dict(model=model(), steps=2), r"^steps must be a whole number of at least 4"),
    ]
    for kwargs, message in cases:
        args = dict(data=data(), batch=16, steps=4, microbatches=4, timeout=30, live=False)
        args.update(kwargs)
        with pytest.raises(MgpuError, match=message):
            mg.compare(args.pop("model"), **args)
    assert calls == []  # nothing reached a rank
    with mg.trace():
        with pytest.raises(MgpuError, match="end the `with mg.trace\\(\\)` block first"):
            mg.compare(model(), data=data(), batch=16, steps=4, live=False)
    monkeypatch.undo()
    r = mg.compare(three, data=data(), batch=16, steps=4, strategies="pp", microbatches=4, timeout=30, live=False)
    assert r.ok("pp") and r.plan.stages in ([(0, 2), (2, 5)], [(0, 4), (4, 5)])


def test_the_magic_keeps_its_result(s2):
    ip = shell()
    res = ip.run_cell(
        "%mgpu_compare --model mlp:32x4 --strategies single,ddp,tp --batch 8 --steps 4 "
        "--optimizer sgd --no-live --no-plot"
    )
    assert res.success, res.error_in_exec
    r = ip.user_ns["_mgpu_compare"]
    assert isinstance(r, mg.CompareResult) and r.strategies == ["single", "ddp", "tp"]
    assert r.matches("ddp") and r.matches("tp")
    assert ex.expected(r.plan, "ddp")[0]["bytes"] == {"all_reduce": 4 * r.plan.params}
    bad = ip.run_cell("%mgpu_compare --model mlp:32x3 --strategies tp --steps 4")
    assert not bad.success and "has no partner" in str(bad.error_in_exec)
    bad = ip.run_cell("%mgpu_compare --model nothing_here")
    assert not bad.success and "--model names no notebook variable" in str(bad.error_in_exec)


@pytest.mark.slow
def test_the_stop_button_ends_a_comparison_and_the_next_one_runs(s2):
    import _thread

    timer = threading.Timer(3.0, _thread.interrupt_main)
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            mg.compare("mlp:256x8", batch=32, steps=400, strategies="fsdp,pp", timeout=60, live=False)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 20  # not the 400 steps, nor a collective's 60 s timeout
    r = mg.compare("mlp:32x4", batch=8, steps=4, strategies="single,ddp,fsdp,tp,pp", timeout=30, live=False)
    assert all(r.ok(st) and r.matches(st) for st in r.strategies), r.table


def test_a_comparison_cut_short_keeps_the_strategies_already_measured(s2, monkeypatch):
    import importlib

    cmp = importlib.import_module("jupyter_mgpu.comparison.compare_run")  # the package attribute is the function

    real = cmp.Comparison._run_one

    def stop_at_ddp(self, strategy):
        if strategy == "ddp":
            raise KeyboardInterrupt
        return real(self, strategy)

    monkeypatch.setattr(cmp.Comparison, "_run_one", stop_at_ddp)
    with pytest.raises(KeyboardInterrupt) as info:
        mg.compare("mlp:32x4", batch=8, steps=4, strategies="single,ddp,tp", timeout=30, live=False)
    kept = info.value.compare_result
    assert kept.ok("single") and kept.matches("single") and not kept.ok("ddp"), kept.table
