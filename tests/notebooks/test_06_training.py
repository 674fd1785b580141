import re

from labrun import assert_page_is_clean, notebook_module

SHOTS = {
    "01_live_views": "import jupyter_mgpu as mg",
    "02_hand_written": "%%mgpu\ntorch.manual_seed(100 + rank)",
    "03_ddp": "%%mgpu\nfrom torch.nn.parallel",
    "04_logged": "m = mg.metrics()",
    "05_ddp_plot": "plot.stop()",
}

pytestmark, run = notebook_module("06_data_parallel_training.ipynb", SHOTS)


def test_training_notebook_reaches_its_stated_accuracy(run):
    nb, text = run.nb, run.text
    assert "1500 training and 297 test images of 64 pixels" in text["%%mgpu\nimport torch.nn.functional"]
    hand = text["%%mgpu\ntorch.manual_seed(100 + rank)"]
    assert "[rank 0] step 0: global loss 2.3" in hand
    hand_acc = float(re.search(r"hand-written data parallel: test accuracy ([0-9.]+)", hand).group(1))
    assert hand_acc >= 0.92
    # weights broadcast from rank 0 and identical updates: the same checksum on every rank, shown once
    assert re.search(r"^Out\[ranks 0–3\]: \(.*\)$", text["%%mgpu\nround(W.sum()"], re.M)
    ddp = text["%%mgpu\nfrom torch.nn.parallel"]
    ddp_acc = float(re.search(r"DDP: test accuracy ([0-9.]+) after 96 steps", ddp).group(1))
    assert ddp_acc >= 0.94
    assert re.search(r"^Out\[ranks 0–3\]: \S+$", text["%%mgpu\nsum(p.sum()"], re.M)  # equal on all ranks
    logged = text["m = mg.metrics()"]
    assert "384 records from ranks [0, 1, 2, 3]" in logged  # 96 DDP steps x 4 ranks
    assert "reached" in text["%%mgpu --targets 0"] and "NOT" not in text["%%mgpu --targets 0"]
    assert "engines stopped" in text["ddp_plot.stop()"]
    # a rank killed, started again, healed from a peer: training goes on with equal weights everywhere
    died = text["%%mgpu\nimport os, signal"]
    assert "rank 2 died (killed by SIGKILL)" in died and "%mgpu_restart --rank 2" in died
    restarted = text["%mgpu_restart --rank 2"]
    assert re.search(r"rank 2 started again in \d+\.\d s; the process group was rebuilt\nrank 2 is new: ", restarted)
    healed = text['mg.heal(2, ["Xtr"']
    assert "rank 2 got Xtr, ytr, Xte, yte, model, opt from rank 0" in healed and "model made again" in healed
    after = text["%%mgpu\nfrom torch.nn import functional as F"]
    assert float(re.search(r"after the heal: test accuracy ([0-9.]+)", after).group(1)) >= 0.94
    assert re.search(r"^Out\[ranks 0–3\]: \S+$", after, re.M)  # one checksum: equal on all ranks
    # the live views were displayed as widgets
    views = [
        o
        for c in nb.cells
        if c.source.startswith("import jupyter_mgpu")
        for o in c.outputs
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert len(views) == 2


def test_each_run_keeps_its_whole_curve_and_the_headers_say_what_is_drawn(run):
    plots = run.steps["plots"]["plots"]
    assert len(plots) == 2, plots
    hand, ddp = plots
    # the hand-written run (150 steps on 4 ranks) stays drawn to its end, under Run All too
    assert hand["header"] == "600 records, last step 150; stopped following the ranks", hand
    assert hand["points"][:4] == [150] * 4, hand
    assert ddp["header"] == "384 records, last step 96; stopped following the ranks", ddp
    assert ddp["points"][:4] == [96] * 4, ddp


def test_the_ddp_plot_grows_live_while_the_cell_trains_and_keeps_its_height(run):
    """Made before the DDP cell, the plot is redrawn in the page as the ranks log: several partial curves, never
    more points than steps, and its height not collapsing while a redraw is drawn (the page would jump)."""
    seen = run.steps["live"]["seen"]
    partial = {s["points"] for s in seen if 0 < s["points"] < 96}
    assert len(partial) >= 3, seen
    drawn = [s["height"] for s in seen if s["points"]]
    assert min(drawn) >= max(drawn) - 2, seen


def test_uneven_batches_are_named_in_seconds_then_fixed_with_join(run):
    """Rank 0 has a batch more: it waits in DDP's bucket all-reduce, issued from C++, which the session names
    with every rank's part; the same loop under Join finishes on every rank."""
    (error,) = [o for o in run.outputs("%%mgpu\nuneven = DDP") if o["output_type"] == "error"]
    said = error["evalue"]
    assert error["ename"] == "CollectiveHangError", said
    assert "rank 0 waits in all_reduce float32[650] issued by torch (a gradient bucket of DDP's" in said, said
    assert "torch.distributed.algorithms.Join" in said and "at line 5 of the cell" in said, said
    assert "ranks 1, 2, 3 finished the cell without calling it" in said, said
    joined = run.text["%%mgpu\nfrom torch.distributed.algorithms.join"]
    assert "[rank 0] finished its 3 steps" in joined and "[rank 3] finished its 2 steps" in joined, joined


def test_page_is_clean(run):
    assert_page_is_clean(run)
