"""benchmarks/cosine.py says how its headline was made: measured, extrapolated from a monotone fit, or
compared where the forum recipe really ran; its printed table fits a notebook cell and names no targets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("cosine_bench", Path(__file__).parents[2] / "benchmarks" / "cosine.py")
cosine = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cosine)

GiB = 2**30


def _run(total: float, work: float, peak: float = 1.0) -> dict:
    return {"total": total, "work": work, "peaks": [peak * GiB] * 4}


def test_a_fit_that_does_not_grow_is_not_extrapolated():
    # the forum-recipe timings of the issue: 2,000 rows ran faster than 1,000
    est = cosine.forum_estimate([(1000, _run(5.0, 0.9)), (2000, _run(4.8, 0.7))], 10_000)
    assert est["method"] == "not extrapolated" and est["at"] == 2000 and est["total"] == 4.8
    assert "not growing with rows" in est["note"] and "comparison is made at 2,000 rows" in est["note"]


def test_a_growing_fit_is_extrapolated_along_its_stated_line():
    fits = [(50_000, _run(7.0, 2.0, 1)), (100_000, _run(9.0, 4.0, 2)), (200_000, _run(13.0, 8.0, 4))]
    est = cosine.forum_estimate(fits, 1_000_000)
    assert est["method"] == "extrapolated" and est["at"] == 1_000_000
    assert est["total"] == pytest.approx(5.0 + 40.0)  # start-up 5 s + 40 s of work per million rows
    assert "least-squares line" in est["note"] and "40.00 s per million rows" in est["note"]


def test_all_rows_measured_is_said_so():
    est = cosine.forum_estimate([(10_000, _run(6.0, 1.0))], 10_000)
    assert est["method"] == "measured" and est["note"] == "measured at 10,000 rows"


def _result(method: str, at: int) -> dict:
    rows = [
        {"name": "one process", "total": 1.8, "compute": 1.4, "peaks": [5.8 * GiB], "err": 0.0, "note": "a"},
        {"name": "forum recipe", "total": 65.0, "compute": None, "peaks": [6 * GiB] * 4, "err": 0.0, "note": "b " * 90},
        {
            "name": "mg.load + mg.map + gather",
            "total": 1.75,
            "compute": 1.1,
            "peaks": [1.6 * GiB] * 4,
            "err": 0.0,
            "note": "c",
        },
    ]
    return {
        "rows": rows,
        "method": method,
        "at": at,
        "forum_total": 65.0 if at > 2000 else 4.8,
        "mg_total_at": 1.75 if at > 2000 else 9.6,
        "start": 2.0,
    }


def test_the_printed_table_fits_a_cell_names_its_method_and_no_target(capsys):
    for method, at, says in (
        ("extrapolated", 1_000_000, "(the forum recipe's time extrapolated, see [2])"),
        ("measured", 1_000_000, "(both measured at 1,000,000 rows)"),
        ("not extrapolated", 2000, "2.0× slower than the forum recipe (both measured at 2,000"),
    ):
        text = cosine.print_table(_result(method, at), 1_000_000, 300)
        assert says in " ".join(text.split()), text
        assert max(len(line) for line in text.splitlines()) <= cosine.WIDTH
        assert "target" not in text
    capsys.readouterr()
