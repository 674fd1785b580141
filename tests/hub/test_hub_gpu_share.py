"""A user of a shared GPU node behind the hub: ``c``, whose spawner environment gives c's server GPU 1 of two
(``CUDA_VISIBLE_DEVICES=1``, as docs/jupyterhub.md shows admins), seen through a fake NVML (no GPU here).

The GPU's processes are real: a's JupyterLab server (another user), c's own server, and a pid that no
longer exists. c's devices (REST and stream, through the proxy) must split the memory into c's and
other users' and name nobody; c's sidebar, in Chromium, shows other users' part of the bar and figure.
c never starts a cluster, so c is also the hub user with no runtime directory yet.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import requests
from whole_words import names

from . import fake_gpus
from .browser_run import ARTIFACTS, browser_config, run_script
from .jupyter_ws import read_stream

pytestmark = [pytest.mark.hub, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).with_name("hub_gpu_view.mjs")

GiB = 1 << 30


def get(hub, user, path: str) -> requests.Response:
    return requests.get(
        hub.user_url(user) + path, headers={"Authorization": f"token {user.token}"}, timeout=30, allow_redirects=False
    )


def _gone_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


@pytest.fixture(scope="module")
def shared_gpu(hub, servers):
    """GPU 1 (c's) holds 20 GiB for a's server, 1 GiB for c's and 3 GiB for a vanished pid; GPU 0 is a's."""
    a_pid, c_pid, gone = servers["a"], servers["c"], _gone_pid()
    fake_gpus.write(
        hub.fake_gpus,
        [
            {
                "name": "Fake H100 #0",
                "uuid": "GPU-0000",
                "total": 80 * GiB,
                "used": 41 * GiB,
                "util": 90,
                "processes": [{"pid": a_pid, "used": 40 * GiB}],
            },
            {
                "name": "Fake H100 #1",
                "uuid": "GPU-1111",
                "total": 80 * GiB,
                "used": 26 * GiB,
                "util": 35,
                "processes": [
                    {"pid": a_pid, "used": 20 * GiB},
                    {"pid": c_pid, "used": 1 * GiB},
                    {"pid": gone, "used": 3 * GiB},
                ],
            },
        ],
    )
    yield {"hidden": [str(a_pid), str(gone), hub.users["a"].name]}
    fake_gpus.write(hub.fake_gpus, [])


def test_a_user_with_no_runtime_directory_yet_gets_empty_answers(hub, servers):
    c = hub.users["c"]
    assert not c.mgpu_dir.exists()  # nothing has asked for c's clusters yet
    clusters = get(hub, c, "mgpu/api/clusters")
    assert clusters.status_code == 200 and clusters.headers["Content-Type"].startswith("application/json")
    assert clusters.json()["clusters"] == []
    devices = get(hub, c, "mgpu/api/devices")
    assert devices.status_code == 200 and devices.headers["Content-Type"].startswith("application/json")
    stream = read_stream(hub.user_url(c), c.token, frames=1)
    assert stream.status == 101 and stream.frames[0]["type"] == "snapshot" and stream.frames[0]["clusters"] == []
    missing = get(hub, c, "mgpu/api/clusters/123-abcdef01")
    assert missing.status_code == 404 and "no running jupyter_mgpu cluster" in missing.json()["message"]
    if c.mgpu_dir.exists():  # made on first use: private and c's
        st = c.mgpu_dir.stat()
        assert st.st_uid == c.uid and stat.S_IMODE(st.st_mode) == 0o700


def test_other_users_gpu_memory_is_a_number_withoutnames(hub, shared_gpu):
    c = hub.users["c"]
    r = get(hub, c, "mgpu/api/devices")
    payload = r.json()
    assert payload["source"] == "nvml"
    [gpu] = payload["devices"]  # only the GPU the hub gave c, numbered as CUDA numbers it for c
    assert (gpu["id"], gpu["name"], gpu["used_bytes"], gpu["total_bytes"]) == (
        "cuda:0",
        "Fake H100 #1",
        26 * GiB,
        80 * GiB,
    )
    assert (gpu["own_bytes"], gpu["other_users_bytes"]) == _split(hub)
    frame = read_stream(hub.user_url(c), c.token, frames=1).frames[0]
    assert frame["devices"]["devices"] == [{**gpu, "utilization": frame["devices"]["devices"][0]["utilization"]}]
    for secret in shared_gpu["hidden"]:
        assert not names(r.text, secret) and not names(json.dumps(frame), secret)


def _split(hub) -> tuple[int, int]:
    """(c's, other users') bytes on c's GPU: a's server runs as another uid, the vanished pid is nobody's;
    without system users (SimpleLocalProcessSpawner) a's server has c's uid too."""
    return (1 * GiB, 23 * GiB) if hub.system_users else (21 * GiB, 3 * GiB)


def test_sidebar_shows_other_users_part_of_the_gpu(hub, shared_gpu, tmp_path_factory):
    other = _split(hub)[1]
    for shot in ARTIFACTS.glob("c_*.png"):
        shot.unlink()
    scratch = tmp_path_factory.mktemp("hub-gpu")
    steps = run_script(SCRIPT, browser_config(hub, ["c"], scratch), scratch, hub.log_tail, timeout=300)
    s = steps["c:devices"]
    assert "'1'" in s["kernelSees"]  # c's kernel has the spawner's CUDA_VISIBLE_DEVICES
    [row] = s["devices"]
    assert row["label"] == "cuda:0 Fake H100 #1"
    assert row["figures"] == "26.0 GiB / 80.0 GiB" and row["otherUsers"] == f"other users {other / GiB:.1f} GiB"
    assert row["otherUsersBytes"] == str(other)
    # the bar: everything but other users' memory, then theirs (hatched), as shares of the 80 GiB
    assert float(row["fill"].rstrip("%")) == pytest.approx(100 * (26 * GiB - other) / (80 * GiB), abs=0.06)
    assert float(row["otherPart"].rstrip("%")) == pytest.approx(100 * other / (80 * GiB), abs=0.06)
    assert abs(row["otherPartPx"] - other / (80 * GiB) * row["barPx"]) <= 2
    assert s["status"].startswith("mgpu 1× cuda · 26.0 GiB / 80.0 GiB")
    for secret in shared_gpu["hidden"]:
        assert not names(s["panelText"], secret)
    lay = s["layout"]
    assert lay["overflowing"] == [] and lay["panel"]["x"] + lay["panel"]["w"] <= lay["viewport"]["w"]
    assert steps["done"]["consoleErrors"] == []
