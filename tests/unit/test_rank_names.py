"""What a view writes next to "rank r" (``widgets/rank_names.py``): ``rank r`` on one host, the rank's
``host:kind:index`` when the current session spans hosts, and no names without such a session."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jupyter_mgpu.devices import DeviceInfo
from jupyter_mgpu.session import lifecycle
from jupyter_mgpu.widgets.rank_names import rank_names, rank_title


def _session(devices: list[DeviceInfo], alive: bool = True) -> SimpleNamespace:
    """What ``rank_names`` reads of the current session (no engines behind it)."""
    return SimpleNamespace(alive=alive, world_size=len(devices), devices=devices)


ACROSS_HOSTS = [DeviceInfo("cuda", i % 2, "GPU", 1 << 30, host=f"node{i // 2}") for i in range(4)]
ONE_HOST = [DeviceInfo("cpu", i, "CPU", 1 << 30) for i in range(4)]


def test_rank_title_on_one_host_and_across_hosts():
    assert rank_title(2, None) == "rank 2"
    assert rank_title(2, []) == "rank 2"
    names = [d.label for d in ACROSS_HOSTS]
    assert rank_title(2, names) == "rank 2 · node1:cuda:0"
    assert [rank_title(r, names) for r in range(4)] == [f"rank {r} · {names[r]}" for r in range(4)]


def test_no_names_without_a_session(monkeypatch):
    monkeypatch.setattr(lifecycle, "_current", None)  # a shared session of an earlier tier is not current here
    assert rank_names(4) is None


def test_names_of_a_session_across_hosts_are_its_device_labels(monkeypatch):
    monkeypatch.setattr(lifecycle, "_current", _session(ACROSS_HOSTS))
    assert rank_names(4) == ["node0:cuda:0", "node0:cuda:1", "node1:cuda:0", "node1:cuda:1"]


@pytest.mark.parametrize(
    ("devices", "n", "alive"),
    [
        (ONE_HOST, 4, True),  # one host: the views say "rank 2" alone
        (ACROSS_HOSTS, 3, True),  # a view of another number of ranks than the session's
        (ACROSS_HOSTS, 4, False),  # a session that has ended is no current session
    ],
)
def test_no_names_for_one_host_another_size_or_an_ended_session(monkeypatch, devices, n, alive):
    monkeypatch.setattr(lifecycle, "_current", _session(devices, alive))
    assert rank_names(n) is None
