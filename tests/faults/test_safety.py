"""Safety on a shared node: private files, loopback only, no fixed ports, other users kept out,
message signing on, and a controller that never initialises CUDA."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import psutil
import pytest
from processes import cluster_pids

pytestmark = pytest.mark.cluster


def test_runtime_dir_is_private_and_owned(s2):
    path = s2.cluster.path
    st = path.stat()
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for f in path.rglob("*"):
        if f.is_file() and f.name.endswith(".json"):
            assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f"{f} is readable by others"


def test_everything_listens_on_loopback_only(s2):
    pids = set(cluster_pids(s2)) | {os.getpid()}
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening, "expected the controller and engines to listen somewhere"
    assert {c.laddr.ip for c in listening} <= {"127.0.0.1", "::1"}, listening


def test_ipyparallel_message_signing_stays_on(s2):
    conn = json.loads((s2.cluster.path / "profile/security/ipcontroller-client.json").read_text())
    assert conn["signature_scheme"] == "hmac-sha256" and len(conn["key"]) >= 16


@pytest.mark.slow
def test_two_clusters_side_by_side_use_different_ports(s2, own_session):
    def ports(s):
        pids = set(cluster_pids(s))
        return {
            c.laddr.port
            for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.pid in pids
        }

    with own_session(2) as other:
        assert ports(s2).isdisjoint(ports(other))
        assert other.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()") == ["2.0", "2.0"]
        assert s2.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()") == ["2.0", "2.0"]
        assert other.cluster.path != s2.cluster.path


OTHER_USER = "mgpu-other"


@pytest.fixture(scope="module")
def other_user():
    """A second Unix user, created for the test (needs root, as on CI and the dev machines)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.fail("this test needs root and useradd to create a second Unix user")
    subprocess.run(
        ["useradd", "--no-create-home", "--home-dir", "/tmp/mgpu-other-home", OTHER_USER], capture_output=True
    )
    os.makedirs("/tmp/mgpu-other-home", exist_ok=True)
    shutil.chown("/tmp/mgpu-other-home", OTHER_USER, OTHER_USER)
    yield OTHER_USER
    subprocess.run(["userdel", OTHER_USER], capture_output=True)
    shutil.rmtree("/tmp/mgpu-other-home", ignore_errors=True)


def _python_for_other_users() -> str:
    """An interpreter of this Python version that another user may execute.

    This venv's interpreter may live under /root (mode 0700); the system's python3.X of the same minor
    version runs our site-packages just as well.
    """
    candidates = [
        sys.executable,
        f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}",
        "/usr/bin/python3",
    ]
    for exe in candidates:
        real = os.path.realpath(exe)
        parts = [os.path.dirname(real)]
        while parts[-1] != "/":
            parts.append(os.path.dirname(parts[-1]))
        if all(os.stat(p).st_mode & 0o001 for p in parts) and os.stat(real).st_mode & 0o001:
            version = subprocess.run(
                [real, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
            ).stdout.strip()
            if version == str(tuple(sys.version_info[:2])):
                return real
    pytest.fail("no Python interpreter of this version is executable by another user")


def _as_user(user: str, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    import site

    paths = [
        os.path.dirname(os.path.dirname(os.path.abspath(__import__("jupyter_mgpu").__file__))),
        *site.getsitepackages(),
    ]
    env = {
        "HOME": "/tmp/mgpu-other-home",
        "PATH": os.environ["PATH"],
        "JUPYTER_MGPU_FORCE_CPU": "1",
        "PYTHONPATH": os.pathsep.join(paths),
    }
    return subprocess.run(
        ["runuser", "-u", user, "--", _python_for_other_users(), "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd="/tmp",
    )


@pytest.mark.slow
def test_another_user_cannot_see_or_reach_my_cluster_and_runs_their_own(s2, other_user):
    mine = s2.cluster.path
    result = _as_user(
        other_user,
        f"""
        import os, json
        from pathlib import Path
        try:
            os.listdir({str(mine)!r}); print("LISTED")
        except PermissionError:
            print("DENIED")
        try:
            open({str(mine / "cluster.json")!r}).read(); print("READ")
        except PermissionError:
            print("DENIED-READ")
        import socket
        try:
            socket.socket(socket.AF_UNIX).connect({str(mine / "direct.0.sock")!r}); print("CONNECTED")
        except PermissionError:
            print("DENIED-SOCKET")
        os.environ["JUPYTER_MGPU_RUNTIME_DIR"] = {str(mine.parent)!r}
        from jupyter_mgpu import rundir
        try:
            print("SEES", [p.name for p in rundir.cluster_dirs()])
        except PermissionError:
            print("SEES NOTHING (permission denied)")
        del os.environ["JUPYTER_MGPU_RUNTIME_DIR"]
        import jupyter_mgpu as mg
        s = mg.init(2, cpu=True, timeout=10)
        print("OWN", s.run_cell("x = torch.ones(1); dist.all_reduce(x); x.item()"), s.cluster.path)
        s.shutdown()
    """,
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert "DENIED" in out and "LISTED" not in out and "DENIED-READ" in out
    assert "DENIED-SOCKET" in out and "CONNECTED" not in out  # the direct channel is as private
    assert (mine / "direct.0.sock").is_socket()
    assert s2.cluster.cluster_id not in out.split("SEES", 1)[1].split("\n", 1)[0]
    assert "OWN ['2.0', '2.0'] /tmp/mgpu-other-home" in out
    assert s2.run_cell("rank") == ["0", "1"]


CUDA_GUARD = """
import torch

def _boom(*a, **k):
    raise AssertionError("the controller touched CUDA")

for name in ("_lazy_init", "init", "device_count", "is_available", "current_device", "set_device",
             "get_device_properties", "mem_get_info", "memory_allocated", "synchronize"):
    setattr(torch.cuda, name, _boom)

import jupyter_mgpu as mg
s = mg.init(2, timeout=10)
assert s.run_cell("x = torch.ones(3); dist.all_reduce(x); x.sum().item()") == ["6.0", "6.0"]
{extra}
s.shutdown()
assert not torch.cuda.is_initialized()
print("CUDA-UNTOUCHED")
"""


@pytest.mark.slow
def test_controller_never_initialises_cuda():
    extra = ""
    try:
        import jupyter_mgpu as mg

        if hasattr(mg, "matmul") and hasattr(mg, "randn"):
            extra = (
                "A = mg.randn(64, 32, placement=mg.Shard(0), seed=0)\n"
                "B = mg.randn(32, 48, placement=mg.Shard(1), seed=1)\n"
                "C = mg.matmul(A, B)\nc = C.gather()\nassert tuple(c.shape) == (64, 48)\n"
            )
    except Exception:
        pass
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_MGPU_FORCE_CPU"}
    out = subprocess.run(
        [sys.executable, "-c", CUDA_GUARD.format(extra=extra)], capture_output=True, text=True, timeout=180, env=env
    )
    assert "CUDA-UNTOUCHED" in out.stdout, out.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("n", ["2", "1"])  # 1: what a one-GPU machine runs by default
def test_selftest_passes_on_cpu_virtual_devices(n):
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_mgpu.selftest", "--cpu", "-n", n], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert "all checks passed" in out.stdout
    for check in (
        "all_reduce",
        "per-device memory stats",
        "sharded matmul vs torch.mm",
        "%%mgpu cell: all_reduce",
        "mg.matmul vs torch.mm",
        "memory dashboard follows",
        "shutdown, no orphans",
    ):
        assert any(line.startswith(check) and "PASS" in line for line in out.stdout.splitlines()), out.stdout
