"""notebooks/09_dtensor.ipynb, run in real JupyterLab with Chromium: the author's DTensor code in one
``%%mgpu`` cell, its placements drawn, a redistribute replayed from the ranks' real events, a 2-D mesh
side by side, and DTensor ``mm`` against ``mg.matmul`` at the edge of a 48 MiB device budget."""

import re

from labrun import assert_page_is_clean, notebook_module

WIDGET = "application/vnd.jupyter.widget-view+json"
SHOTS = {
    "01_authors_cell": "%%mgpu\nfrom torch.distributed.device_mesh import init_device_mesh",
    "02_inputs_and_result": "import jupyter_mgpu as mg",
    "03_redistribute_replayed": "s = mg.current()",
    "04_mesh_2d": "sr, ss = mg.from_dtensor",
    "05_budget": 'mg.reset_peak()\nC = mg.matmul(A, B, strategy="ring")\nprint(f"mg.matmul fits',
}

pytestmark, run = notebook_module("09_dtensor.ipynb", SHOTS, timeout_s=420)


def _mib(line: str) -> list[float]:
    return [float(x) for x in line.split(":")[-1].split(",")]


def test_the_dtensor_notebook_shows_what_its_text_says(run):
    text = run.text
    first = text["%%mgpu\nfrom torch.distributed.device_mesh import init_device_mesh"]
    starts = re.findall(r"my randn starts ([+-][\d.]+); my piece of a: \(2, 8\); c: \(Shard\(dim=0\),\)", first)
    assert len(starts) == 4 and len(set(starts)) == 4, first  # four random tensors, one global a
    assert "[ranks 0–3]" in first and "c: tensor (8, 4) on mesh (4,): [S(0)]" in first  # shown once
    html = "".join(o.get("data", {}).get("text/html", "") for o in run.outputs("%%mgpu\nfrom torch.distributed"))
    assert "<svg" in html and "mgpu-tile" in html  # drawn in the notebook as mg.show draws it
    assert "rank 3 at (3,): local (2, 8), 64 B, its own piece" in text["import jupyter_mgpu as mg"]
    data = run.outputs("import jupyter_mgpu as mg")[-1]["data"]
    assert WIDGET in data and data["text/html"].count("<svg") == 3
    assert "c equals a @ b computed in the notebook: True" in text["import torch\n\nA, B, C"]
    traced = text["s = mg.current()"]
    assert "DTensor redistribute [S(0)] → [R]" in traced and "DTensor redistribute [R] → [S(1)]" in traced
    counted = re.search(r"the ranks recorded (\d+) events in (\d+) steps \(0–(\d+)\):", traced)
    assert counted and int(counted.group(1)) >= 24, traced  # the all-gather alone: 12 sends, 12 receives
    assert (int(counted.group(2)), int(counted.group(3))) == (3, 2), traced  # before, the all-gather, the local split
    assert "the replay ends where the ranks are: True" in text["back = mg.from_dtensor"]
    two = text["sr, ss = mg.from_dtensor"]
    assert "[S(0), R]:    [128, 128, 128, 128]" in two and "[S(0), S(1)]: [64, 64, 64, 64]" in two
    assert "│    0    │    1    │" in text["mg.show(ss, text=True)"]
    budget = text['mg.reset_peak()\nC = mg.matmul(A, B, strategy="ring")\nring_peak']
    dtensor = _mib(re.search(r"DTensor mm  peak per rank \(MiB\): .*", budget).group(0))
    ring = _mib(re.search(r"mg.matmul   peak per rank \(MiB\): .*", budget).group(0))
    assert len(dtensor) == len(ring) == 4 and all(r < d for r, d in zip(ring, dtensor)), budget
    assert all(12.0 <= r < 1.3 * 12.0 + 4 for r in ring), budget  # near 3N²/P = 12 MiB
    assert "same result: True" in budget
    oom = text["%%mgpu\nimport re\ntry:\n    C_dt = torch.mm(A_dt, B_dt)"]
    said = re.findall(r"DTensor mm: out of memory, it tried to allocate (\d+\.\d) MiB more", oom)
    assert len(said) == 4 and all(float(m) > 1 for m in said), oom  # the whole sentence, with its unit
    fits = text['mg.reset_peak()\nC = mg.matmul(A, B, strategy="ring")\nprint(f"mg.matmul fits']
    peaks = re.search(r"mg.matmul fits: peak per rank \(MiB\) ([\d., ]+)", fits).group(1).split(",")
    assert len(peaks) == 4 and all(float(p) < 48 for p in peaks), fits
    assert "engines stopped" in text["%mgpu_shutdown"]


def test_page_is_clean(run):
    assert_page_is_clean(run)
