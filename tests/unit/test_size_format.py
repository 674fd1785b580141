"""One size format for every view: the Python side prints the same table of cases as the sidebar's jest test."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_mgpu.units import format_bytes

CASES = Path(__file__).parents[2] / "labextension" / "test" / "size_format.json"


def test_python_prints_every_case_of_the_shared_table():
    cases = json.loads(CASES.read_text())["cases"]
    assert len(cases) >= 10
    for n, text in cases:
        assert format_bytes(n) == text
