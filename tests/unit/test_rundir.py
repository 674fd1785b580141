import os
import stat
import subprocess
import sys

from jupyter_mgpu import rundir


def test_cluster_dir_is_private_and_fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_MGPU_RUNTIME_DIR", str(tmp_path / "rt"))
    path = rundir.create(rundir.new_cluster_id())
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE(rundir.base_dir().stat().st_mode) == 0o700
    assert rundir.is_private(path)


def test_stale_dir_of_a_dead_kernel_is_cleaned_and_live_one_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_MGPU_RUNTIME_DIR", str(tmp_path / "rt"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = rundir.create("stale-1")
    rundir.write_json(stale / rundir.STATE_FILE, {"kernel_pid": dead.pid, "kernel_create_time": 1.0})
    live = rundir.create("live-1")
    rundir.write_json(
        live / rundir.STATE_FILE, {"kernel_pid": os.getpid(), "kernel_create_time": rundir.process_start(os.getpid())}
    )
    removed = rundir.clean_stale()
    assert removed == ["stale-1"]
    assert not stale.exists() and live.exists()
    assert [p.name for p in rundir.cluster_dirs()] == ["live-1"]


def test_pid_reuse_is_not_mistaken_for_the_kernel():
    import psutil

    me = psutil.Process()
    assert rundir.process_alive(me.pid, rundir.process_start(me.pid))
    assert not rundir.process_alive(me.pid, rundir.process_start(me.pid) - 100)
    # a state file an older version wrote holds psutil's create_time, seconds since the epoch
    assert rundir.process_alive(me.pid, me.create_time())
    assert not rundir.process_alive(me.pid, me.create_time() - 100)


def test_a_step_of_the_wall_clock_does_not_make_a_live_kernel_look_gone(monkeypatch):
    import psutil

    started = rundir.process_start(os.getpid())
    booted = psutil._psplatform.boot_time
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: booted() + 1.0)  # NTP stepped the clock 1 s
    monkeypatch.setattr(psutil, "boot_time", psutil._psplatform.boot_time)
    assert rundir.process_alive(os.getpid(), started)
