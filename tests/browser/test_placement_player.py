"""Real-browser test of the placement view and the trace player in JupyterLab, and of the standalone page.

placement_player.mjs drives both in Debian's Chromium, on the shared ``lab`` (tests/lab_server.py); screenshots
go to test-artifacts/browser-placement/.
"""

from __future__ import annotations

import pytest
from lab_server import run_script, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

CELLS = [
    "import jupyter_mgpu as mg\ns = mg.init(2)\ns",
    "A = mg.randn(40, 30, placement=mg.Block2D(1, 2))\nmg.show(A)",
    "X = mg.randn(24, 24, placement=mg.Shard(0), seed=1)\nY = mg.randn(24, 24, placement=mg.Shard(0), seed=2)\n"
    "with mg.trace() as t:\n    C = mg.matmul(X, Y, 'ring')\nt.play()",
    "print('saved', t.save_html('ring.html'), len(t.events), 'events')",
    "mg.shutdown()",
]


def _big_trace_page(path):
    """A standalone page of a 2,400-event trace on 8 ranks (synthetic events, the real data path)."""
    from jupyter_mgpu.tracing import replay as tr
    from jupyter_mgpu.widgets.placement import save_html
    from jupyter_mgpu.widgets.placement_data import trace_data

    events, seq = [], [0] * 8
    for i in range(2400):
        r, step = i % 8, i // 8
        seq[r] += 1
        box = [[(step * 8) % 64, (step * 8) % 64 + 8], [r * 8, r * 8 + 8]]
        events.append(
            {
                "rank": r,
                "op": 0,
                "label": "synthetic",
                "step": step,
                "action": ("hold", "send", "recv", "compute", "free")[step % 5],
                "blocks": [{"tensor": "T", "box": box}],
                "bytes": 256,
                "time": step + r * 1e-3,
                "seq": seq[r],
                "peer": (r + 1) % 8,
            }
        )
    data = trace_data(tr.merge([events]), {"T": {"shape": [64, 64], "itemsize": 4, "label": "T"}}, 8)
    return save_html(data, path, "2400 events")


@pytest.fixture(scope="module")
def played(lab):
    root = lab["root"]
    write_notebook(root / "placement_check.ipynb", CELLS)
    return run_script(
        lab,
        "placement_player.mjs",
        "browser-placement",
        380,
        notebook="placement_check.ipynb",
        html=str(root / "ring.html"),
        big=_big_trace_page(lab["tmp"] / "big.html"),
    )


def test_placement_view_renders_each_rank_and_hover_text(played):
    v = played["view"]
    assert v["owners"] == ["0", "1"]
    assert v["tip"].startswith("rank 0: 0:40 × 0:15, local shape (40, 15)")
    assert v["mem"] == [40 * 15 * 4] * 2


def test_stepping_the_trace_player_changes_what_is_drawn(played):
    s = played["stepped"]
    seen = s["seen"]
    assert seen[0]["counter"].startswith("step 0 / ")
    assert [x["counter"].split(" /")[0] for x in seen] == [f"step {i}" for i in range(7)]
    assert len({x["svgHash"] for x in seen}) == len(seen)  # every step draws something else
    assert any(x["arrows"] > 0 for x in seen) and any(x["computes"] > 0 for x in seen)
    assert len({tuple(x["mem"]) for x in seen}) > 1  # the memory bars move
    last = s["end"]["counter"]
    n = int(last.split("/ ")[1])
    assert last == f"step {n} / {n}" and s["back"]["counter"] == f"step {n - 1} / {n}"


def test_standalone_page_plays_without_network(played):
    s = played["standalone"]
    assert s["start"].startswith("step 0 / ")
    n = s["start"].split("/ ")[1]
    assert s["end"]["counter"] == f"step {n} / {n}" and s["end"]["play"] == "▶"
    assert s["requests"] == []  # nothing asked for the network
    assert played["done"]["consoleErrors"] == []


def test_a_2400_event_trace_steps_smoothly(played):
    s = played["big"]
    assert 200 < s["frames"] < 300  # 300 (op, step)s, less those that change nothing
    assert s["perStepMs"] < 25, s  # each step (apply the differences, redraw) well under a frame at 30 fps
    assert s["scrubMs"] < 500, s  # jumping from the first to the last step
    print("2400-event trace timing:", s)
