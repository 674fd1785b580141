"""A ``%%mgpu`` cell's last value as it leaves a rank (``engine/execution/cell_value.py``): bundle, repr, travel."""

from __future__ import annotations

import pickle
import threading
from types import SimpleNamespace

import IPython
import numpy as np
import pytest
import torch
from IPython.core.formatters import DisplayFormatter

from jupyter_mgpu.engine.execution import cell_value as cv


@pytest.fixture
def no_shell(monkeypatch):
    """No IPython shell on this rank (whatever shell another test started)."""
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)


@pytest.fixture
def shell(monkeypatch):
    """A rank's shell: IPython's own display formatter."""
    sh = SimpleNamespace(display_formatter=DisplayFormatter())
    monkeypatch.setattr(IPython, "get_ipython", lambda: sh)
    return sh


class Rich:
    """A rich value that cannot travel (a widget's comm lives on the rank): formatted on the rank."""

    def __init__(self) -> None:
        self.comm = threading.Lock()

    def __repr__(self) -> str:
        return "Rich()"

    def _repr_html_(self) -> str:
        return "<b>rich</b>"


class ShowsItself(Rich):
    """Publishes itself when displayed (a widget does): here that would show it twice."""

    shown = 0

    def _ipython_display_(self) -> None:
        type(self).shown += 1


class BrokenHtml:
    def __repr__(self) -> str:
        return "BrokenHtml()"

    def _repr_html_(self) -> str:
        raise ValueError("no html today")


@pytest.mark.parametrize("value", [42, "text", [1, 2.5, None], {"a": (1, 2)}, None])
def test_a_plain_value_travels_and_its_repr_is_its_text(no_shell, value):
    out = cv.describe(value)
    assert out["repr"] == repr(value) == out["data"]["text/plain"] and out["metadata"] == {}
    assert pickle.loads(out["pickled"]) == value


def test_a_tensor_travels_as_itself(no_shell):
    t = torch.arange(6.0).reshape(2, 3)
    out = cv.describe(t)
    assert torch.equal(pickle.loads(out["pickled"]), t) and out["repr"] == repr(t)


def test_a_value_that_does_not_pickle_is_shown_not_copied(no_shell):
    lock = threading.Lock()
    out = cv.describe(lock)
    assert out["pickled"] is None and out["repr"] == repr(lock)


@pytest.mark.parametrize(
    "big, small",
    [
        (torch.zeros(300), torch.zeros(10)),  # element bytes, known before pickling
        (np.zeros(300), np.zeros(10)),
        (b"x" * 2000, b"x" * 100),  # the pickle's own size
    ],
    ids=["tensor", "array", "bytes"],
)
def test_a_value_past_the_travel_limit_is_shown_not_copied(no_shell, monkeypatch, big, small):
    monkeypatch.setattr(cv, "MAX_TRAVEL_BYTES", 1000)
    assert cv.describe(big)["pickled"] is None and cv.describe(big)["repr"] == repr(big)
    assert cv.describe(small)["pickled"] is not None


def test_a_big_tensor_is_refused_before_it_is_pickled(no_shell, monkeypatch):
    monkeypatch.setattr(cv, "MAX_TRAVEL_BYTES", 1000)
    monkeypatch.setattr("cloudpickle.dumps", lambda *a, **k: pytest.fail("pickled a value too big to travel"))
    assert cv.describe(torch.zeros(1000))["pickled"] is None


def test_the_shells_formatters_give_the_rich_bundle_of_a_value_that_cannot_travel(shell):
    out = cv.describe(Rich())
    assert out["data"] == {"text/plain": "Rich()", "text/html": "<b>rich</b>"} and out["repr"] == "Rich()"
    assert out["pickled"] is None


class TravellingRich:
    def __repr__(self) -> str:
        return "TravellingRich()"

    def _repr_html_(self) -> str:
        return "<b>formatted in the notebook</b>"


def test_a_value_that_travels_is_not_formatted_on_the_rank(shell, monkeypatch):
    """A plotly figure's first bundle costs a rank a second (nbformat, jsonschema): the notebook formats it."""
    monkeypatch.setattr(shell.display_formatter, "format", lambda v: pytest.fail("formatted on the rank"))
    out = cv.describe(TravellingRich())
    assert out["data"] == {"text/plain": "TravellingRich()"} and out["pickled"] is not None


def test_a_repr_that_fails_is_said_not_raised(no_shell):
    class NoRepr:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert cv.describe(NoRepr())["repr"] == "<NoRepr: repr failed: RuntimeError>"


def test_a_value_that_displays_itself_is_formatted_not_published(shell):
    ShowsItself.shown = 0
    out = cv.describe(ShowsItself())
    assert ShowsItself.shown == 0  # not published on the rank
    assert out["data"]["text/html"] == "<b>rich</b>"
    assert shell.display_formatter.ipython_display_formatter.enabled  # switched back on after


def test_a_formatter_that_fails_still_leaves_a_repr(shell, monkeypatch):
    def broken(value):
        raise RuntimeError("formatter broke")

    monkeypatch.setattr(shell.display_formatter, "format", broken)
    out = cv.describe([1, 2])
    assert out["data"] == {"text/plain": "[1, 2]"} and out["repr"] == "[1, 2]"
    assert shell.display_formatter.ipython_display_formatter.enabled


def test_a_failing_html_repr_keeps_the_text(shell):
    out = cv.describe(BrokenHtml())
    assert out["data"]["text/plain"] == "BrokenHtml()" and out["repr"] == "BrokenHtml()"
    assert pickle.loads(out["pickled"]).__class__.__name__ == "BrokenHtml"
