"""Two users on one real JupyterHub, everything through the hub's proxy: each sees and stops only their own
clusters, over REST and the websocket; one user's token cannot reach the other's server; clusters run as the
user who started them, in private runtime directories; bad input (no runtime directory yet, a stale cluster
of a user who logged out, an unauthenticated websocket) gets a plain answer, not an error page or a leak.
(A user with no runtime directory yet: test_hub_gpu_share.py, with ``c``, who never starts a cluster.)

User ``a`` starts one 2-rank cluster in a kernel (through the proxy's REST and kernel websocket); ``b`` has
none. The tests run in file order: the last one ends ``a``'s cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time

import psutil
import pytest
import requests
from processes import wait_gone

from .jupyter_ws import execute, read_stream, start_kernel, stop_kernel

pytestmark = [pytest.mark.hub, pytest.mark.timeout(600)]

CLUSTER_INFO = """
import json, jupyter_mgpu.session.lifecycle as s
path = s.current().cluster.path
st = json.load(open(path / "cluster.json"))  # the state file the server extension reads too
print(json.dumps({"id": st["cluster_id"], "path": str(path), "kernel": st["kernel_pid"],
                  "pids": [st["controller_pid"], st["supervisor_pid"],
                           *(st["engine_pids"][str(r)] for r in range(st["world_size"]))]}))
"""


def get(hub, owner, user, path: str, **kwargs) -> requests.Response:
    """GET ``path`` on ``owner``'s server through the proxy with ``user``'s token (None: no credentials)."""
    headers = {"Authorization": f"token {user.token}"} if user is not None else {}
    return requests.get(hub.user_url(owner) + path, headers=headers, timeout=30, allow_redirects=False, **kwargs)


def as_json(r: requests.Response):
    assert r.headers.get("Content-Type", "").startswith("application/json"), (r.status_code, r.text[:300])
    return r.json()


@pytest.fixture(scope="module", autouse=True)
def _servers_up(servers):
    """a's and b's servers run (the browser tests log b out)."""


@pytest.fixture(scope="module")
def a_cluster(hub):
    """A 2-rank cluster that user ``a`` started in a kernel of their own server."""
    a = hub.users["a"]
    url = hub.user_url(a)
    kernel = start_kernel(url, a.token)
    run = execute(url, a.token, kernel, "%load_ext jupyter_mgpu\n%mgpu_init 2", timeout=240)
    assert run.status == "ok" and "2 engines ready" in run.text, (run, hub.log_tail())
    run = execute(url, a.token, kernel, CLUSTER_INFO)
    assert run.status == "ok", run
    info = json.loads(run.text)
    yield info
    stop_kernel(url, a.token, kernel)
    wait_gone(info["pids"] + [info["kernel"]], timeout=20)


def test_each_server_runs_as_its_user_under_its_own_url_with_the_extension(hub):
    for user in hub.users.values():
        pid = hub.start_server(user)  # already running: returns its pid
        assert psutil.Process(pid).uids().real == user.uid
        status = get(hub, user, user, "api/status")
        assert status.status_code == 200 and as_json(status)["started"]
        page = get(hub, user, user, "lab")
        assert page.status_code == 200 and f'"baseUrl": "/user/{user.name}/"' in page.text
        assert "jupyter-mgpu" in page.text  # the labextension is in the page config


def a_clusters(hub) -> dict[str, dict]:
    """a's clusters by id, as a's server lists them (a may have others, e.g. stopped from the browser)."""
    a = hub.users["a"]
    return {c["cluster_id"]: c for c in as_json(get(hub, a, a, "mgpu/api/clusters"))["clusters"]}


def test_a_sees_its_cluster_over_rest_and_the_stream(hub, a_cluster):
    a = hub.users["a"]
    cluster = a_clusters(hub)[a_cluster["id"]]
    assert cluster["status"] == "running"
    assert cluster["world_size"] == 2 and all(r["alive"] for r in cluster["ranks"])
    assert [r["device"] for r in cluster["ranks"]] == ["cpu:0", "cpu:1"]  # their telemetry arrives
    assert [r["pid"] for r in cluster["ranks"]] == a_cluster["pids"][2:]
    one = as_json(get(hub, a, a, f"mgpu/api/clusters/{a_cluster['id']}"))
    assert one["cluster_id"] == a_cluster["id"]
    stream = read_stream(hub.user_url(a), a.token, frames=3)
    assert stream.status == 101 and len(stream.frames) == 3
    assert all(a_cluster["id"] in [c["cluster_id"] for c in f["clusters"]] for f in stream.frames)
    times = [f["time"] for f in stream.frames]
    assert times == sorted(times) and times[-1] > times[0]  # live frames, not one repeated
    # each rank once: a frame's devices are the host's GPUs, never the clusters' CPU devices (their ranks)
    assert all(d.get("kind") != "cpu" for d in stream.frames[-1]["devices"]["devices"])
    devices = as_json(get(hub, a, a, "mgpu/api/devices"))["devices"]
    assert a_cluster["id"] in {d.get("cluster_id") for d in devices}  # the REST route still lists them


def test_the_cluster_runs_as_a_in_a_private_directory_of_a(hub, a_cluster):
    a = hub.users["a"]
    if hub.system_users:
        for pid in [a_cluster["kernel"], *a_cluster["pids"]]:
            assert psutil.Process(pid).uids().real == a.uid, pid
    path = a_cluster["path"]
    assert os.path.dirname(path) == str(a.mgpu_dir)
    sock = os.path.join(path, "direct.0.sock")  # a deep home: longer than AF_UNIX holds, and it works
    assert len(os.fsencode(sock)) > 107 and stat.S_ISSOCK(os.stat(sock).st_mode)
    for d in (path, a.mgpu_dir):
        st = os.stat(d)
        assert st.st_uid == a.uid and stat.S_IMODE(st.st_mode) == 0o700, d


def test_b_sees_nothing_of_a(hub, a_cluster):
    b = hub.users["b"]
    clusters = get(hub, b, b, "mgpu/api/clusters")
    assert clusters.status_code == 200 and as_json(clusters)["clusters"] == []
    assert get(hub, b, b, f"mgpu/api/clusters/{a_cluster['id']}").status_code == 404
    devices = get(hub, b, b, "mgpu/api/devices")
    stream = read_stream(hub.user_url(b), b.token, frames=2)
    assert stream.status == 101 and all(f["clusters"] == [] for f in stream.frames)
    seen = devices.text + clusters.text + json.dumps(stream.frames)
    for secret in [a_cluster["id"], *map(str, a_cluster["pids"])]:
        assert secret not in seen


def test_b_cannot_stop_a_cluster(hub, a_cluster):
    a, b = hub.users["a"], hub.users["b"]
    path = f"mgpu/api/clusters/{a_cluster['id']}"
    own = requests.delete(hub.user_url(b) + path, headers={"Authorization": f"token {b.token}"}, timeout=30)
    assert own.status_code == 404 and "no running jupyter_mgpu cluster" in as_json(own)["message"]
    other = requests.delete(
        hub.user_url(a) + path, headers={"Authorization": f"token {b.token}"}, timeout=30, allow_redirects=False
    )
    assert other.status_code == 403
    time.sleep(1.0)  # a stop would have signalled by now
    assert all(psutil.pid_exists(p) for p in a_cluster["pids"])
    cluster = a_clusters(hub)[a_cluster["id"]]
    assert cluster["status"] == "running" and all(r["alive"] for r in cluster["ranks"])


def _listening_port(pid: int) -> int:
    ports = [c.laddr.port for c in psutil.Process(pid).net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert len(ports) == 1, ports
    return ports[0]


def test_b_token_cannot_reach_a_server(hub, a_cluster):
    a, b = hub.users["a"], hub.users["b"]
    for path in (
        "api/status",
        "api/kernels",
        "api/contents",
        "mgpu/api/clusters",
        "mgpu/api/devices",
        f"mgpu/api/clusters/{a_cluster['id']}",
    ):
        r = get(hub, a, b, path)
        assert r.status_code == 403, (path, r.status_code)
        assert a_cluster["id"] not in r.text
    stream = read_stream(hub.user_url(a), b.token)
    assert stream.status == 403 and stream.frames == []
    # nor bypassing the proxy, straight at a's server port
    direct = f"http://127.0.0.1:{_listening_port(hub.start_server(a))}/user/{a.name}/"
    r = requests.get(direct + "mgpu/api/clusters", headers={"Authorization": f"token {b.token}"}, timeout=30)
    assert r.status_code == 403 and a_cluster["id"] not in r.text
    # and b's token is no key to the hub's record of a
    assert requests.get(
        f"{hub.url}/hub/api/users/{a.name}", headers={"Authorization": f"token {b.token}"}, timeout=30
    ).status_code in (403, 404)


def test_b_cannot_list_or_read_a_files(hub, a_cluster):
    if not hub.system_users:
        pytest.skip("needs separate system users (root and useradd); this run uses SimpleLocalProcessSpawner")
    a, b = hub.users["a"], hub.users["b"]
    probe = f"""
import os, socket
for path in ({str(a.mgpu_dir)!r}, {a_cluster["path"]!r}, {str(a.home)!r}):
    try:
        os.listdir(path); print("LISTED", path)
    except PermissionError:
        print("DENIED")
for path in ({a_cluster["path"] + "/cluster.json"!r}, {a_cluster["path"] + "/profile/security/ipcontroller-client.json"!r}):
    try:
        open(path).read(); print("READ", path)
    except PermissionError:
        print("DENIED")
from jupyter_mgpu.engine.wire import unix_socket  # the path is longer than AF_UNIX holds: as the kernel reaches it
try:
    unix_socket.connect(socket.socket(socket.AF_UNIX), {a_cluster["path"] + "/direct.0.sock"!r}); print("CONNECTED")
except PermissionError:
    print("DENIED")
"""
    run = subprocess.run(
        [shutil.which("runuser") or "runuser", "-u", b.name, "--", str(hub.python.python), "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**hub.python.env, "HOME": str(b.home)},
        cwd="/",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["DENIED"] * 6, run.stdout


def _connections(pid: int) -> int:
    return len(psutil.Process(pid).net_connections("inet"))


def test_unauthenticated_websocket_through_the_proxy_gets_a_short_refusal_and_leaks_nothing(hub, a_cluster):
    a = hub.users["a"]
    server = hub.start_server(a)
    before = _connections(server)
    attempts = [{}, {"Authorization": "token not-a-token"}, {"Cookie": "jupyterhub-user-x=forged"}]
    for headers in attempts * 5:
        stream = read_stream(hub.user_url(a), headers=headers, timeout=20)
        assert stream.status == 403 and stream.frames == [], stream
        assert "<html" not in stream.body.lower() and a_cluster["id"] not in stream.body
        assert stream.content_type is None or stream.content_type.startswith("application/json"), stream
    rest = get(hub, a, None, "mgpu/api/clusters")
    assert rest.status_code == 403 and a_cluster["id"] not in rest.text
    deadline = time.monotonic() + 10
    while _connections(server) > before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _connections(server) <= before
    assert get(hub, a, a, "mgpu/api/clusters").status_code == 200  # the server is fine


def test_stale_cluster_of_a_user_who_logged_out_is_not_shown_and_nothing_is_left(hub, a_cluster):
    a, b = hub.users["a"], hub.users["b"]
    os.kill(a_cluster["kernel"], signal.SIGKILL)  # the kernel dies; its engines follow it
    assert wait_gone(a_cluster["pids"], timeout=20) == []
    hub.stop_server(a)  # what logging out does here (shutdown_on_logout)
    leftovers = [p.pid for p in hub.processes_of(a)]
    assert wait_gone(leftovers, timeout=20) == [], leftovers
    assert os.path.isdir(a_cluster["path"])  # the stale directory stays until a's next cluster starts
    hub.start_server(a)
    clusters = get(hub, a, a, "mgpu/api/clusters")
    assert clusters.status_code == 200 and as_json(clusters)["clusters"] == []
    assert get(hub, a, a, f"mgpu/api/clusters/{a_cluster['id']}").status_code == 404
    stream = read_stream(hub.user_url(a), a.token, frames=1)
    assert stream.status == 101 and stream.frames[0]["clusters"] == []
    gone = requests.delete(
        hub.user_url(a) + f"mgpu/api/clusters/{a_cluster['id']}",
        headers={"Authorization": f"token {a.token}"},
        timeout=30,
    )
    assert gone.status_code == 404
    assert as_json(get(hub, b, b, "mgpu/api/clusters"))["clusters"] == []
    # a logs in again and starts a cluster: the stale directory is removed, never reused
    url = hub.user_url(a)
    kernel, info = start_kernel(url, a.token), None
    try:
        run = execute(url, a.token, kernel, "%load_ext jupyter_mgpu\n%mgpu_init 2 --no-dashboard", timeout=240)
        assert run.status == "ok" and "2 engines ready" in run.text, run
        assert not os.path.exists(a_cluster["path"])
        info = json.loads(execute(url, a.token, kernel, CLUSTER_INFO).text)
        assert info["id"] != a_cluster["id"]
    finally:
        stop_kernel(url, a.token, kernel)
    assert wait_gone(info["pids"] + [info["kernel"]], timeout=20) == []
