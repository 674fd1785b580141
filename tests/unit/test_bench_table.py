"""The views of a collective benchmark (``widgets/bench_table.py``): the nccl-tests style text table, the
HTML table, and the busbw plot (plotly and plain SVG) with sizes on a log axis."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace
from typing import Any

from jupyter_mgpu.widgets import bench_table as bt

SVG = "{http://www.w3.org/2000/svg}"


def _row(
    collective: str, size: int, busbw: float, wrong: int = 0, root: int = -1, dtype: str = "float32", time_us=12.34
) -> dict:
    return {
        "collective": collective,
        "size": size,
        "count": size // 4,
        "dtype": dtype,
        "redop": "sum" if collective == "all_reduce" else "none",
        "root": root,
        "time_us": time_us,
        "algbw": busbw / 2,
        "busbw": busbw,
        "wrong": wrong,
    }


def _result(rows: list[dict[str, Any]], backend: str = "gloo") -> SimpleNamespace:
    return SimpleNamespace(
        rows=rows, world_size=4, backend=backend, iters=20, warmup=5, wrong=sum(r["wrong"] for r in rows)
    )


ROWS = [
    _row("all_reduce", 1024, 0.5),
    _row("all_reduce", 2048, 1.0),
    _row("all_reduce", 4096, 2.0),
    _row("broadcast", 1024, 0.25, root=0),
    _row("broadcast", 4096, 1.5, root=0),
    _row("barrier", 0, 0.0),
]


def test_text_names_the_run_and_has_one_block_per_collective():
    text = bt.table_text(_result(ROWS))
    lines = text.split("\n")
    assert lines[0].startswith("# jupyter_mgpu collective benchmark: 4 ranks, gloo, 20 iterations after 5 warm-up")
    assert [line for line in lines if re.fullmatch(r"# \w+", line)] == ["# all_reduce", "# broadcast", "# barrier"]
    assert lines.count(bt.HEADER[0]) == 3
    assert lines[-1] == "# Out of bounds values : 0 OK"
    data = [line for line in lines if not line.startswith("#")]
    assert len(data) == len(ROWS)
    first = data[0].split()
    assert first[:6] == ["1024", "256", "float32", "sum", "-", "12.3"]  # no root: "-", not nccl-tests' -1
    assert data[3].split()[4] == "0"  # broadcast's root


def test_text_cells_end_under_their_header_labels():
    big = _row("all_gather", 1 << 30, 123.456, wrong=7, root=3, dtype="bfloat16", time_us=8698.04)
    text = bt.table_text(_result([big]))
    row = next(line for line in text.split("\n") if not line.startswith("#"))
    label_ends = [m.end() for m in re.finditer(r"\S+", bt.HEADER[0])][1:]  # "#" starts the line
    cell_ends = [m.end() for m in re.finditer(r"\S+", row)]
    assert cell_ends == label_ends  # right-aligned under the labels, as nccl-tests prints them
    assert row.split() == ["1073741824", "268435456", "bfloat16", "none", "3", "8698.0", "61.73", "123.46", "7"]


def test_wrong_elements_are_counted_at_the_end():
    rows = [_row("all_reduce", 1024, 1.0, wrong=3), _row("all_reduce", 2048, 1.0, wrong=2)]
    assert bt.table_text(_result(rows)).endswith("\n# 5 wrong result elements")


def test_html_marks_only_wrong_counts_in_red_and_escapes_names():
    rows = [_row("all_reduce", 1536, 1.0), _row("x<y>&z", 3 << 20, 2.0, wrong=4)]
    out = bt.table_html(_result(rows, backend="gloo<&>"))
    trs = re.findall(r"<tr>(.*?)</tr>", out.split("<tbody>")[1])
    assert len(trs) == 2
    assert "color:#c00" not in trs[0] and re.search(r"<td style='color:#c00[^']*'>4</td>$", trs[1])
    assert "<td>x&lt;y&gt;&amp;z</td>" in trs[1] and "x<y>" not in out
    assert "gloo&lt;&amp;&gt;" in out and "gloo<&>" not in out
    assert re.findall(r"<td>([^<]*)</td>", trs[0])[1:3] == ["1.5 KiB", "384"]  # sizes in binary units
    assert re.findall(r"<td>([^<]*)</td>", trs[1])[1] == "3 MiB"
    assert re.findall(r"<td>([^<]*)</td>", trs[0])[5] == "-"
    assert len(re.findall(r"<th>", out)) == 10


def test_the_plot_has_one_line_per_collective_on_a_log_axis_without_the_barrier():
    fig = bt.busbw_figure(_result(ROWS))
    assert [t.name for t in fig.data] == ["all_reduce", "broadcast"]
    assert list(fig.data[0].x) == [1024, 2048, 4096] and list(fig.data[0].y) == [0.5, 1.0, 2.0]
    assert fig.layout.xaxis.type == "log"
    assert fig.data[0].line.dash != fig.data[1].line.dash  # told apart by dash and marker, not by colour
    assert fig.data[0].marker.symbol != fig.data[1].marker.symbol


def _svg_lines(svg: str) -> dict[str, list[tuple[float, float]]]:
    """The points of each collective's line, by the name its legend gives it."""
    root = ET.fromstring(svg)
    paths = [p for p in root.iter(f"{SVG}path") if p.get("fill") == "none" and " L " in p.get("d", "")]
    names = [t.text for t in root.iter(f"{SVG}text")]
    legend = [n for n in names if n in ("all_reduce", "broadcast", "barrier")]
    out = {}
    for name, path in zip(legend, paths):
        nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.get("d"))]
        out[name] = list(zip(nums[::2], nums[1::2]))
    return out


def test_the_svg_plot_is_well_formed_with_sizes_on_a_log_axis():
    svg = bt.busbw_svg(_result(ROWS, backend="gloo & co"), width=640, height=340)
    root = ET.fromstring(svg)  # escapes and all
    assert root.get("width") == "640" and root.get("height") == "340"
    lines = _svg_lines(svg)
    assert list(lines) == ["all_reduce", "broadcast"]  # the barrier moves no data: not drawn
    (x1, y1), (x2, y2), (x4, y4) = lines["all_reduce"]
    assert x1 < x2 < x4 and abs((x2 - x1) - (x4 - x2)) < 0.2  # doubling the size is one equal step
    assert y1 > y2 > y4  # more busbw is higher up
    assert lines["broadcast"][0][0] == x1 and lines["broadcast"][1][0] == x4  # one x axis for all
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert {"1 KiB", "2 KiB", "4 KiB"} <= set(labels)
    assert any("gloo & co" in (t or "") for t in labels)


def test_an_svg_of_no_points_is_still_a_picture():
    root = ET.fromstring(bt.busbw_svg(_result([_row("barrier", 0, 0.0)])))
    assert root.tag == f"{SVG}svg"
    assert not [p for p in root.iter(f"{SVG}path")]
