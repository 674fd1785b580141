"""Bad input to mg.load / mg.from_pandas / mg.map is refused on the controller, before any rank is asked."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import jupyter_mgpu as mg
from jupyter_mgpu.engine.execution.shipped_function import pickle_function
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.tensors import shard_map


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(MgpuError, match=r"nope\.npy does not exist$"):
        mg.load(tmp_path / "nope.npy")


def test_a_file_that_is_not_an_array_is_refused(tmp_path):
    (tmp_path / "notes.npy").write_text("hello")
    with pytest.raises(MgpuError, match="is not a .npy file"):
        mg.load(tmp_path / "notes.npy")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(MgpuError, match="holds Python objects, not numbers"):
        mg.load(tmp_path / "objects.npy")
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(MgpuError, match="cannot tell the format"):
        mg.load(tmp_path / "x.csv")
    torch.save({"a": torch.zeros(2), "b": torch.ones(3)}, tmp_path / "two.pt")
    with pytest.raises(MgpuError, match="holds 2 tensors .*pass key="):
        mg.load(tmp_path / "two.pt")
    with pytest.raises(MgpuError, match="has no tensor named 'c'"):
        mg.load(tmp_path / "two.pt", key="c")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(MgpuError, match="holds a list, not a tensor"):
        mg.load(tmp_path / "list.pt")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(MgpuError, match="is not a safetensors file"):
        mg.load(tmp_path / "bad.safetensors")


def test_dataframe_rows_of_different_shapes_are_named():
    import pandas as pd

    rows = [np.zeros(4, np.float32) for _ in range(5)]
    rows[3] = np.zeros(3, np.float32)
    with pytest.raises(MgpuError, match=r"row 3 of column 'emb' has shape \(3,\) but row 0 has \(4,\)"):
        mg.from_pandas(pd.DataFrame({"emb": rows}))
    with pytest.raises(MgpuError, match="has no column 'x'"):
        mg.from_pandas(pd.DataFrame({"emb": rows}), columns="x")
    with pytest.raises(MgpuError, match="needs a pandas DataFrame"):
        mg.from_pandas([1, 2])
    with pytest.raises(MgpuError, match="holds Python objects"):
        mg.from_numpy(np.array([np.zeros(2), np.zeros(3)], dtype=object))


def test_an_unpicklable_function_says_how_to_fix_it():
    lock = threading.Lock()
    with pytest.raises(
        MgpuError,
        match=r"<lambda> cannot be sent to the ranks \(it references lock \(a lock\), "
        r"which cannot be pickled\); define it with def",
    ):
        pickle_function(lambda x: (x, lock))
    with pytest.raises(MgpuError, match="needs a function"):
        pickle_function(42)


def test_notebook_functions_travel_by_value_with_their_globals():
    import pickle

    ns = {"__name__": "__main__"}
    exec("SCALE = 3\ndef triple(x):\n    return x * SCALE\n", ns)
    blob = pickle_function(ns["triple"])
    fn = pickle.loads(blob)
    assert fn(2) == 6 and fn.__globals__ is not ns
    assert pickle.loads(pickle_function(torch.nn.functional.cosine_similarity)) is torch.nn.functional.cosine_similarity


def test_reductions_of_per_rank_values():
    vals = [torch.tensor(1.0), torch.tensor(3.0), torch.tensor(5.0)]
    assert shard_map._reduce(vals, "sum", [1, 1, 1]).item() == 9.0
    assert shard_map._reduce([1.0, 4.0], "mean", [3, 1]) == pytest.approx(1.75)
    assert shard_map._reduce([2.0, float("nan")], "mean", [2, 0]) == 2.0  # a rank with no rows is left out
    assert shard_map._reduce([torch.ones(2), torch.zeros(1)], "concat", [2, 1]).tolist() == [1.0, 1.0, 0.0]
    assert shard_map._reduce([[1], [2, 3]], "concat", [1, 2]) == [1, 2, 3]
    with pytest.raises(MgpuError, match="cannot combine the per-rank results"):
        shard_map._reduce(["a", None], "sum", [1, 1])
