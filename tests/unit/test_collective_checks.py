"""The checks every rank runs on the gathered input descriptions before a collective (pure)."""

from __future__ import annotations

from jupyter_mgpu.ops.collective_checks import problem, split_hint, usable, wrong_device


def meta(shape=(4, 3), dtype="float32", device="cpu", expected="cpu", nbytes=48, type_="Tensor"):
    return {
        "type": type_,
        "shape": shape,
        "dtype": dtype,
        "device": device,
        "expected_device": expected,
        "nbytes": nbytes,
    }


def test_good_inputs_pass_and_each_problem_names_its_rank():
    assert problem("all_reduce", "sum", [meta()] * 4, "x", 1 << 20) is None
    assert problem("reduce_scatter", "sum", [meta()] * 4, "x", None) is None
    assert "rank 2 int64" in problem("all_reduce", "sum", [meta(), meta(), meta(dtype="int64"), meta()], "x", None)
    assert "rank 1 (5, 3)" in problem("all_gather", "sum", [meta(), meta(shape=(5, 3))], "x", None)
    assert (
        problem("all_reduce", "sum", [meta(), {"type": "list", "expected_device": "cpu"}], "f(rank)", None)
        == "the input (f(rank)) is a list, not a torch.Tensor, on rank 1"
    )
    assert "rank 0's input is 48 B" in problem("all_reduce", "sum", [meta()] * 2, "x", 16)
    assert "rank 1's input tensor is on cuda:0 but rank 1's device is cuda:1" in problem(
        "all_reduce",
        "sum",
        [meta(device="cuda:0", expected="cuda:0"), meta(device="cuda:0", expected="cuda:1")],
        "x",
        None,
    )
    assert problem("scatter", "sum", [meta()] * 3, "x", None) == split_hint(
        "scatter", 4, 3, "the input of shape (4, 3)"
    )
    assert "such as 6" in problem("scatter", "sum", [meta()] * 3, "x", None)
    assert "at least one dimension" in problem("gather", "sum", [meta(shape=())] * 2, "x", None)
    assert "op avg needs floating-point" in problem("reduce", "avg", [meta(dtype="int32")] * 2, "x", None)
    assert problem("broadcast", "avg", [meta(dtype="int32")] * 2, "x", None) is None


def test_wrong_device():
    assert not wrong_device(meta())
    assert wrong_device(meta(device="meta"))
    assert wrong_device(meta(device="cuda:1", expected="cuda:0"))
    assert not wrong_device(meta(device="cuda:0", expected="cuda:0"))


def test_usable():
    assert usable(meta(), None) and usable(meta(), 48)
    assert not usable(meta(), 47)
    assert not usable(meta(device="meta"), None)
    assert not usable({"type": "list", "expected_device": "cpu"}, None)
