from labrun import assert_page_is_clean, notebook_module

SHOTS = {
    "01_first_cell": "%%mgpu\nx = torch.full",
    "02_status": "%mgpu_status",
    "03_error": "%%mgpu\nvalues",
    "04_stuck": "%%mgpu\nif rank != 3",
    "05_oom": "%%mgpu\nif rank == 1",
    "06_one_device": "%%mgpu --targets 0",
    "07_hand_split": "%%mgpu\na = b = None",
    "08_mg_matmul": "A = mg.randn(3072",
}

pytestmark, run = notebook_module("01_quickstart.ipynb", SHOTS)


def test_quickstart_notebook_runs_and_shows_what_it_says(run):
    text = run.text
    assert "mgpu: 4 engines ready (4 × CPU virtual device, gloo" in text["%mgpu_init 4 --mem-per-device 512MiB"]
    out = text["%%mgpu\nx = torch.full"]
    for r in range(4):
        assert f"[rank {r}] {r} 4 cpu tensor([6., 6.])" in out
    assert "Out[rank 3]: 48.0" in text["%%mgpu\nx.sum()"]
    assert "rank" in text["%mgpu_status"] and "cpu:3" in text["%mgpu_status"]
    assert "[499999500000.0, 499999500000.0, 499999500000.0, 499999500000.0]" in text["import jupyter_mgpu as mg"]
    assert "RankError: IndexError on rank 2: list index out of range at line 4 of the cell" in text["%%mgpu\nvalues"]
    stuck = text["%%mgpu\nif rank != 3"]
    assert "CollectiveHangError: the ranks are stuck: ranks 0, 1, 2 wait in all_reduce float32[1] at line 3 of the cell" in stuck
    assert "rank 3 finished the cell without calling it" in stuck
    mismatch = text["%%mgpu\nx = torch.ones(4 if rank < 2 else 8)"]
    assert "CollectiveMismatchError: the ranks called different collectives at #" in mismatch
    assert "ranks 0, 1: all_reduce float32[4] at line 3 of the cell; ranks 2, 3: all_reduce float32[8] at line 3" in mismatch
    assert "Out[ranks 0–3]: tensor([4.])" in text["%%mgpu\ny = torch.ones(1)"]  # the same on every rank: once
    assert "rank 1 ran out of device memory (budget 512.0 MiB) while allocating 1.0 GiB" in text["%%mgpu\nif rank == 1"]
    # the boundary: one device and the hand split fail with the budget error, mg.matmul fits and is right
    assert (
        "rank 0 ran out of device memory (budget 96.0 MiB) while allocating 36.0 MiB at line 4 of the cell: c = a @ b"
    ) in text["%%mgpu --targets 0"]
    assert (
        "rank 0 ran out of device memory (budget 96.0 MiB) while allocating 36.0 MiB at line 9 of the cell: "
        "C = torch.cat"
    ) in text["%%mgpu\na = b = None"]
    assert "matmul report: ring" in text["A = mg.randn(3072"]
    assert float(text["c = C.gather()"].split("max error vs torch.mm:")[1]) < 1e-2
    assert "engines stopped" in text["%mgpu_shutdown"]


def test_rank_output_ends_in_rank_order_and_status_shows_idle_ranks_idle(run):
    lines = [ln for ln in run.text["%%mgpu\nx = torch.full"].splitlines() if ln.startswith("[rank ")]
    assert [ln.split("]")[0] for ln in lines] == [f"[rank {r}" for r in range(4)], lines
    status = run.text["%mgpu_status"]
    assert "busy" not in status and status.count("idle") == 4, status


def test_the_sidebar_says_restarting_never_dead_and_agrees_with_the_dashboard(run):
    seen = run.steps["sidebar"]["seen"]
    cards = [c for snap in seen for c in snap]
    ranks = [r for c in cards for r in c["ranks"]]
    assert len(seen) > 20 and ranks
    assert any(c["status"] == "restarting" for c in cards), {c["status"] for c in cards}
    assert all(r["state"] != "dead" and "?" not in r["label"] and r["figures"] != "0 B / 0 B" for r in ranks), [
        r for r in ranks if r["state"] == "dead" or "?" in r["label"]
    ][:3]
    assert all(not c["broken"] for c in cards), [c["broken"] for c in cards if c["broken"]][:3]
    same = run.steps["sidebar"]["same"]
    assert same and same["sidebar"].split(" / ")[1] == same["dashboard"].split(" / ")[1].split(" · ")[0], same


def test_page_is_clean(run):
    assert_page_is_clean(run)
