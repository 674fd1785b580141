"""The schedule player's front end puts each frame together as the kernel does (``static/player.js``).

A DiffFramePlayer sends the first frame in parts and then only each frame's changes and marks; the
browser applies them (stepping forward, jumping back, jumping ahead) and draws the arrows and outlines.
Node.js runs ``diffFrames`` from the very module the widget ships and every frame must equal
``rank_grid.Series.frame`` in Python, character for character — cells (3 ranks) and strips (12 to 64
ranks), whose entries travel as short codes (``widgets/slot_codes.py``).
No browser or kernel: Node.js only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from jupyter_mgpu.collectives.collective_run import CollectiveResult, reference
from jupyter_mgpu.ops import demo_inputs as demo
from jupyter_mgpu.widgets import rank_grid
from jupyter_mgpu.widgets.transport import STATIC

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

RUN = """
import { readFileSync } from 'node:fs';
const { diffFrames } = await import(process.argv[2]);
const state = JSON.parse(readFileSync(process.argv[3], 'utf8'));
const model = { get: k => state[k] };
const frames = diffFrames(model);
const order = JSON.parse(process.argv[4]);
console.log(JSON.stringify(order.map(i => frames.frame(i))));
"""


@pytest.mark.parametrize(
    ("name", "n", "op", "shape"),
    [
        ("all_reduce", 3, "max", (6, 6)),
        ("all_gather", 12, None, (6, 6)),
        ("reduce", 5, "sum", (6, 6)),
        ("all_to_all", 16, None, (16, 6)),  # codes used once sent in place, others by number
        ("all_reduce", 64, "sum", (11, 11)),  # printed rank ranges, two passes of ranks, runs of arrows
    ],
)
def test_the_browser_puts_every_frame_together_as_python_does(tmp_path: Path, monkeypatch, name, n, op, shape):
    node = shutil.which("node")
    assert node, "this test needs Node.js"
    monkeypatch.setattr(rank_grid, "rank_names", lambda n: None)
    xs = [demo.demo_tensor(r, shape) for r in range(n)]
    res = CollectiveResult(
        name, op, 0 if name == "reduce" else None, xs, xs, reference(name, xs, op or "sum"), 1e-3, "gloo", ""
    )
    player = res.animation()
    state = {k: getattr(player, k) for k in ("parts", "patches", "marks", "overlay")}
    (tmp_path / "state.json").write_text(json.dumps(state))
    module = tmp_path / "player.mjs"  # the widget's own module (transport.js is only needed to render)
    module.write_text((STATIC / "player.js").read_text())
    (tmp_path / "run.mjs").write_text(RUN)
    last = len(player.frames) - 1
    order = [*range(last + 1), 1, last, 0, last // 2]  # forward, back, ahead, back again
    out = subprocess.run(
        [node, str(tmp_path / "run.mjs"), module.as_uri(), str(tmp_path / "state.json"), json.dumps(order)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    drawn = json.loads(out.stdout)
    assert len(drawn) == len(order)
    for i, svg in zip(order, drawn):
        assert svg == player.frames[i], (name, i)
    assert any("<path d='M" in svg for svg in drawn) and any("stroke='#000000'" in svg for svg in drawn)
