"""The launcher path on one host: ipyparallel's local launcher starts stock engines, which become ranks
through the relay and the TCP rendezvous. Everything that crosses hosts in a real cluster goes through
the same code here (telemetry, traces and metrics over the links, the guard and direct channel relayed,
the store bound to one interface and closed after the rendezvous), only on loopback.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time

import psutil
import pytest
import torch
from processes import wait_gone

import jupyter_mgpu as mg
from jupyter_mgpu.errors import EngineDiedError, Interrupted, MgpuError, RankError

pytestmark = pytest.mark.cluster


def _cluster_pids(s) -> list[int]:
    """The kernel's children that belong to the cluster (controller, relay, engines, nannies)."""
    marker = str(s.cluster.path)
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any(marker in a for a in p.cmdline()) or p.pid in s.cluster.engine_pids.values():
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def _gone(pids: list[int], timeout: float = 15) -> list[int]:
    return wait_gone(pids, timeout)


@pytest.fixture(scope="module")
def local2():
    import jupyter_mgpu.session.lifecycle as sm

    saved = sm._current
    s = sm._current = sm.start_session(2, launcher="local", cpu=True, mem_per_device="256MiB", timeout=20)
    yield s
    pids = _cluster_pids(s)
    s.shutdown()
    assert _gone(pids) == []
    sm._current = saved if saved is not None and saved.alive else None


def _rank_and_sum():
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import state as rank_state

    x = torch.ones(3) * (rank_state.get().rank + 1)
    dist.all_reduce(x)
    return rank_state.get().rank, x.tolist(), rank_state.get().host, os.environ["GLOO_SOCKET_IFNAME"]


def test_ranks_are_labelled_by_host_and_meet_over_the_tcp_store(local2):
    host = socket.gethostname()
    assert local2.cluster.hosts == {0: host, 1: host}
    assert local2.cluster.local_ranks == {0, 1}  # same machine and namespaces: transfers stay by address
    rows = local2.status()
    assert [r["device"] for r in rows] == [f"{host}:cpu:0", f"{host}:cpu:1"]
    assert local2.run(_rank_and_sum) == [(0, [3.0] * 3, host, "lo"), (1, [3.0] * 3, host, "lo")]


def _store_state():
    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.group import tcp_rendezvous

    return rank_state.get().store, tcp_rendezvous.listening()


def test_the_rendezvous_store_refuses_newcomers_once_the_group_met(local2):
    (store, listening0), (_, listening1) = local2.run(_store_state)
    assert store["host"] == "127.0.0.1" and not listening0 and not listening1
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):  # at once, not after a timeout
        s.settimeout(5)
        s.connect((store["host"], store["port"]))
    rank0 = psutil.Process(local2.cluster.engine_pids[0])
    before, start = sum(rank0.cpu_times()[:2]), time.monotonic()
    time.sleep(0.5)
    used = sum(rank0.cpu_times()[:2]) - before  # the closed store's loop spun a core at 100 % (issue 44's run)
    assert used < 0.5 * (time.monotonic() - start), f"rank 0 used {used:.2f} s of CPU in 0.5 s at rest"


def test_magic_cells_blocking_calls_and_the_guard_go_through_the_relay(local2):
    from ipshell import shell

    from jupyter_mgpu.engine.watch import collective_guard

    ip = shell()
    ip.run_cell(
        "%%mgpu\nimport socket\nx = torch.full((2,), float(rank))\ndist.all_reduce(x)\n"
        "print('VALUE', rank, x.tolist(), device)"
    )
    assert local2._direct_ok([0, 1])  # blocking calls take the relayed direct channel
    for r in (0, 1):
        reply = collective_guard.ask(local2.runtime_dir, r, "progress")
        assert reply is not None and reply["rank"] == r and reply["in_call"] is False


def test_telemetry_crosses_the_link_often_and_fast(local2):
    mon = mg.memory(session=local2)
    assert {m.get("host") for m in mon} == {socket.gethostname()}
    seqs: dict[int, set] = {0: set(), 1: set()}
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        for m in mg.memory(session=local2):
            seqs[m["rank"]].add(m.get("seq"))
        time.sleep(0.02)
    assert all(len(v) >= 10 for v in seqs.values()), {r: len(v) for r, v in seqs.items()}  # >= 5 Hz

    def hold(nbytes):
        import time

        import torch

        from jupyter_mgpu.engine.shards import shard_store as store

        store.put("held-by-test", torch.ones(nbytes // 4))
        return time.time()

    lat = []
    for _ in range(3):
        local2.run(hold, 4, targets=1)
        while (mg.memory(session=local2)[1].get("allocated_bytes") or 0) > 32 * 2**20:
            time.sleep(0.01)
        made = local2.run(hold, 64 * 2**20, targets=1)[0]
        while (mg.memory(session=local2)[1].get("allocated_bytes") or 0) < 64 * 2**20:
            assert time.time() - made < 5, "an allocation on rank 1 never reached the kernel"
            time.sleep(0.005)
        lat.append(time.time() - made)
    local2.run(hold, 4, targets=1)
    assert sorted(lat)[1] <= 0.5, lat
    mg.reset_peak(session=local2)  # steering goes down the links: every rank acknowledges within 2 s
    assert all(m.get("peak_reset", 0) >= 1 for m in mg.memory(session=local2))


def test_live_traces_and_metrics_are_mirrored(local2):
    a = mg.randn(256, 128, placement=mg.Shard(0), seed=1, session=local2)
    b = mg.randn(128, 64, placement=mg.Shard(0), seed=2, session=local2)
    with mg.trace(session=local2) as t:
        c = mg.matmul(a, b, strategy="ring")
    assert torch.allclose(c.gather(), a.gather() @ b.gather(), atol=1e-4)
    assert {e["rank"] for e in t.events} == {0, 1}
    path = os.path.join(local2.runtime_dir, "trace", "rank1.jsonl")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not (os.path.exists(path) and "ring" in open(path).read()):
        time.sleep(0.05)
    assert "ring" in open(path).read()

    def log_loss():
        from jupyter_mgpu.engine import state as rank_state
        from jupyter_mgpu.engine.records import training

        for step in range(3):
            training.log(step=step, loss=float(rank_state.get().rank + step))

    mg.clear_metrics(session=local2)
    local2.run(log_loss)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and len(mg.metrics(session=local2)) < 6:
        time.sleep(0.05)
    recs = mg.metrics(session=local2)
    assert sorted((r["rank"], r["step"], r["loss"]) for r in recs) == [
        (r, s, float(r + s)) for r in (0, 1) for s in range(3)
    ]


def _stuck_on_rank0():
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import state as rank_state

    if rank_state.get().rank == 0:
        x = torch.ones(2)
        dist.all_reduce(x)
    return "done"


def _raise_on_rank1():
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import state as rank_state

    if rank_state.get().rank == 1:
        raise ValueError("rank 1 gives up")
    x = torch.ones(2)
    dist.all_reduce(x)


def test_a_rank_blocked_in_a_collective_is_released_and_the_group_rebuilt(local2):
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(Interrupted, match="rebuilt"):
        local2.run(_stuck_on_rank0)
    assert time.monotonic() - t0 < 15  # the session timeout is 20 s: the rank was released
    assert [v[1] for v in local2.run(_rank_and_sum)] == [[3.0] * 3, [3.0] * 3]
    t0 = time.monotonic()
    with pytest.raises(RankError, match="released at once"):
        local2.run(_raise_on_rank1)
    assert time.monotonic() - t0 < 15  # released, not the 20 s timeout
    assert [v[1] for v in local2.run(_rank_and_sum)] == [[3.0] * 3, [3.0] * 3]


def test_a_killed_rank_is_started_again_by_the_launcher_and_the_survivor_keeps_its_values(local2):
    """issue 46: the local launcher starts one more engine, which becomes rank 1 again; rank 0 keeps its
    namespace; the group meets in a fresh store that is closed to newcomers afterwards."""
    local2.run_cell("kept = torch.full((3,), float(rank) + 7)", stream=False)
    before = dict(local2.cluster.rank_to_engine)
    os.kill(local2.cluster.engine_pids[1], signal.SIGKILL)
    with pytest.raises(EngineDiedError, match=r"rank 1 died"):
        local2.run(_rank_and_sum)
    before_pids = set(_cluster_pids(local2))
    info = local2.cluster.rank_info[1]
    local2.cluster.rank_info[1] = {**info, "host_key": "another-host"}  # as if the launcher came up elsewhere
    try:
        with pytest.raises(MgpuError, match=r"^the engine started again for rank 1 runs on .*: it was stopped; run"):
            mg.restart([1])
    finally:
        local2.cluster.rank_info[1] = info
    assert _gone(sorted(set(_cluster_pids(local2)) - before_pids)) == []  # the stray engine and its nanny
    assert not [k for k in local2.cluster.ipp.engines if k.startswith("rank1-")]  # its engine set stopped
    assert local2.cluster.rank_to_engine == before
    report = mg.restart([1])
    assert report.ranks == [1] and report.pids[1] == local2.cluster.engine_pids[1]
    assert psutil.pid_exists(report.pids[1])
    assert str(report).startswith("rank 1 started again in "), report
    assert "kept" in report.lacking and "rank" not in report.lacking  # what the cells defined, not ours
    assert re.search(r"rank 1 is new: [a-z, ]*kept[a-z, ]* (is|are) not defined there", str(report)), report
    assert local2.cluster.rank_to_engine[0] == before[0] and local2.cluster.rank_to_engine[1] != before[1]
    assert 1 not in local2.cluster.exits()
    assert local2.run_cell("kept.tolist()", targets=[0], stream=False) == [str([7.0] * 3)]
    assert local2.run(_rank_and_sum) == [(r, [3.0] * 3, socket.gethostname(), "lo") for r in (0, 1)]
    (store0, listening0), (store1, listening1) = local2.run(_store_state)
    assert store0 == store1 and not listening0 and not listening1
    with socket.socket() as s, pytest.raises(OSError):  # the restart's store takes no newcomer either
        s.settimeout(3)
        s.connect((store0["host"], store0["port"]))
    assert local2._direct_ok([0, 1])  # the new rank's direct channel goes through the relay again
    with pytest.raises(MgpuError, match=r"rank 1 is alive: only a dead rank is restarted"):
        mg.restart([1])


def test_rank_0_that_served_the_store_is_started_again_and_meets_rank_1_in_a_store_rank_1_opens(local2):
    local2.run_cell("kept = torch.full((3,), float(rank) + 7)", stream=False)
    os.kill(local2.cluster.engine_pids[0], signal.SIGKILL)
    with pytest.raises(EngineDiedError, match=r"rank 0 died"):
        local2.run(_rank_and_sum)
    report = mg.restart()  # every dead rank: rank 0
    assert report.ranks == [0] and "kept" in report.lacking
    assert local2.run_cell("kept.tolist()", targets=[1], stream=False) == [str([8.0] * 3)]
    assert local2.run(_rank_and_sum) == [(r, [3.0] * 3, socket.gethostname(), "lo") for r in (0, 1)]
    (store0, listening0), (store1, listening1) = local2.run(_store_state)
    assert store0 == store1 and not listening0 and not listening1
    masters = local2.run(lambda: (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]))
    assert masters[0] == masters[1] == (store0["host"], str(store0["port"]))  # torchrun's view follows the store


def test_a_killed_engine_is_named_and_nothing_is_left():
    import jupyter_mgpu.session.lifecycle as sm

    s = sm.start_session(2, launcher="local", cpu=True, mem_per_device="256MiB", timeout=60)
    pids = _cluster_pids(s)
    try:
        os.kill(s.cluster.engine_pids[1], signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EngineDiedError, match=r"rank 1 died"):
            s.run(_rank_and_sum)
        assert time.monotonic() - t0 < 30  # named when it died, not after the 60 s timeout
    finally:
        s.shutdown()
    assert _gone(pids) == []
    assert not os.path.exists(s.cluster.path)


def test_a_silent_engine_is_named_after_the_link_s_silence(monkeypatch):
    """An engine (or its host) that stops answering without closing its connection: the link goes silent
    (the relay's 10 s, shortened to 3 s here: every engine pings each second)."""
    import jupyter_mgpu.session.lifecycle as sm
    from jupyter_mgpu.launch import relay

    monkeypatch.setattr(relay, "SILENCE", 3.0)
    s = sm.start_session(2, launcher="local", cpu=True, mem_per_device="256MiB", timeout=60)
    pids = _cluster_pids(s)
    try:
        os.kill(s.cluster.engine_pids[1], signal.SIGSTOP)
        t0 = time.monotonic()
        while 1 not in s.cluster.exits() and time.monotonic() - t0 < 20:
            time.sleep(0.1)
        took = time.monotonic() - t0
        # the silence counts from the engine's last ping, up to a second before it stopped: not named at once
        assert 1 in s.cluster.exits() and relay.SILENCE - relay.PING_EVERY - 0.5 < took < 15, took
        with pytest.raises(EngineDiedError, match=r"rank 1 died"):
            s.run(_rank_and_sum)
    finally:
        os.kill(s.cluster.engine_pids[1], signal.SIGCONT)  # it finds its link closed and exits
        s.shutdown()
    assert _gone(pids) == []


def test_launch_options_are_checked_before_anything_starts():
    import jupyter_mgpu.session.lifecycle as sm

    before = set(p.pid for p in psutil.Process().children(recursive=True))
    for kwargs, message in [
        (dict(launcher="condor"), "unknown launcher"),
        (dict(launcher="local"), "needs the number of engines"),
        (dict(hosts="a:2,a:1"), "names a host twice"),
        (dict(launcher="mpi", hosts="a:2"), "does not go with --launcher mpi"),
        (dict(launcher="local", partition="gpu"), "batch-system options"),
        (dict(launcher="local", interface="no-such-if0"), "no interface no-such-if0"),
        (dict(launcher="pbs"), "needs the number of engines"),
    ]:
        n = 2 if "needs the number" not in message else None
        with pytest.raises(MgpuError, match=message):
            sm.start_session(n, cpu=True, **kwargs)
    with pytest.raises(MgpuError, match=r"the pbs launcher needs qsub, which is not installed on "):
        sm.start_session(2, cpu=True, launcher="pbs")
    time.sleep(0.5)
    after = set(p.pid for p in psutil.Process().children(recursive=True))
    assert not (after - before)


def test_connect_joins_a_running_ipyparallel_cluster(tmp_path):
    import ipyparallel as ipp

    import jupyter_mgpu.session.lifecycle as sm

    cluster = ipp.Cluster(n=2, profile_dir=str(tmp_path / "profile"), cluster_id="mgpu-connect", log_level=40)
    cluster.start_cluster_sync()
    try:
        cluster.connect_client_sync().wait_for_engines(2, timeout=60)
        s = sm.start_session(connect=cluster.cluster_file, cpu=True, mem_per_device="256MiB", timeout=20)
        try:
            assert [v[1] for v in s.run(_rank_and_sum)] == [[3.0] * 3, [3.0] * 3]
            assert [r["device"] for r in s.status()] == [f"{socket.gethostname()}:cpu:{i}" for i in (0, 1)]
            engines = list(s.cluster.engine_pids.values())
        finally:
            s.shutdown()
        assert _gone(engines) == []  # the engines it made ranks end with the session (they hold its group)
        assert cluster.controller.process.is_running()  # the user's controller keeps running
    finally:
        cluster.stop_cluster_sync()


def test_connect_refuses_a_missing_or_foreign_connection_file(tmp_path):
    import jupyter_mgpu.session.lifecycle as sm

    missing = tmp_path / "cluster-none.json"
    with pytest.raises(MgpuError, match=r"--connect: .*cluster-none\.json does not exist"):
        sm.start_session(connect=str(missing), cpu=True)
    foreign = tmp_path / "cluster-foreign.json"
    foreign.write_text("{}")
    os.chown(foreign, 65534, 65534)
    with pytest.raises(MgpuError, match=r"belongs to another user \(uid 65534\)"):
        sm.start_session(connect=str(foreign), cpu=True)
    open_to_all = tmp_path / "cluster-open.json"
    open_to_all.write_text("{}")
    open_to_all.chmod(0o666)
    with pytest.raises(MgpuError, match=r"can be changed by other users \(mode 666\)"):
        sm.start_session(connect=str(open_to_all), cpu=True)
    mine = tmp_path / "cluster-bad.json"
    mine.write_text("not json")
    mine.chmod(0o600)
    with pytest.raises(MgpuError, match=r"is not an ipyparallel cluster file"):
        sm.start_session(connect=str(mine), cpu=True)


def test_every_view_names_the_ranks_hosts(local2):
    from jupyter_mgpu.widgets.metrics_plot import _figure

    host = socket.gethostname()
    r = mg.collective("all_reduce", lambda rank: torch.ones(4) * (rank + 1))
    svg = r.svg()
    assert f">{host}:cpu:0<" in svg and f">{host}:cpu:1<" in svg
    a = mg.randn(64, 32, placement=mg.Shard(0), seed=1, session=local2)
    with mg.trace(session=local2) as t:
        a.redistribute(mg.Shard(1))
    assert t.data()["rank_names"] == [f"{host}:cpu:0", f"{host}:cpu:1"]
    assert [tr.name for tr in _figure("loss", 2).data][:2] == [f"rank 0 · {host}:cpu:0", f"rank 1 · {host}:cpu:1"]


def _group_and_ddp():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from jupyter_mgpu.engine import state as rank_state

    rank = rank_state.get().rank
    group = dist.new_group([0, 1])  # a group made after the rendezvous closed: over the store's open connections
    x = torch.ones(2) * (rank + 1)
    dist.all_reduce(x, group=group)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    model(torch.ones(8, 4) * (rank + 1)).sum().backward()
    return x.tolist(), [round(float(p.grad.sum()), 4) for p in model.parameters()]


def test_later_groups_and_ddp_training_use_the_closed_store(local2):
    (x0, g0), (x1, g1) = local2.run(_group_and_ddp)
    assert x0 == x1 == [3.0, 3.0]
    assert g0 == g1  # DDP averaged the gradients over both ranks


def test_killing_the_kernel_ends_every_process_of_its_cluster():
    from ipc_kernel import ipc_kernel_manager

    km = ipc_kernel_manager()
    km.start_kernel(env={**os.environ, "JUPYTER_MGPU_FORCE_CPU": "1"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        out = []
        reply = kc.execute_interactive(
            "%load_ext jupyter_mgpu\n%mgpu_init 2 --launcher local --mem-per-device 256MiB --no-dashboard\n"
            "import psutil; print('PIDS', [p.pid for p in psutil.Process().children(recursive=True)])",
            timeout=180,
            output_hook=lambda m: out.append(m["content"].get("text", "")),
        )
        assert reply["content"]["status"] == "ok", "".join(out)
        line = next(ln for ln in "".join(out).splitlines() if ln.startswith("PIDS"))
        pids = eval(line[5:])
        assert len(pids) >= 5  # controller, relay, 2 engines and their nannies, the spare supervisor
        kernel = km.provisioner.process.pid
        os.kill(kernel, signal.SIGKILL)
        assert _gone(pids, timeout=10) == []
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=True)
