"""The memory dashboard without a kernel or engines: feed samples, check its model; telemetry file safety."""

from __future__ import annotations

import json
import os
import time

import pytest
import traitlets

import jupyter_mgpu.monitoring.memory_monitor  # noqa: F401  (the module, for _frame)
from jupyter_mgpu.engine.records import memory_sampler
from jupyter_mgpu.engine.records import telemetry as tele
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.widgets import memory_dashboard as wm
from jupyter_mgpu.widgets.colors import rank_color

GiB = 2**30


def cpu_sample(rank, resident, t, state="idle", peak=None, budget=4 * GiB, baseline=GiB // 4):
    return {
        "rank": rank,
        "time": t,
        "state": state,
        "kind": "cpu",
        "device": f"cpu:{rank}",
        "op": None,
        "resident_bytes": resident,
        "peak_resident_bytes": peak or resident,
        "budget_bytes": budget,
        "baseline_resident_bytes": baseline,
    }


def gpu_sample(rank, allocated, reserved, t, total=80 * GiB, state="busy"):
    return {
        "rank": rank,
        "time": t,
        "state": state,
        "kind": "cuda",
        "device": f"cuda:{rank}",
        "op": "matmul",
        "allocated_bytes": allocated,
        "reserved_bytes": reserved,
        "peak_allocated_bytes": allocated + GiB,
        "total_bytes": total,
        "free_bytes": total - reserved,
        "budget_bytes": total,
        "resident_bytes": GiB,
    }


def test_a_detached_dashboard_shows_pushed_samples():
    board = wm.MemoryDashboard(detached=True)
    now = time.time()
    board.update([cpu_sample(1, 3 * GiB, now, "busy"), cpu_sample(0, GiB, now)], now=now)
    assert [d["rank"] for d in board.devices] == [0, 1]
    d0, d1 = board.devices
    assert d0["used"] == GiB and d0["limit"] == GiB // 4 + 4 * GiB and d0["state"] == "idle"
    assert d0["fraction"] == pytest.approx(GiB / (GiB // 4 + 4 * GiB))
    assert d0["fill"] == wm.FILL_OK and d1["fill"] == wm.FILL_HIGH  # 3 of 4.25 GiB: past 60 %
    assert d0["color"] == rank_color(0) != d1["color"] == rank_color(1)
    assert board.updates == 1 and board.updated_at == now
    assert board.timeline == [[[0.0, GiB]], [[0.0, 3 * GiB]]]


def test_timeline_keeps_the_last_window_with_the_peak_of_each_step():
    board = wm.MemoryDashboard(detached=True)
    t0 = 1000.0
    for i in range(800):  # 80 s at 10 Hz; a one-sample spike at 70 s
        t = t0 + i / 10
        board.update([cpu_sample(0, 5 * GiB if i == 700 else GiB, t)], now=t)
    points = board.timeline[0]
    assert all(-60 <= ago <= 0 for ago, _ in points)
    assert points[0][0] < -59 and points[-1][0] == 0
    assert max(v for _, v in points) == 5 * GiB  # not lost to the down-sampling
    assert 200 <= len(points) <= 61 / wm.TIMELINE_STEP


def test_gpu_rows_use_allocator_numbers():
    board = wm.MemoryDashboard(detached=True)
    board.update([gpu_sample(0, 70 * GiB, 75 * GiB, time.time())])
    d = board.devices[0]
    assert (d["used"], d["reserved"], d["peak"], d["limit"]) == (70 * GiB, 75 * GiB, 71 * GiB, 80 * GiB)
    assert d["fill"] == wm.FILL_FULL and d["labels"]["used"] == "allocated" and d["labels"]["limit"] == "total"
    assert d["op"] == "matmul"


def test_dead_and_starting_ranks():
    board = wm.MemoryDashboard(detached=True)
    board.update([{**cpu_sample(0, GiB, time.time()), "state": "dead"}, {"rank": 1, "time": None, "state": "starting"}])
    assert board.devices[0]["fill"] == wm.FILL_DEAD and board.devices[0]["state"] == "dead"
    assert board.devices[1]["used"] is None and board.devices[1]["state"] == "starting"
    assert board.timeline[1] == []


@pytest.mark.parametrize("rate", [0, -2, 0.01, 21, 1e9, float("nan"), "10", None, True])
def test_bad_refresh_rates_get_one_sentence(rate):
    with pytest.raises(MgpuError, match=r"^refresh_rate must be between 0\.1 and 20 updates per second, got "):
        wm.MemoryDashboard(detached=True, refresh_rate=rate)
    board = wm.MemoryDashboard(detached=True)
    with pytest.raises(traitlets.TraitError, match="refresh_rate must be between"):
        board.refresh_rate = rate if isinstance(rate, (int, float)) and not isinstance(rate, bool) else -1
    assert board.refresh_rate == wm.DEFAULT_RATE


def test_no_session_is_one_sentence(monkeypatch):
    import jupyter_mgpu.session.lifecycle as sm

    monkeypatch.setattr(sm, "_current", None)
    with pytest.raises(MgpuError, match=r"^no multi-GPU session is running, so there is no memory to show; start"):
        wm.dashboard()
    with pytest.raises(MgpuError, match="no multi-GPU session is running"):
        wm.MemoryDashboard()


def test_the_es_module_and_styles_ship_with_the_package():
    board = wm.MemoryDashboard(detached=True)
    assert "export default" in wm.STATIC.joinpath("memory.js").read_text()
    assert board._esm and board._css


def _write(path, data):
    path.write_text(json.dumps(data))


def test_read_samples_ignores_foreign_stale_and_malformed_files(tmp_path):
    d = tmp_path / tele.TELEMETRY_DIR
    d.mkdir()
    good = {"rank": 0, "time": 1.0, "cluster_id": "abc", "pid": 1}
    _write(d / "rank0.json", good)
    _write(d / "rank1.json", {**good, "rank": 1, "cluster_id": "other"})  # another cluster's file
    _write(d / "rank2.json", {**good, "rank": 3})  # name and content disagree
    (d / "rank4.json").write_text("{not json")
    _write(d / "rank5.json", {**good, "rank": 5, "time": "late"})
    (d / "rank6.json").write_text(" " * (tele.MAX_SAMPLE_BYTES + 1))
    _write(tmp_path / "elsewhere.json", {**good, "rank": 7})
    os.symlink(tmp_path / "elsewhere.json", d / "rank7.json")  # links are not followed
    assert list(tele.read_samples(tmp_path, "abc")) == [0]
    assert sorted(tele.read_samples(tmp_path)) == [0, 1]
    assert tele.read_samples(tmp_path / "missing") == {}


def test_control_file_is_private_and_merges_changes(tmp_path):
    tele.write_control(tmp_path, reset_peak=1)
    ctl = tele.write_control(tmp_path, period=0.2)
    assert ctl == {"reset_peak": 1, "period": 0.2}
    path = tmp_path / tele.TELEMETRY_DIR / tele.CONTROL_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / tele.TELEMETRY_DIR).stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("period", [-1, 0.001, 61, "fast", True])
def test_engine_sampling_period_is_checked(period):
    with pytest.raises(ValueError, match="sampling period must be 0"):
        memory_sampler.set_period(period)


def test_dataframe_view_needs_pandas():
    import importlib.util
    import sys

    rows = [{"rank": 0, "time": 1.0, "state": "idle"}]
    frame = sys.modules["jupyter_mgpu.monitoring.memory_monitor"]._frame
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(MgpuError, match="as_frame=True needs pandas"):
            frame(rows)
    else:
        assert list(frame(rows)["rank"]) == [0]


def test_rows_carry_their_texts_in_the_one_size_format_and_the_timelines_a_labelled_axis():
    from jupyter_mgpu.engine.records.memory_figures import used_of_limit
    from jupyter_mgpu.units import format_bytes

    cpu = {
        "rank": 0,
        "time": 1.0,
        "state": "idle",
        "resident_bytes": 300 * 2**20,
        "peak_resident_bytes": 310 * 2**20,
        "baseline_resident_bytes": 200 * 2**20,
        "budget_bytes": 512 * 2**20,
    }
    row = wm.device_row(cpu)
    assert row["limit"] == 712 * 2**20 and row["text"] == "300.0 MiB / 712.0 MiB · peak 310.0 MiB"
    assert row["text"].startswith(used_of_limit(cpu)) and row["tips"]["limit"] == "runtime + budget 712.0 MiB"
    axis = wm.timeline_axis([[[-12.5, 250 * 2**20], [0.0, 300 * 2**20]]], [row], 60.0)
    assert axis["lo"] < 250 * 2**20 < 300 * 2**20 < axis["hi"] and axis["hi_text"] == format_bytes(axis["hi"])
    assert axis["span"] == 20.0 and axis["span_text"] == "−20 s"  # 12.5 s of history: not squeezed into 60 s
    assert wm.timeline_axis([[[-300.0, 1.0]]], [row], 60.0)["span"] == 60.0


def test_a_cpu_budget_that_counts_tensor_bytes_is_drawn_as_allocated_of_budget():
    sample = {
        "rank": 1,
        "time": 1.0,
        "state": "idle",
        "kind": "cpu",
        "resident_bytes": 300 * 2**20,
        "allocated_bytes": 64 * 2**20,
        "peak_allocated_bytes": 96 * 2**20,
        "budget_bytes": 512 * 2**20,
        "baseline_resident_bytes": 200 * 2**20,
    }
    row = wm.device_row(sample)
    assert (row["used"], row["limit"]) == (64 * 2**20, 512 * 2**20)
    assert row["text"] == "64.0 MiB / 512.0 MiB · peak 96.0 MiB" and row["labels"]["limit"] == "budget"


def test_a_rank_at_a_pdb_prompt_reads_debugging_and_a_kept_failure_s_memory_is_said():
    sample = {
        "rank": 2,
        "time": 1.0,
        "state": "busy",  # the main thread is inside the call, at the prompt
        "where": {"state": "debugging", "since": 0.5, "line": "line 3 of the cell"},
        "kind": "cpu",
        "allocated_bytes": 64 * 2**20,
        "budget_bytes": 512 * 2**20,
        "failure_held_bytes": 48 * 2**20,
    }
    row = wm.device_row(sample)
    assert row["state"] == row["badge"] == "debugging"  # as mg.where() and the sidebar say, not busy
    assert row["text"] == "64.0 MiB / 512.0 MiB · 48.0 MiB held by the last failure"
    assert row["held"] == 48 * 2**20 and "%mgpu_debug --release" in row["tips"]["held"]


def test_a_restarted_rank_keeps_its_timeline_and_the_restart_is_marked_on_it():
    board = wm.MemoryDashboard(detached=True)
    now = time.time()
    board.update([cpu_sample(0, GiB, now - 20), cpu_sample(1, 2 * GiB, now - 20)], now=now - 20)
    board.update([cpu_sample(0, GiB, now - 10), cpu_sample(1, 2 * GiB, now - 10, "dead")], now=now - 10)
    restarting = {**cpu_sample(1, 2 * GiB, now - 10), "state": "restarting"}
    board.update([cpu_sample(0, GiB, now - 5), restarting], now=now - 5)
    assert board.devices[1]["badge"] == "restarting" and board.devices[1]["fill"] == wm.FILL_DEAD
    back = {**cpu_sample(1, GiB // 2, now), "restarts": [now - 2, now - 999]}  # one within the window, one not
    board.update([cpu_sample(0, GiB, now), back], now=now)
    assert [v for _, v in board.timeline[1]] == [2 * GiB, 2 * GiB, GiB // 2]  # the history before the restart
    assert board.marks[0] == []
    ((ago, text),) = board.marks[1]
    assert ago == -2.0 and text.startswith("rank 1 restarted at ") and text.count(":") == 2
    board.close()
