"""A blocking ``%%mgpu`` cell takes the direct channel (one hop, flat in the ranks) and its output still
streams as it comes: prints, logging handlers made before the cell, warnings and ``display()`` — and the
ipyparallel path gives the same (``session/streamed_call.py``, ``engine/execution/streamed_output.py``)."""

from __future__ import annotations

import time

import pytest

from jupyter_mgpu.session import output_relay

pytestmark = pytest.mark.cluster


@pytest.fixture
def written(monkeypatch):
    seen: list[tuple[float, int, str, str]] = []
    monkeypatch.setattr(
        output_relay.OutputRelay,
        "_write",
        lambda self, rank, name, text: seen.append((time.monotonic(), rank, name, text)),
    )
    shown: list[tuple[int | None, dict]] = []
    monkeypatch.setattr(output_relay.OutputRelay, "_display", lambda self, out, rank=None: shown.append((rank, out)))
    return seen, shown


@pytest.mark.slow
def test_a_cell_streams_over_the_direct_channel_before_it_ends(s2, written):
    seen, _ = written
    calls_before = s2.cluster.client.history[:]
    s2.run_cell("print('early', rank)\nimport time\ntime.sleep(1.5)\nprint('late', rank)")
    ended = time.monotonic()
    assert s2.cluster.client.history == calls_before  # nothing went through ipyparallel's queues
    early = [t for t, _, _, text in seen if "early" in text]
    late = [t for t, _, _, text in seen if "late" in text]
    assert len(early) == 2 and len(late) == 2, seen
    assert ended - max(early) > 0.8  # shown while the cell still ran


@pytest.mark.parametrize("channel", ["direct", "ipyparallel"])
def test_both_paths_show_prints_logging_warnings_and_displays(s2, written, channel):
    seen, shown = written
    s2.run_cell(
        "import logging, sys\n_h = logging.StreamHandler(sys.stderr)\nlogging.getLogger('mgpu-test').addHandler(_h)"
    )  # a handler made in an earlier cell holds the engine's stream object
    s2.cell_channel = channel
    try:
        s2.run_cell(
            "import warnings\nfrom IPython.display import display\n"
            "print('out', rank)\nlogging.getLogger('mgpu-test').warning('logged %d', rank)\n"
            f"warnings.warn(f'careful {{rank}} {channel}')\n"
            "display({'text/plain': f'shown {rank}'}, raw=True)"
        )
    finally:
        s2.cell_channel = "direct"
        s2.run_cell("logging.getLogger('mgpu-test').removeHandler(_h)")
    text: dict[tuple[int, str], str] = {}
    for _, rank, name, t in seen:
        text[(rank, name)] = text.get((rank, name), "") + t
    for rank in (0, 1):
        assert f"out {rank}" in text[(rank, "stdout")]
        assert f"logged {rank}" in text[(rank, "stderr")] and f"careful {rank} {channel}" in text[(rank, "stderr")]
    assert sorted((r, out["data"]["text/plain"]) for r, out in shown) == [(0, "shown 0"), (1, "shown 1")]


def test_an_interrupted_direct_cell_leaves_the_session_usable(s2):
    import signal
    import threading

    timer = threading.Timer(0.8, lambda: __import__("os").kill(__import__("os").getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        s2.run_cell("import time\nfor i in range(100):\n    print(i)\n    time.sleep(0.05)")
    assert s2.run_cell("z = torch.ones(1); dist.all_reduce(z); z.item()", stream=False) == ["2.0", "2.0"]


def test_a_cell_s_comm_parent_is_set_once_and_again_after_a_request_of_ipyparallel_s(s2):
    # widgets from a direct cell reach the notebook through this parent; setting it is a quarter of an
    # empty cell's time on a busy rank, so it is set only when something else took its place
    parent = "get_ipython().kernel.get_parent('shell')"
    s2.run_cell(f"from IPython import get_ipython\n_mgpu_p1 = {parent}")
    assert s2.run_cell(f"{parent} is _mgpu_p1") == ["True", "True"]
    assert s2.run_cell("_mgpu_p1['header']['msg_id']")[0].startswith("'mgpu-direct-")
    s2.cluster.client[:].apply_sync(int)  # ipyparallel's own request: the kernel's parent is now that one
    after = s2.run_cell(
        f"_mgpu_p3 = {parent}\n(_mgpu_p3 is not _mgpu_p1, _mgpu_p3['header']['msg_id'] == _mgpu_p1['header']['msg_id'])"
    )
    assert after == ["(True, True)", "(True, True)"]
    s2.run_cell("del _mgpu_p1, _mgpu_p3")
