"""The manager on a real 2-rank cluster of CPU virtual devices (the shared pool session)."""

from __future__ import annotations

from jupyter_mgpu.server.manager import ClusterManager


def test_manager_sees_real_engines_and_their_memory(s2):
    c = s2.cluster
    m = ClusterManager(dirs=lambda: [c.path])
    payload = m.clusters()["clusters"]
    assert [p["cluster_id"] for p in payload] == [c.cluster_id]
    info = payload[0]
    assert info["status"] == "running"
    assert [r["pid"] for r in info["ranks"]] == [c.engine_pids[r] for r in range(2)]
    assert all(r["alive"] and r["used_bytes"] > 10 << 20 for r in info["ranks"])
    assert [r["device"] for r in info["ranks"]] == ["cpu:0", "cpu:1"]
