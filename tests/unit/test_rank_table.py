"""A magic's one-row-per-rank table (``magics/rank_table.py``): aligned text columns and escaped HTML cells."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from jupyter_mgpu.magics.rank_table import RankTable


class PetTable(RankTable):
    COLUMNS = ("rank", "name", "note")
    CSS_CLASS = "pet-table"

    def _cells(self, row: dict[str, Any]) -> list[str]:
        return [str(row["rank"]), row["name"], row.get("note", "")]


ROWS = [
    {"rank": 0, "name": "a", "note": "short"},
    {"rank": 12, "name": "a much longer name", "note": ""},
    {"rank": 3, "name": "<b>&co</b>", "note": "x < y & 'z'"},
]


def _column_starts(widths: list[int]) -> list[int]:
    starts, at = [], 0
    for w in widths:
        starts.append(at)
        at += w + 2
    return starts


def test_text_columns_are_as_wide_as_their_widest_cell_and_two_spaces_apart():
    lines = repr(PetTable(ROWS)).split("\n")
    assert len(lines) == 1 + len(ROWS)
    cells = [PetTable.COLUMNS, *(PetTable(ROWS)._cells(r) for r in ROWS)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(PetTable.COLUMNS))]
    starts = _column_starts(widths)
    for line, row in zip(lines, cells):
        for start, cell in zip(starts, row):
            assert line[start : start + len(cell)] == cell  # every cell starts at its column, left-aligned
    assert lines[0].split() == list(PetTable.COLUMNS)


def test_text_lines_carry_no_trailing_blanks():
    text = repr(PetTable(ROWS))
    assert all(line == line.rstrip() for line in text.split("\n"))
    # the row whose last cell is empty ends right after its name, not padded out to the note column
    assert text.split("\n")[2].endswith("a much longer name")


def test_an_empty_table_is_its_header():
    assert repr(PetTable([])) == "rank  name  note"
    assert "<tbody></tbody>" in PetTable([])._repr_html_()


def test_html_cells_are_escaped_and_the_table_carries_its_class():
    out = PetTable(ROWS)._repr_html_()
    assert out.startswith("<table class='pet-table'>") and out.endswith("</table>")
    assert "<b>" not in out.split("<tbody>")[1]  # a cell's markup is shown as text, never rendered
    assert f"<td>{html.escape('<b>&co</b>')}</td>" in out
    assert f"<td>{html.escape(ROWS[2]['note'])}</td>" in out
    assert re.findall(r"<th>([^<]*)</th>", out) == list(PetTable.COLUMNS)
    body = out.split("<tbody>")[1]
    assert body.count("<tr>") == len(ROWS)
    assert [re.findall(r"<td>([^<]*)</td>", tr)[0] for tr in body.split("<tr>")[1:]] == ["0", "12", "3"]


def test_the_default_class_and_a_table_without_cells():
    class Bare(RankTable):
        COLUMNS = ("rank",)

    assert Bare([])._repr_html_().startswith("<table class='mgpu-table'>")
    with pytest.raises(NotImplementedError):
        repr(Bare([{"rank": 0}]))


def _status_rows(n: int, per_host: int = 8) -> list[dict[str, Any]]:
    return [
        {
            "rank": r,
            "name": f"n{r}",
            "device": f"node{r // per_host}:cuda:{r % per_host}",
            "state": "busy" if r % 16 == 5 else "idle",
        }
        for r in range(n)
    ]


class HostTable(PetTable):
    COLUMNS = ("rank", "device", "state")

    def _cells(self, row: dict[str, Any]) -> list[str]:
        return [str(row["rank"]), row["device"], row["state"]]


def test_64_ranks_on_8_hosts_are_counted_boxed_and_grouped_by_host():
    table = HostTable(_status_rows(64))
    assert table.summary() == "64 ranks on 8 hosts: 60 idle, 4 busy"
    page = table._repr_html_()
    assert "max-height:420px;overflow-y:auto" in page and "position:sticky" in page  # it scrolls, header in view
    hosts = re.findall(r"<tr class='mgpu-host'><th colspan='3'[^>]*>([^<]*)</th>", page)
    assert hosts == [f"node{h} · ranks {8 * h}–{8 * h + 7}" for h in range(8)]
    assert page.count("<td>") == 64 * 3  # every rank once
    assert repr(table).splitlines()[0] == "64 ranks on 8 hosts: 60 idle, 4 busy"


def test_a_few_ranks_keep_the_plain_table():
    table = HostTable(_status_rows(4))
    assert "mgpu-host" not in table._repr_html_() and "max-height" not in table._repr_html_()
    assert repr(table).splitlines()[0].split() == ["rank", "device", "state"]
