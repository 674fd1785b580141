import pytest

from nbrun import by_source, execute_notebook

pytestmark = pytest.mark.notebook


def test_quickstart_notebook_runs_and_shows_what_it_says():
    nb = execute_notebook("01_quickstart.ipynb")
    text = by_source(nb)
    assert "mgpu: 4 engines ready (4 × CPU virtual device, gloo" in text["%mgpu_init 4"]
    out = text["%%mgpu\nx = torch.full"]
    for r in range(4):
        assert f"[rank {r}] {r} 4 cpu tensor([6., 6.])" in out
    assert "Out[rank 3]: 48.0" in text["%%mgpu\nx.sum()"]
    assert "rank" in text["%mgpu_status"] and "cpu:3" in text["%mgpu_status"]
    assert "[499999500000.0, 499999500000.0, 499999500000.0, 499999500000.0]" in text["import jupyter_mgpu as mg"]
    assert "RankError: IndexError on rank 2: list index out of range at line 3 of the cell" in text["%%mgpu\nvalues"]
    assert "rank 3 never joined it" in text["%%mgpu\nif rank != 3"]
    assert "Out[rank 0]: tensor([4.])" in text["%%mgpu\ny = torch.ones(1)"]
    assert "rank 1 ran out of device memory (budget 512.0 MiB) while allocating 1.0 GiB" in text["%%mgpu\nif rank == 1"]
    assert "engines stopped" in text["%mgpu_shutdown"]
