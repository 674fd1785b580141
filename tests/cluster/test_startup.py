"""The checks a start makes still fire on the fast start path: a rank that dies or fails its set-up
while the cluster starts is named at once (not after a timeout), a spare (controller and supervisor
started at ``%load_ext``) is taken over or cleaned up, and nothing is left behind either way."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
from processes import cluster_pids, wait_gone

import jupyter_mgpu.cluster.spare as cl
import jupyter_mgpu.session.lifecycle as sm
from jupyter_mgpu import rundir as rd
from jupyter_mgpu.cluster.local import Cluster, ClusterSpec
from jupyter_mgpu.cluster.processes import kernel_identity, kill_group, spawn
from jupyter_mgpu.devices import DeviceInfo
from jupyter_mgpu.engine.startup.held_ports import held_socket
from jupyter_mgpu.errors import EngineDiedError, MgpuError

pytestmark = pytest.mark.cluster
CONTROLLER = "jupyter_mgpu.engine.startup.controller"


@pytest.fixture
def no_current():
    saved = sm._current
    sm._current = None
    try:
        yield
    finally:
        sm._current = saved


def _processes_naming(path) -> list[int]:
    """This user's processes whose command line names a cluster directory (what ``stop`` ends)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if (
                p.info["cmdline"]
                and any(str(path) in a for a in p.info["cmdline"])
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                out.append(p.info["pid"])
        except psutil.Error:
            pass
    return out


def _new_dirs(before: set) -> list:
    """This process's cluster directories made since ``before`` (another worker's are named by its pid)."""
    return [p for p in rd.base_dir().iterdir() if p.name not in before and p.name.startswith(f"{os.getpid()}-")]


def _stop_rank_then_kill(rank: int, before: set, found: dict, stop: threading.Event) -> None:
    """Freeze ``rank`` as soon as its engine is forked (so it cannot register), then kill it.

    ``before`` is listed by the caller before the thread starts: listed here, it could already hold the
    new cluster's directory on a loaded machine, and the rank would never be found."""
    while not stop.is_set():
        for path in _new_dirs(before):
            engines = rd.read_json(path / "engines.json")
            if engines and str(rank) in engines:
                pid = int(engines[str(rank)])
                os.kill(pid, signal.SIGSTOP)
                found.update(path=path, pid=pid, at=time.monotonic())
                time.sleep(0.3)
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.002)


@pytest.mark.slow
def test_a_rank_killed_while_starting_is_named_at_once_and_nothing_is_left(no_current):
    found: dict = {}
    stop = threading.Event()
    before = {p.name for p in rd.base_dir().iterdir()}
    killer = threading.Thread(target=_stop_rank_then_kill, args=(1, before, found, stop), daemon=True)
    killer.start()
    try:
        with pytest.raises(EngineDiedError, match=r"rank 1 died \(killed by SIGKILL\) while starting") as info:
            s = sm.init(3, cpu=True, timeout=30)
            s.shutdown()
            pytest.fail(f"the test never caught rank 1 while it started (found: {found})")
    finally:
        stop.set()
        killer.join(5)
    assert info.value.ranks == [1]
    assert time.monotonic() - found["at"] < 15  # reported when it died, not after the 30 s timeout
    assert wait_gone(_processes_naming(found["path"])) == []
    assert not found["path"].exists()


@pytest.mark.slow
def test_a_failing_setup_is_named_and_nothing_is_left(no_current, monkeypatch):
    # a real mistake a user can make: gloo told to use a network interface this host does not have
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuchif0")
    before = {p.name for p in rd.base_dir().iterdir()}
    t = time.monotonic()
    with pytest.raises(EngineDiedError, match=r"rank [01] failed to start: .*nosuchif0") as info:
        sm.init(2, cpu=True, timeout=30)
    assert time.monotonic() - t < 15
    assert info.value.ranks and set(info.value.ranks) <= {0, 1}
    for path in _new_dirs(before):
        assert wait_gone(_processes_naming(path)) == []
        assert not path.exists()


@pytest.mark.slow
def test_the_spare_is_taken_over_and_nothing_is_left(no_current):
    cl.prewarm()
    spare = cl._spare
    assert spare is not None and spare.usable()
    s = sm.init(2, cpu=True, timeout=30)
    try:
        assert cl._spare is None
        assert (s.cluster.controller.pid, s.cluster.supervisor.pid) == (spare.controller.pid, spare.supervisor.pid)
        assert s.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()") == ["2.0"] * 2
        marks = s.cluster.startup_marks()
        assert marks["controller.spawned"] < marks["kernel.start"]  # started at prewarm, not by init
        pids = cluster_pids(s)
    finally:
        s.shutdown()
    assert wait_gone(pids) == []
    assert not spare.path.exists()


def test_a_controller_that_dies_binding_its_ports_is_told_at_once():
    """ipyparallel writes the client's connection file before it binds most ports: a controller that then
    dies (here a port another process listens on) is told with its own words, not by a client that waited
    its whole timeout for an answer ("Hub connection request timed out", as CI saw once)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    # the controller's first ports, held here as held_ports holds them (bound, never listening), so this
    # test takes no port from another process; its next ports are its own held random ones
    held = [held_socket("127.0.0.1") for _ in range(3)]
    ports = [*(h.getsockname()[1] for h in held), taken.getsockname()[1]]  # registration binds, the 4th fails
    path = rd.create(rd.new_cluster_id())
    pid, ctime = kernel_identity()
    args = ["--usethreads", "--ip=127.0.0.1", f"--profile-dir={path / 'profile'}", "--log-level=WARN"]
    controller = spawn(
        path, [CONTROLLER, str(pid), repr(ctime), *args, f"--IPController.ports={','.join(map(str, ports))}"]
    )
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a live one, no engines
    cluster = Cluster(
        ClusterSpec([DeviceInfo("cpu", 0, "cpu", 1 << 20)], "gloo", 30), path.name, path, controller, supervisor
    )
    began = time.monotonic()
    try:
        with pytest.raises(
            MgpuError,
            match=r"^the cluster's ipyparallel controller exited with code 1 while "
            r"starting; its last words: zmq\.error\.ZMQError: Address already in use",
        ):
            cluster._connect()
        assert time.monotonic() - began < 8  # the client's own wait: 10 s
        assert (path / "profile" / "security" / "ipcontroller-client.json").exists()  # the file was there
    finally:
        for sock in (taken, *held):
            sock.close()
        supervisor.kill()
        supervisor.wait()
        kill_group(controller.pid)
        controller.wait()
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_spare_with_a_dead_process_is_cleaned_and_a_fresh_cluster_starts(no_current):
    cl.prewarm()
    spare = cl._spare
    spare_pids = [spare.controller.pid, spare.supervisor.pid]
    os.kill(spare.controller.pid, signal.SIGKILL)
    spare.controller.wait(5)
    s = sm.init(2, cpu=True, timeout=30)
    try:
        assert s.cluster.path != spare.path and s.cluster.controller.pid not in spare_pids
        assert s.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()") == ["2.0"] * 2
        pids = cluster_pids(s)
    finally:
        s.shutdown()
    assert wait_gone(pids + spare_pids) == []
    assert not spare.path.exists()


def test_discarding_the_spare_leaves_nothing():
    cl.prewarm()
    spare = cl._spare
    pids = [spare.controller.pid, spare.supervisor.pid]
    cl.discard_spare()
    assert wait_gone(pids) == [] and not spare.path.exists()
    assert _processes_naming(spare.path) == []


@pytest.mark.slow
def test_the_startup_timeline_names_every_phase(no_current):
    s = sm.init(2, cpu=True, timeout=30)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "telemetry.first.1" not in s.cluster.startup_marks():
            time.sleep(0.05)
        marks = s.cluster.startup_marks()
    finally:
        s.shutdown()
    for name in (
        "kernel.start",
        "controller.spawned",
        "controller.main",
        "controller.ready",
        "supervisor.main",
        "torch.start",
        "torch.imported",
        "shim.ready",
        "supervisor.forked",
        "engines.registered",
        "kernel.ready",
        *(f"{m}.{r}" for m in ("pg.start", "pg.joined", "ipengine.start", "telemetry.first") for r in (0, 1)),
    ):
        assert name in marks, (name, json.dumps(marks))
    assert marks["kernel.start"] <= marks["controller.ready"] <= marks["engines.registered"] <= marks["kernel.ready"]
    assert marks["torch.imported"] <= marks["supervisor.forked"] <= marks["pg.joined.0"]


def _budget_modes(s) -> list[str]:
    return s.run_cell(
        "from jupyter_mgpu.engine.shards import budget as _b; _b.mode(), _b.fallback_reason()", stream=False
    )


@pytest.mark.slow
def test_first_start_after_install_does_not_wait_for_the_compiler(no_current, tmp_path, monkeypatch):
    """An empty shim cache: the start compiles in the background, its ranks use the OS limit and say
    why; once the compile is done the next cluster uses the shim."""
    from jupyter_mgpu.engine.shards import allocator_budget as ab

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if not ab._compiler():
        pytest.skip("no C++ compiler here")
    s = sm.init(2, cpu=True, timeout=30)
    try:
        marks = s.cluster.startup_marks()
        assert marks["shim.ready"] - marks["shim.settle"] < 0.2  # no wait for a compile this start began
        modes = _budget_modes(s)
        assert all(m.startswith("('rlimit'") and "still being compiled" in m for m in modes), modes
    finally:
        s.shutdown()
    target = ab.library_path()
    deadline = time.monotonic() + ab.BUILD_TIMEOUT
    while not (target.exists() and not ab.building(target)) and time.monotonic() < deadline:
        time.sleep(0.2)  # the compile moves the library into place, then drops its lock
    assert target.exists() and not ab.building(target)
    with sm.init(2, cpu=True, timeout=30) as s:
        assert all(m.startswith("('allocator'") for m in _budget_modes(s))


def test_an_engine_whose_registration_the_client_missed_is_found(s2):
    """ipyparallel's client hears of an engine from a notification it subscribes to only after connecting: one
    that registered in between is missing from ``client.ids`` (simulated: forgotten by a second client)."""
    import ipyparallel as ipp

    from jupyter_mgpu.cluster.missed_registrations import caught_up

    client_file = s2.cluster.path / "profile" / "security" / "ipcontroller-client.json"
    full = ipp.Client(str(client_file), timeout=10)
    assert caught_up(full, client_file, 10) is full  # nothing missed: the same client
    full._ids.remove(1)  # the notification of rank 1's engine never came
    full._engines.pop(1)
    fresh = caught_up(full, client_file, 10)
    try:
        assert fresh is not full and fresh.ids == [0, 1]
        assert fresh[:].apply_sync(lambda: 1) == [1, 1]  # and it reaches both engines
    finally:
        fresh.close()
