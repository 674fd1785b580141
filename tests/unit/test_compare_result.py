"""mg.compare's result, pipeline schedule and player without engines: rows, notes, ratios, frames, pictures."""

from __future__ import annotations

import json

import pytest

from jupyter_mgpu.comparison.compare_result import CompareResult
from jupyter_mgpu.comparison.pipeline_schedule import ScheduleTrace, steps_of
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.strategies import expected as ex
from jupyter_mgpu.strategies import model_spec as ms
from jupyter_mgpu.strategies import plan as pm
from jupyter_mgpu.widgets.pipeline_schedule import ScheduleWidget, caption, schedule_data, standalone_html, static_svg

MiB = 2**20


def _plan(strategies="single,ddp", world=2):
    return pm.make_plan(
        ms.bundled("mlp:32x2"),
        strategies,
        world,
        batch=8,
        steps=5,
        microbatches=2,
        optimizer="adam",
        lr=0.01,
        loss="cross_entropy",
        samples=32,
    )


def _rank(rank, losses, status="ok", **kw):
    out = {
        "rank": rank,
        "status": status,
        "losses": losses,
        "step_times": [0.5, 0.4, 0.3, 0.2 + rank, 0.1],
        "memory": {
            "params": 100,
            "grads": 100,
            "optimizer": 200,
            "activations": 50,
            "comm_buffers": 10,
            "temporaries": 5,
            "inputs": 1,
        },
        "bytes": {"all_reduce": 4224},
        "calls": {"all_reduce": 1},
        "tracked_peak": 400,
        "device_peak": 500,
    }
    out.update(kw)
    return out


def test_rows_losses_and_matching():
    p = _plan()
    r = CompareResult(p, {s: ex.expected(p, s) for s in p.strategies}, budgets=[MiB, MiB])
    r.add("single", [_rank(0, [2.0, 1.5, 1.2, 1.0, 0.9])])
    r.add("ddp", [_rank(0, [2.1, 1.6, 1.3, 1.1, 0.95]), _rank(1, [1.9, 1.4, 1.1, 0.9, 0.85])])
    assert r.losses["ddp"] == pytest.approx([2.0, 1.5, 1.2, 1.0, 0.9])  # the mean over the ranks' shares
    assert r.matches("ddp") and r.loss_diff("ddp") == pytest.approx(0, abs=1e-12)
    t = r.table
    assert [(x["strategy"], x["rank"]) for x in t] == [("single", 0), ("ddp", 0), ("ddp", 1)]
    ddp0 = t[1]
    assert ddp0["step_time"] == pytest.approx(
        (1.2 + 0.1) / 2
    )  # the slowest rank at each timed step (3, 4), then the median
    assert ddp0["bytes"] == 4224 and ddp0["final_loss"] == pytest.approx(0.9)
    n = 2 * (32 * 32 + 32)
    ratios = {x["strategy"]: x for x in r.ratios()}
    assert ratios["ddp"]["bytes"] == pytest.approx(4224 / (4 * n))
    html = t._repr_html_()
    assert "×" in html and "ddp" in html and "Δ vs<br>single" in html
    text = repr(r)
    assert "ddp" in text.splitlines()[3] and "0.9000" in text
    r.add("single", [_rank(0, [2.0, 1.5, 1.2, 1.0, 0.8])])  # a different curve no longer matches
    assert not r.matches("ddp") and r.loss_diff("ddp") == pytest.approx(0.1)


def test_out_of_memory_is_a_row_and_the_others_stay():
    p = _plan()
    r = CompareResult(p, {s: ex.expected(p, s) for s in p.strategies}, budgets=[MiB, MiB])
    r.add(
        "single",
        [_rank(0, [], status="oom", needs_bytes=int(1.6 * 2**30), limit_bytes=512 * MiB, expected_bytes=2 * 2**30)],
    )
    r.add("ddp", [_rank(0, [1.0] * 5), _rank(1, [], status="peer", error="stopped")])
    assert r.table[0]["note"] == "OOM on rank 0: needs ≥ 1.6 GiB (the formulas: 35.0 KiB; budget 512.0 MiB)"
    assert r.table[2]["note"] == "peer on rank 1: stopped"
    assert not r.ok("single") and not r.ok("ddp")
    r.add("ddp", [_rank(0, [], status="oom", needs_bytes=MiB, limit_bytes=MiB), _rank(1, [], status="peer")])
    assert r.table[2]["note"] == "stopped: rank 0 ran out of memory"
    assert "OOM on rank 0" in r.table._repr_html_()
    r.add_failure("ddp", "rank 1 died")
    assert [x["note"] for x in r.table[1:]] == ["rank 1 died", "rank 1 died"]
    assert r.expected[0]["fits"] is True  # single's predicted total (a few KiB) is under 1 MiB
    small = CompareResult(p, {s: ex.expected(p, s) for s in p.strategies}, budgets=[4096, 4096])
    assert [e["fits"] for e in small.expected] == [False, False, False]


def test_plot_has_memory_time_and_bytes():
    pytest.importorskip("plotly")
    p = _plan()
    r = CompareResult(p, {s: ex.expected(p, s) for s in p.strategies}, budgets=[MiB, MiB])
    r.add("single", [_rank(0, [], status="oom", needs_bytes=MiB, limit_bytes=MiB)])
    r.add("ddp", [_rank(0, [1.0] * 5), _rank(1, [1.0] * 5)])
    fig = r.plot()
    names = [t.name for t in fig.data]
    assert {"params", "grads", "optimizer", "activations", "comm buffers", "step time", "all_reduce"} <= set(names)
    assert any(t.mode == "text" and list(t.text) == ["OOM"] for t in fig.data if t.type == "scatter")
    with pytest.raises(MgpuError, match="no pipeline schedule named 'pp'"):
        r.schedule("pp")


def _events(steps=2, stages=2, m=2, gap=0.0):
    """Synthetic GPipe events: stage s runs forward(mb) at (s + mb), backward later, with sends between."""
    out = []
    for k in range(steps):
        t0 = 100.0 * k
        for s in range(stages):
            for mb in range(m):
                f = t0 + s + mb
                b = t0 + 10 + (stages - 1 - s) + mb
                out.append(
                    {
                        "rank": s,
                        "op": k,
                        "step": k,
                        "action": "compute",
                        "kind": "forward",
                        "mb": mb,
                        "start": f,
                        "end": f + 1 - gap,
                        "time": f + 1,
                        "seq": 0,
                    }
                )
                out.append(
                    {
                        "rank": s,
                        "op": k,
                        "step": k,
                        "action": "compute",
                        "kind": "backward",
                        "mb": mb,
                        "start": b,
                        "end": b + 1 - gap,
                        "time": b + 1,
                        "seq": 0,
                    }
                )
                if s + 1 < stages:
                    out.append(
                        {
                            "rank": s,
                            "step": k,
                            "op": k,
                            "action": "send",
                            "kind": "activation",
                            "mb": mb,
                            "peer": s + 1,
                            "bytes": 64,
                            "time": f + 1,
                            "seq": 0,
                        }
                    )
                    out.append(
                        {
                            "rank": s + 1,
                            "step": k,
                            "op": k,
                            "action": "recv",
                            "kind": "activation",
                            "mb": mb,
                            "peer": s,
                            "bytes": 64,
                            "time": f + 1,
                            "seq": 0,
                        }
                    )
    return out


def test_steps_boxes_arrows_and_idle_share():
    steps = steps_of(_events(), 2)
    assert [s["step"] for s in steps] == [0, 1]
    s0 = steps[0]
    assert len(s0["boxes"]) == 8 and s0["boxes"][0][:3] == [0, 0, 0]  # stage 0 forward of mb 0 first
    assert s0["span"] == pytest.approx(13)  # first forward at 0, last backward ends at 13
    assert s0["idle"] == pytest.approx([1 - 4 / 13] * 2)
    # the longest chain of dependent work: F0 on 0, F0 F1 B0 B1 on 1, B1 on 0 = 6 s of the 13
    assert s0["critical"] == pytest.approx(6) and s0["busy"] == pytest.approx([4, 4])
    assert s0["bubble"] == pytest.approx([2, 2]) and s0["other"] == pytest.approx([7, 7])
    assert sorted((a[0], a[1], a[3]) for a in s0["arrows"]) == [(0, 1, 0), (0, 1, 1)]


def test_schedule_trace_bubble_player_and_pages(tmp_path):
    sched = ScheduleTrace("pp", 2, 2, "gpipe", timed_from=1, expected_bubble=1 / 3)
    with pytest.raises(MgpuError, match="no events to play"):
        sched.play()
    sched.finish(_events(steps=3, gap=0.5))
    # each box 0.5 s, the critical path 3 s of a 12.5 s step: the bubble is (p-1)/(m+p-1) of computing + bubble
    assert sched.bubble() == pytest.approx([1 / 3] * 2)
    assert sched.split()[1] == pytest.approx({"busy": 2 / 12.5, "bubble": 1 / 12.5, "other": 9.5 / 12.5})
    assert sched.idle() == pytest.approx([10.5 / 12.5] * 2)
    data = schedule_data(sched)
    assert len(data["frames"]) == 3 * 8 and data["frames"][-1] == [2, 8]
    assert caption(data, 0)[0].startswith("training step 0 (measured) · stage 0 forward of micro-batch 0")
    assert "formula (p−1)/(m+p−1) = 33%" in caption(data, 0)[1]
    w = sched.play()
    assert isinstance(w, ScheduleWidget) and w.n_frames == 24 and not w.live
    w.index = 99
    assert w.index == 23
    w.index = 0
    assert w.step() == 1 and w.step(-5) == 0
    w.play()
    assert w.playing
    svg = w.svg(7)  # the whole of step 0: 8 boxes, both arrows, idle shares
    assert svg.count("class='mgpu-sched-box'") == 8 and svg.count("mgpu-sched-arrow") == 2
    assert svg.count("mgpu-sched-idle") == 2 and "width='100%'" in svg
    assert svg.count("class='mgpu-sched-split'") == 2 and "bubble 8% · other 76%" in svg  # step 0: 1 and 9.5 of 12.5 s
    assert "class='mgpu-sched-legend'" in svg and "other: messages, overhead, waiting for a core" in svg
    assert w.svg(6).count("class='mgpu-sched-split'") == 2  # the whole step's bars, while its boxes come one by one
    assert static_svg(data, 0).count("class='mgpu-sched-box'") == 1
    bundle = w._repr_mimebundle_()
    assert "mgpu-sched-box" in (bundle[0] if isinstance(bundle, tuple) else bundle)["text/html"]
    path = sched.save_html(tmp_path / "pp.html")
    page = open(path, encoding="utf-8").read()
    state = json.loads(page.split('type="application/json">')[1].split("</script>")[0])
    assert state["data"]["frames"] == data["frames"] and "function drawSchedule" in page
    assert "export default" not in standalone_html(data)
    with pytest.raises(MgpuError, match="does not exist"):
        sched.save_html(tmp_path / "missing" / "pp.html")


def test_weights_view_data_draws_the_slices_the_ranks_reported():
    from jupyter_mgpu.widgets.weights_view import weights_data

    layers = ms.bundled("mlp:8x2")  # Linear 0 and Linear 2, 8×8 each
    held = {
        0: [
            {"layer": 0, "name": "0.weight", "box": [[0, 8], [0, 4]]},
            {"layer": 2, "name": "2.weight", "box": [[0, 8], [0, 8]]},
        ],
        1: [{"layer": 0, "name": "0.weight", "box": [[0, 8], [4, 8]]}, {"layer": 0, "name": "0.bias", "box": [[0, 8]]}],
    }
    d = weights_data(held, layers, [0, 2], 2)
    assert [p["title"] for p in d["panels"]] == ["layer 0", "layer 2"]
    assert d["panels"][0]["cols"] == [0, 4, 8] and d["panels"][1]["cols"] == [0, 8]
    assert sorted(d["frames"][0]["add"]) == [[0, 0], [0, 2], [1, 1]]  # rank 1 holds none of layer 2
    assert d["frames"][0]["mem"] == [(32 + 64) * 4, 32 * 4]  # biases are not drawn
    assert d["tips"][0][1] == "layer 0 (Linear 8→8), weight 8×8\nrank 1: rows 0:8 × cols 4:8, 128 B"
    assert d["tips"][1] == ["layer 2 (Linear 8→8), weight 8×8\nrank 0: rows 0:8 × cols 0:8, 256 B"]
