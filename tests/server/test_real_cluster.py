"""The manager on a real 2-rank cluster of CPU virtual devices (the shared pool session)."""

from __future__ import annotations

from jupyter_mgpu.server.manager import ClusterManager


def test_manager_sees_real_engines_and_their_memory(s2):
    import time

    c = s2.cluster
    m = ClusterManager(dirs=lambda: [c.path])
    s2.run_cell("held = torch.ones(12 << 20)", targets=1)  # 48 MiB of tensors on rank 1 only
    try:
        deadline = time.monotonic() + 5
        while True:  # the next telemetry sample shows it
            payload = m.clusters()["clusters"]
            used = [r["used_bytes"] for r in payload[0]["ranks"]]
            if used[1] >= 48 << 20 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        s2.run_cell("del held", targets=1)
    assert [p["cluster_id"] for p in payload] == [c.cluster_id]
    info = payload[0]
    assert info["status"] == "running"
    assert [r["pid"] for r in info["ranks"]] == [c.engine_pids[r] for r in range(2)]
    assert all(r["alive"] for r in info["ranks"])
    assert used[1] >= 48 << 20 and used[0] < 48 << 20, used
    assert [r["device"] for r in info["ranks"]] == ["cpu:0", "cpu:1"]


def test_the_sidebar_s_stack_view_merges_every_rank_s_frames_while_one_runs(s2, tmp_path):
    """``GET clusters/<id>/where``'s payload: rank 1 inside a function of the cell, rank 0 idle, one tree."""
    import time

    from jupyter_mgpu.server import rank_stacks

    c = s2.cluster
    m = ClusterManager(dirs=lambda: [c.path])
    go = tmp_path / "go"  # the test lets rank 1 go on by making this file
    code = f"import os, time\ndef wait_here():\n    while not os.path.exists({str(go)!r}):\n        time.sleep(0.02)\nwait_here()"
    pending = s2.run_cell(code, targets=[1], block=False, stream=False)
    try:
        deadline = time.monotonic() + 10
        while True:
            tree = rank_stacks.where(*m.locate(c.cluster_id))
            if any("wait_here" in label for _, label, _ in tree["lines"]) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        go.touch()
        pending.get(timeout=20)
    assert tree["ranks"] == "ranks 0, 1", tree
    frames = {label.split("  ·  ")[0]: span for _, label, span in tree["lines"]}
    assert any("wait_here" in f and span == "rank 1" for f, span in frames.items()), tree["lines"]
    assert [span for depth, label, span in tree["lines"] if depth == 0 and label == "idle"] == ["rank 0"], tree
