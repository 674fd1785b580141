"""The Multi-GPU sidebar and status bar behind a real JupyterHub, in Debian's Chromium (playwright-core).

Users ``a`` and ``b`` log in on the hub's login page, open ``hub.ipynb`` in JupyterLab under
``/user/<name>/`` and run ``%mgpu_init 2`` and a 128 MiB allocation; each sidebar must show that user's
cluster, arrive and grow live over the websocket through the proxy, and show nothing of the other
user's. ``a`` then stops the cluster from the sidebar, ``b`` logs out (the hub stops b's server), and
every process of both clusters must be gone. Any console error fails. Screenshots go to
``test-artifacts/hub/``.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import requests
from processes import wait_gone

from .browser_run import ARTIFACTS, browser_config, run_script

SCRIPT = Path(__file__).with_name("hub_lab.mjs")

pytestmark = [pytest.mark.hub, pytest.mark.browser, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def story(hub, servers, tmp_path_factory):
    """Run the two users' browser session once; its steps by name, plus what the test saw while both ran."""
    for shot in ARTIFACTS.glob("[ab]_*.png"):
        shot.unlink()
    scratch = tmp_path_factory.mktemp("hub-browser")
    cfg = browser_config(hub, ["a", "b"], scratch)
    seen: dict = {}
    observed: dict = {}

    def on_step(step: dict, proc) -> None:
        seen[step["step"]] = step
        if step["step"] == "checkpoint":  # both clusters run: look, then let the script stop them
            observed.update(_while_both_run(hub, seen))
            proc.stdin.write("go\n")
            proc.stdin.close()

    steps = run_script(SCRIPT, cfg, scratch, hub.log_tail, on_step=on_step)
    steps["observed"] = observed
    return steps


def _while_both_run(hub, seen: dict) -> dict:
    """With both users' clusters running: each user's REST view, and who runs each engine of the sidebar."""
    out = {}
    for key in ("a", "b"):
        user = hub.users[key]
        api = requests.get(
            hub.user_url(user) + "mgpu/api/clusters", timeout=30, headers={"Authorization": f"token {user.token}"}
        ).json()["clusters"]
        uids = {}
        for cluster in seen[f"{key}:both"]["sidebar"]["clusters"]:
            for rank in cluster["ranks"]:
                try:
                    uids[rank["pid"]] = psutil.Process(rank["pid"]).uids().real
                except psutil.NoSuchProcess:
                    uids[rank["pid"]] = None
        out[key] = {"api": [c["cluster_id"] for c in api], "uids": uids}
    return out


def _running(step) -> list[dict]:
    return [c for c in step["clusters"] if c["status"] == "running"]


@pytest.mark.parametrize("key", ["a", "b"])
def test_login_on_the_hub_page_opens_lab_under_the_users_url_with_a_live_sidebar(story, hub, key):
    s = story[f"{key}:login"]
    assert "JupyterHub" in s["loginTitle"]
    assert f"/user/{hub.users[key].name}/lab/tree/hub.ipynb" in s["url"]
    assert s["plugin"] is True
    assert s["sidebar"]["live"].startswith("live")  # the stream is open through the proxy
    assert s["sidebar"]["clusters"] == []  # a's stale cluster from before the logout is not shown either
    assert s["sidebar"]["status"].startswith("mgpu")


@pytest.mark.parametrize("key", ["a", "b"])
def test_mgpu_init_appears_in_sidebar_and_status_bar_and_runs_as_the_user(story, hub, key):
    s = story[f"{key}:started"]
    assert "2 engines ready" in s["initOutput"]
    [cluster] = _running(s["started"])
    assert cluster["worldSize"] == 2 and [r["rank"] for r in cluster["ranks"]] == [0, 1]
    assert s["started"]["status"].startswith("mgpu 2× cpu · ") and s["started"]["status"].endswith("iB")
    user, seen = hub.users[key], story["observed"][key]
    assert seen["api"] == [cluster["id"]]  # the sidebar shows what the user's REST API lists
    pids = [r["pid"] for r in cluster["ranks"]]
    assert sorted(seen["uids"]) == sorted(pids)
    if hub.system_users:  # the engines run as the user who started them
        assert set(seen["uids"].values()) == {user.uid}, seen


@pytest.mark.parametrize("key", ["a", "b"])
def test_live_updates_arrive_through_the_proxy(story, key):
    s = story[f"{key}:started"]
    assert s["grew"] is True, (s["before"], s["allocated"])
    after = [r["used"] for r in _running(s["allocated"])[0]["ranks"]]
    assert all(x - b > 100 * 2**20 for x, b in zip(after, s["before"]))


def test_each_user_sees_only_their_own_cluster(story):
    a_id = _running(story["a:started"]["started"])[0]["id"]
    b_id = _running(story["b:started"]["started"])[0]["id"]
    assert a_id != b_id
    assert [c["id"] for c in story["a:both"]["sidebar"]["clusters"]] == [a_id]
    assert [c["id"] for c in story["b:both"]["sidebar"]["clusters"]] == [b_id]


@pytest.mark.parametrize("key", ["a", "b"])
def test_sidebar_and_status_bar_fit_the_window(story, key):
    lay = story[f"{key}:started"]["layout"]
    vw, vh = lay["viewport"]["w"], lay["viewport"]["h"]
    panel, status = lay["panel"], lay["status"]
    assert panel["w"] >= 200 and panel["x"] >= 0 and panel["x"] + panel["w"] <= vw and panel["h"] > 200
    assert status["w"] > 0 and status["y"] + status["h"] <= vh and status["x"] + status["w"] <= vw
    assert lay["cards"] and all(
        panel["x"] <= c["x"] and c["x"] + c["w"] <= panel["x"] + panel["w"] + 1 for c in lay["cards"]
    )
    assert lay["overflowing"] == []


def test_stop_from_the_sidebar_through_the_hub_ends_the_engines(story):
    s = story["a:stopped"]
    assert s["stopped"] is True and s["errorDialog"] is None
    pids = [r["pid"] for r in _running(story["a:started"]["started"])[0]["ranks"]]
    assert wait_gone(pids, timeout=15) == []
    assert s["id"] not in [c["id"] for c in _running(s["sidebar"])]


def test_logout_stops_the_server_and_every_process_of_the_user(story, hub):
    b = hub.users["b"]
    assert "/hub/" in story["b:logout"]["url"]
    pids = [r["pid"] for r in _running(story["b:started"]["started"])[0]["ranks"]]
    assert wait_gone(pids, timeout=30) == []
    if hub.system_users:
        left = [p.pid for p in hub.processes_of(b)]
        assert wait_gone(left, timeout=30) == [], left
    assert hub.server(b) is None


def test_no_console_errors(story):
    assert story["done"]["consoleErrors"] == {"a": [], "b": []}
