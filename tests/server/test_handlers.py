"""The REST handlers through a real Jupyter server (pytest-jupyter): auth, base_url, 404s, stopping."""

from __future__ import annotations

import json

import pytest
from server_fakes import running
from tornado.httpclient import HTTPClientError

NO_AUTH = {"Authorization": ""}


async def test_clusters_and_devices_need_auth(jp_fetch, fake_clusters):
    fake_clusters.make("222-bbbb0001")
    for path in (("mgpu", "api", "clusters"), ("mgpu", "api", "devices"), ("mgpu", "api", "clusters", "222-bbbb0001")):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(*path, headers=NO_AUTH)
        assert err.value.code == 403


async def test_stop_without_auth_is_refused_and_stops_nothing(jp_fetch, fake_clusters):
    path = fake_clusters.make("222-bbbb0002")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("mgpu", "api", "clusters", "222-bbbb0002", method="DELETE", headers=NO_AUTH)
    assert err.value.code == 403
    assert all(running(p) for p in fake_clusters.pids(path))


async def test_clusters_payload(jp_fetch, fake_clusters):
    fake_clusters.make("222-bbbb0003", world_size=2)
    r = await jp_fetch("mgpu", "api", "clusters")
    body = json.loads(r.body)
    assert [c["cluster_id"] for c in body["clusters"]] == ["222-bbbb0003"]
    assert [rk["rank"] for rk in body["clusters"][0]["ranks"]] == [0, 1]
    one = json.loads((await jp_fetch("mgpu", "api", "clusters", "222-bbbb0003")).body)
    assert one["cluster_id"] == "222-bbbb0003" and one["world_size"] == 2


async def test_devices_payload_degrades_to_cpu_devices(jp_fetch, fake_clusters):
    fake_clusters.make("222-bbbb0004", world_size=2)
    body = json.loads((await jp_fetch("mgpu", "api", "devices")).body)
    assert body["source"] == "clusters"
    assert [d["id"] for d in body["devices"]] == ["222-bbbb0004/cpu:0", "222-bbbb0004/cpu:1"]


async def test_handlers_live_under_base_url_only(jp_fetch, jp_base_url, http_server_client, jp_auth_header, mgpu_root):
    assert jp_base_url != "/"
    r = await jp_fetch("mgpu", "api", "clusters")  # jp_fetch prefixes the base_url
    assert r.code == 200 and r.effective_url.split("?")[0].endswith(f"{jp_base_url}mgpu/api/clusters")
    with pytest.raises(HTTPClientError) as err:
        await http_server_client.fetch("/mgpu/api/clusters", headers=jp_auth_header)
    assert err.value.code == 404


@pytest.mark.parametrize("cluster_id", ["333-cccc0000", "not-ours", "..", "a%2Fb"])
async def test_stop_unknown_cluster_is_404_with_message(jp_fetch, fake_clusters, cluster_id):
    path = fake_clusters.make("222-bbbb0005")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("mgpu", "api", "clusters", cluster_id, method="DELETE")
    assert err.value.code == 404
    message = json.loads(err.value.response.body)["message"]
    assert "cluster" in message
    assert all(running(p) for p in fake_clusters.pids(path))


async def test_stop_another_users_cluster_is_404(jp_fetch, fake_clusters, monkeypatch):
    import os

    path = fake_clusters.make("222-bbbb0006")
    monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 4242)
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("mgpu", "api", "clusters", "222-bbbb0006", method="DELETE")
    assert err.value.code == 404
    assert "no running jupyter_mgpu cluster of this user" in json.loads(err.value.response.body)["message"]
    assert all(running(p) for p in fake_clusters.pids(path))


async def test_stop_ends_the_cluster(jp_fetch, fake_clusters):
    path = fake_clusters.make("222-bbbb0007", world_size=2)
    pids = fake_clusters.pids(path)
    r = await jp_fetch("mgpu", "api", "clusters", "222-bbbb0007", method="DELETE")
    body = json.loads(r.body)
    assert set(body["signalled"]) == set(pids[:2])
    assert body["remaining"] == []
    assert not any(running(p) for p in pids[:2])


async def test_no_gpu_means_no_warnings_or_errors_in_the_log(jp_fetch, fake_clusters, caplog):
    import logging

    fake_clusters.make("222-bbbb0008")
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        await jp_fetch("mgpu", "api", "devices")
        await jp_fetch("mgpu", "api", "clusters")
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert bad == []


async def test_the_last_profile_is_served_when_there_is_one(jp_fetch, fake_clusters):
    from jupyter_mgpu import rundir as rd

    path = fake_clusters.make("222-bbbb0009", world_size=2)
    clusters = json.loads((await jp_fetch("mgpu", "api", "clusters")).body)["clusters"]
    assert clusters[0]["profile_time"] is None
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("mgpu", "api", "clusters", "222-bbbb0009", "profile")
    assert err.value.code == 404
    data = {"profiled_at": 1.0, "window_ms": 10.0, "ranks": [], "summary": []}
    rd.write_json(path / rd.PROFILE_FILE, data)  # what mg.profile() leaves when it ends
    clusters = json.loads((await jp_fetch("mgpu", "api", "clusters")).body)["clusters"]
    assert clusters[0]["profile_time"] == pytest.approx((path / rd.PROFILE_FILE).stat().st_mtime)
    assert json.loads((await jp_fetch("mgpu", "api", "clusters", "222-bbbb0009", "profile")).body) == data
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("mgpu", "api", "clusters", "222-bbbb0009", "profile", headers=NO_AUTH)
    assert err.value.code == 403


async def test_the_where_route_needs_auth_names_a_missing_cluster_and_says_who_did_not_answer(jp_fetch, fake_clusters):
    fake_clusters.make("222-bbbb0009", world_size=2)  # no engine behind it: no guard answers
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("mgpu", "api", "clusters", "222-bbbb0009", "where", headers=NO_AUTH)
    assert err.value.code == 403
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("mgpu", "api", "clusters", "222-bbbb0404", "where")
    assert err.value.code == 404
    body = json.loads((await jp_fetch("mgpu", "api", "clusters", "222-bbbb0009", "where")).body)
    assert body["ranks"] == "ranks 0, 1" and body["lines"] == [[0, "unknown", "ranks 0, 1"]], body
