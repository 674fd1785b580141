import re

import pytest

from nbrun import by_source, execute_notebook

pytestmark = pytest.mark.notebook


def test_training_notebook_reaches_its_stated_accuracy():
    nb = execute_notebook("06_data_parallel_training.ipynb")
    text = by_source(nb)
    assert "1500 training and 297 test images of 64 pixels" in text["%%mgpu\nimport torch.nn.functional"]
    hand = text["%%mgpu\ntorch.manual_seed(100 + rank)"]
    assert "[rank 0] step 0: global loss 2.3" in hand
    hand_acc = float(re.search(r"hand-written data parallel: test accuracy ([0-9.]+)", hand).group(1))
    assert hand_acc >= 0.92
    # weights broadcast from rank 0 and identical updates: the same checksum on every rank
    sums = re.findall(r"Out\[rank \d\]: (\(.*\))", text["%%mgpu\nround(W.sum()"])
    assert len(sums) == 4 and len(set(sums)) == 1
    ddp = text["%%mgpu\nfrom torch.nn.parallel"]
    ddp_acc = float(re.search(r"DDP: test accuracy ([0-9.]+) after 96 steps", ddp).group(1))
    assert ddp_acc >= 0.94
    params = re.findall(r"Out\[rank \d\]: (\S+)", text["%%mgpu\nsum(p.sum()"])
    assert len(params) == 4 and len(set(params)) == 1
    logged = text["m = mg.metrics()"]
    assert "384 records from ranks [0, 1, 2, 3]" in logged  # 96 DDP steps x 4 ranks
    assert "reached" in text["%%mgpu --targets 0"] and "NOT" not in text["%%mgpu --targets 0"]
    assert "engines stopped" in text["plot.stop()"]
    # the live views were displayed as widgets
    views = [o for c in nb.cells if c.source.startswith("import jupyter_mgpu") for o in c.outputs
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(views) == 2
