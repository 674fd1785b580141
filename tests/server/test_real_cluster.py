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
