"""Hypothesis fuzzing of the magic argument parsers: any text either parses or gives one UsageError /
MgpuError sentence — never another exception, never a hang."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.magics.arguments import parse_line as _parse
from jupyter_mgpu.magics.cell_magics import CellMagics
from jupyter_mgpu.magics.session_magics import MgpuMagics
from jupyter_mgpu.session.targets import parse_targets
from jupyter_mgpu.units import parse_size

tokens = st.sampled_from(
    [
        "4",
        "0",
        "-1",
        "--cpu",
        "--devices",
        "0,2",
        "--backend",
        "gloo",
        "nccl",
        "--mem-per-device",
        "2GiB",
        "lots",
        "--timeout",
        "5",
        "--restart",
        "--targets",
        "1:3",
        "--noblock",
        "--no-stream",
        "'",
        '"',
        "ü",
        "\x00",
        "--",
        "-x",
        "%",
        "==",
    ]
)
lines = st.one_of(st.text(max_size=60), st.lists(tokens, max_size=8).map(" ".join))

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(lines)
def test_init_arguments_parse_or_fail_with_one_sentence(line):
    try:
        _parse(MgpuMagics.mgpu_init, line)
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc).strip()


@SETTINGS
@given(lines)
def test_cell_magic_arguments_parse_or_fail_with_one_sentence(line):
    try:
        _parse(CellMagics.mgpu, line)
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc).strip()


@SETTINGS
@given(st.one_of(st.text(max_size=20), st.integers(), st.floats(allow_nan=True)))
def test_parse_size_returns_positive_bytes_or_a_clear_error(value):
    try:
        assert parse_size(value) > 0
    except MgpuError as exc:
        assert "memory size" in str(exc)


@SETTINGS
@given(st.one_of(st.text(max_size=20), st.integers(-5, 20), st.lists(st.integers(-3, 8), max_size=5)))
def test_parse_targets_gives_valid_ranks_or_a_clear_error(value):
    try:
        ranks = parse_targets(value, 4)
        assert ranks and all(0 <= r < 4 for r in ranks) and ranks == sorted(set(ranks))
    except MgpuError as exc:
        assert "rank" in str(exc) or "targets" in str(exc)
