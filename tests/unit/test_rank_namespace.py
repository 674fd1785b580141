"""A notebook function run in the rank's namespace (``engine/execution/rank_namespace.py``): whose names it reads."""

from __future__ import annotations

import math
import os
import types

import pytest

from jupyter_mgpu.engine.execution import rank_namespace as rn

NOTEBOOK = """
def train():
    global steps
    steps = base + 1
    return helper()

def helper():
    return offset

def forget():
    global scratch
    del scratch

def closure():
    def inner():
        return offset * 2
    return inner()
"""


def shipped(**values) -> dict:
    """The globals cloudpickle gives a notebook function on a rank: the notebook names it references."""
    g: dict = {"__builtins__": __builtins__}
    exec(NOTEBOOK, g)
    g.update(values)
    return g


@pytest.fixture(autouse=True)
def no_notes():
    rn.take_notes()
    yield
    rn.take_notes()


def test_a_name_the_rank_lacks_comes_from_the_notebook_only_while_the_call_runs():
    g = shipped(base=1, offset=10)
    rank_ns: dict = {}
    binding = rn.RankBinding(g["train"], rank_ns)
    with rn.Running(binding.function, binding) as fn:
        assert fn() == 10 and rank_ns["base"] == 1
    assert "base" not in rank_ns and "offset" not in rank_ns and "helper" not in rank_ns
    assert rank_ns["steps"] == 2  # declared global: left on the rank for the next cell
    assert rn.take_notes() == []


def test_what_else_the_notebook_shipped_finds_the_ranks_names():
    g = shipped(offset=10)
    rn.RankBinding(g["helper"], {"model": "the rank's model", "offset": 3})
    assert g["model"] == "the rank's model" and g["offset"] == 10  # a notebook class's methods read these


def test_a_name_the_rank_defines_is_the_ranks_and_said_once():
    g = shipped(base=1, offset=10)
    rank_ns = {"offset": 99, "base": 1}  # base: the same value on both sides, nothing to say
    binding = rn.RankBinding(g["train"], rank_ns)
    for _ in range(2):
        with rn.Running(binding.function, binding) as fn:
            assert fn() == 99
    assert rank_ns["offset"] == 99 and rank_ns["steps"] == 2
    assert g["offset"] == 10  # the notebook's value is not overwritten in what it shipped
    assert rn.take_notes() == [("train", ("offset",))]
    assert rn.take_notes() == []  # taken


def test_a_helper_function_it_brings_reads_the_ranks_names_too():
    g = shipped(offset=10)
    rank_ns = {"offset": 7}
    binding = rn.RankBinding(g["closure"], rank_ns)
    with rn.Running(binding.function, binding) as fn:
        assert fn() == 14  # the closure's inner function was rebound to the rank's namespace
    assert binding.function.__globals__ is rank_ns


def test_a_declared_global_the_function_deletes_is_gone_from_the_rank():
    g = shipped()
    rank_ns = {"scratch": [1, 2]}
    binding = rn.RankBinding(g["forget"], rank_ns)
    with rn.Running(binding.function, binding) as fn:
        fn()
    assert "scratch" not in rank_ns


def test_a_name_the_call_replaced_on_the_rank_is_kept():
    g = shipped(offset=10)
    rank_ns: dict = {}
    binding = rn.RankBinding(g["helper"], rank_ns)
    put = binding.enter()
    assert set(put) == {"offset", "train", "helper", "forget", "closure"} and put["offset"] == 10
    rank_ns["offset"] = 11  # as if the call had written it (globals()['offset'] = ...)
    binding.leave(put)
    assert rank_ns == {"offset": 11}


def test_running_without_a_binding_calls_the_function_as_it_is():
    f = lambda: 3  # noqa: E731
    with rn.Running(f, None) as fn:
        assert fn is f


def test_declared_globals_are_the_names_assigned_or_deleted_as_globals_nested_functions_included():
    g = shipped()
    assert rn.declared_globals(g["train"]) == {"steps"}
    assert rn.declared_globals(g["forget"]) == {"scratch"}
    assert rn.declared_globals(g["helper"]) == set()

    def outer():
        def inner():
            global deep_name
            deep_name = 1

        return inner

    assert rn.declared_globals(outer) == {"deep_name"}


def test_same_value_is_identity_or_an_equal_scalar_module_or_function():
    assert rn.same_value(math, math) and rn.same_value(os.path, __import__("os").path)
    assert not rn.same_value(math, os)
    assert rn.same_value(3, 3) and rn.same_value("a", "a") and not rn.same_value(3, 4)
    assert not rn.same_value(1, 1.0) and not rn.same_value(True, 1)  # different types: say it
    a, b = shipped()["helper"], shipped()["helper"]
    assert a is not b and rn.same_value(a, b)
    assert not rn.same_value(a, shipped()["train"])
    listed = [1]
    assert rn.same_value(listed, listed) and not rn.same_value([1], [1])  # containers: only the same object
    fake = types.ModuleType("math")
    assert rn.same_value(fake, math)  # a module is its name


@pytest.mark.parametrize(
    "names, cell, words",
    [
        (["lr"], False, ["train() reads lr,", "value is used", "pass a notebook value as an argument"]),
        (["lr", "model"], False, ["reads lr and model,", "values are used"]),
        (["a", "b", "c"], True, ["%%mgpu reads a, b and c,", "%mgpu_push sends the notebook's"]),
    ],
)
def test_the_both_sides_line_names_the_reader_and_the_way_out(names, cell, words):
    text = rn.both_sides_line("%%mgpu" if cell else "train", names, cell=cell)
    assert text.startswith("mgpu: ") and "\n" not in text
    for w in words:
        assert w in text
