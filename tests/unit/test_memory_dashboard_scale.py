"""The memory dashboard at 32 and 64 ranks, fed with telemetry samples in the record format (no cluster):
each rank once, grouped by host with readable summaries, timelines coarser so a tick's bytes grow linearly
with the ranks; and after the session shuts down, every rank reads "shut down", never a stale "idle"."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from jupyter_mgpu.widgets import memory_dashboard as wm
from jupyter_mgpu.widgets import memory_rows

GiB, MiB = 2**30, 2**20


def record(rank: int, t: float, world: int, hosts: int | None, state: str = "idle") -> dict[str, Any]:
    """One rank's sample as ``engine/records/memory_sampler.py`` writes it (a CPU virtual device), with the
    ``host`` the relay adds for a cluster across hosts."""
    per = world // hosts if hosts else world
    busy = state == "idle" and rank % 16 == 3
    sample = {
        "time": t,
        "rank": rank,
        "pid": 40000 + rank,
        "cluster_id": "777-scale001",
        "device": f"cpu:{rank % per}",
        "kind": "cpu",
        "state": "busy" if busy else state,
        "op": "%%mgpu cell" if busy else None,
        "where": None,
        "resident_bytes": GiB + rank * MiB + int(t * 10) % 7 * MiB,
        "peak_resident_bytes": 2 * GiB,
        "data_bytes": GiB,
        "budget_bytes": 4 * GiB,
        "seq": int(t * 10),
        "period": 0.1,
        "peak_reset": 0,
        "baseline_resident_bytes": GiB // 4,
    }
    if hosts:
        sample["host"] = f"node{rank // per + 1}"
    return sample


def fed(world: int, hosts: int | None, seconds: float = 70.0, every: float = 0.5) -> wm.MemoryDashboard:
    """A detached dashboard fed ``seconds`` of samples of ``world`` ranks, one batch every ``every`` s."""
    board = wm.MemoryDashboard(detached=True)
    t0 = 1_700_000_000.0
    for i in range(int(seconds / every)):
        t = t0 + i * every
        board.update([record(r, t, world, hosts) for r in range(world)], now=t)
    return board


def tick_bytes(board: wm.MemoryDashboard) -> int:
    """What one tick sends at most: every synced value a push sets (devices, groups, timeline, axis)."""
    return sum(len(json.dumps(getattr(board, k))) for k in ("devices", "groups", "timeline", "axis"))


def test_64_ranks_on_4_hosts_each_rank_once_grouped_with_a_summary_each():
    board = fed(64, 4)
    assert [d["rank"] for d in board.devices] == list(range(64))
    groups = board.groups
    assert [g["host"] for g in groups] == ["node1", "node2", "node3", "node4"]
    assert sorted(r for g in groups for r in g["ranks"]) == list(range(64))  # each rank in exactly one group
    assert groups[1]["ranks"] == list(range(16, 32))
    # a folded group still says what its ranks do and hold: counts by state, busy first, and memory
    assert groups[0]["text"].startswith("node1 · 16 ranks · 1 busy · 15 idle · ")
    assert groups[0]["text"].endswith(" / 68.0 GiB")  # 16 × (runtime 256 MiB + budget 4 GiB)
    assert all(len(pts) <= wm.WINDOW_SECONDS / wm.TIMELINE_STEP_MANY + 2 for pts in board.timeline)
    assert min(len(pts) for pts in board.timeline) >= 55  # still a minute of history, a point a second


def test_32_ranks_on_one_host_are_one_group_without_a_host():
    board = fed(32, None, seconds=5)
    [group] = board.groups
    assert group["host"] == "" and group["ranks"] == list(range(32))
    assert group["text"].startswith("32 ranks · 2 busy · 30 idle · ")


def test_a_ticks_bytes_grow_at_most_linearly_with_the_ranks():
    per_rank = {n: tick_bytes(fed(n, 4 if n > 8 else None)) / n for n in (8, 32, 64)}
    # 64 ranks cost no more per rank than 32 (nothing quadratic), and less than 8 (coarser timelines)
    assert per_rank[64] <= 1.05 * per_rank[32]
    assert per_rank[64] < per_rank[8]
    assert per_rank[64] * 64 < 160_000, per_rank  # about 1.9 KB a rank: ~120 KB at 64 ranks


def test_state_counts_put_attention_first_and_name_shut_down_ranks():
    assert memory_rows.state_counts(["idle", "busy", "dead", "idle", "odd"]) == "1 dead · 1 busy · 1 odd · 2 idle"
    assert memory_rows.state_counts([memory_rows.ENDED_STATE] * 3) == "3 shut down"
    assert memory_rows.state_counts([]) == ""


def test_end_turns_every_badge_to_shut_down_and_nothing_live_comes_after():
    board = fed(64, 4, seconds=3)
    board.paused = True  # a paused dashboard still shows that the session ended
    updates = board.updates
    board.end()
    assert board.ended and board.status == "session shut down" and board.updates == updates + 1
    assert {d["state"] for d in board.devices} == {"stopped"}
    assert {d["badge"] for d in board.devices} == {"shut down"}
    assert {d["fill"] for d in board.devices} == {wm.FILL_DEAD} and {d["op"] for d in board.devices} == {""}
    assert [d["rank"] for d in board.devices] == list(range(64))  # the last figures stay, per rank
    assert all(g["text"].split(" · ")[2] == "16 shut down" for g in board.groups)
    # a reader's sample arriving after the end (a race with shutdown) changes nothing
    board.paused = False
    late = [record(r, 1_800_000_000.0, 64, 4) for r in range(64)]
    board._on_samples(late)
    board.update(late)
    assert {d["badge"] for d in board.devices} == {"shut down"} and board.updates == updates + 1
    board.end("again")  # once only
    assert board.status == "session shut down"


class FakeMonitor:
    """What a dashboard uses of ``monitoring.memory_monitor.MemoryMonitor``: the latest samples, a listener."""

    def __init__(self, samples: list[dict[str, Any]]):
        self.samples = samples
        self.listeners: list[Any] = []

    def latest(self) -> list[dict[str, Any]]:
        return [dict(s) for s in self.samples]

    def subscribe(self, fn: Any) -> Any:
        self.listeners.append(fn)
        return lambda: self.listeners.remove(fn)


class FakeSession:
    """The few attributes of ``session.core.Session`` a dashboard reads, and its shutdown callbacks."""

    world_size, device_kind = 4, "cpu"

    def __init__(self) -> None:
        self.shutdown_callbacks: list[Any] = []
        self.alive = True
        self.cluster = type("C", (), {"cluster_id": "777-scale002", "spec": type("S", (), {"telemetry_period": 0.1})})

    def check_alive(self) -> None:
        assert self.alive

    def shutdown(self) -> None:  # as Session.shutdown: the callbacks first, errors ignored
        self.alive = False
        for callback in list(self.shutdown_callbacks):
            callback()


def test_session_shutdown_leaves_no_idle_badge(monkeypatch):
    import jupyter_mgpu.monitoring.memory_monitor as mm

    mon = FakeMonitor([record(r, 1_700_000_000.0, 4, None) for r in range(4)])
    monkeypatch.setattr(mm, "monitor", lambda session: mon)
    session = FakeSession()
    board = wm.MemoryDashboard(session, refresh_rate=20)
    try:
        assert [d["badge"] for d in board.devices] == ["idle", "idle", "idle", "busy"]  # live, rank 3 busy
        assert board.running and mon.listeners
        session.shutdown()  # what %mgpu_shutdown runs
        assert not board.running and not mon.listeners
        assert [d["badge"] for d in board.devices] == ["shut down"] * 4
        assert board.ended and board.status == "session shut down"
        assert not [t for t in threading.enumerate() if t is board._thread]
    finally:
        board.close()


@pytest.mark.parametrize("state", ["dead", memory_rows.ENDED_STATE])
def test_dead_and_shut_down_bars_are_grey(state):
    assert memory_rows.fill_color(0.99, state) == memory_rows.FILL_DEAD
    assert memory_rows.fill_color(0.99, "busy") == memory_rows.FILL_FULL


def test_a_dashboard_of_many_ranks_starts_at_2_hz():
    from jupyter_mgpu.widgets.memory_dashboard import DEFAULT_RATE, default_rate

    assert default_rate(4) == default_rate(16) == DEFAULT_RATE == 10.0
    assert default_rate(17) == default_rate(64) == 2.0  # every push carries every rank
