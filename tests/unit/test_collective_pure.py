"""Pure parts of the collectives explorer: busbw factors, sizes, demo inputs, logical schedules, views."""

from __future__ import annotations

import itertools
import re

import pytest
import torch

from jupyter_mgpu.ops import collective_bench as cb
from jupyter_mgpu.ops import collective_run as coll
from jupyter_mgpu.ops import collective_schedule as sched
from jupyter_mgpu.ops import demo_inputs as demo
from jupyter_mgpu.widgets import colors
from jupyter_mgpu.widgets.collective_view import before_after_svg, frame_svg, tracked_schedule
from jupyter_mgpu.widgets.player import FramePlayer


# -- benchmark arithmetic -------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_bus_factors_are_those_of_nccl_tests(n):
    assert cb.bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for name in ("all_gather", "reduce_scatter", "all_to_all"):
        assert cb.bus_factor(name, n) == pytest.approx((n - 1) / n)
    for name in ("broadcast", "reduce"):
        assert cb.bus_factor(name, n) == 1.0


def test_bus_factor_values_at_four_ranks_and_unknown_name():
    assert cb.bus_factor("all_reduce", 4) == 1.5
    assert cb.bus_factor("all_gather", 4) == 0.75
    with pytest.raises(ValueError, match="no benchmark for 'nope'"):
        cb.bus_factor("nope", 4)


def test_summarize_takes_the_slowest_rank_per_iteration_then_the_mean():
    # rank 0 slow in iteration 0, rank 1 slow in iteration 1: slowest = [2, 3] s, mean 2.5 s
    row = cb.summarize("all_reduce", 4096, 1000, 4, 2, [[2.0, 1.0], [1.0, 3.0]], [0, 2])
    assert row["time_us"] == pytest.approx(2.5e6) and row["slowest"] == [2.0, 3.0]
    assert row["size"] == 4000
    assert row["algbw"] == pytest.approx(4000 / 2.5 / 1e9)
    assert row["busbw"] == pytest.approx(row["algbw"] * 1.0)  # 2(n-1)/n = 1 at n = 2
    assert row["wrong"] == 2


def test_sizes_parse_like_nccl_tests():
    assert cb.parse_size("1K") == 1024 and cb.parse_size("256M") == 256 << 20 and cb.parse_size(77) == 77
    assert cb.size_range("1K:8K") == [1024, 2048, 4096, 8192]
    assert cb.size_range("1K:64K", factor=4) == [1024, 4096, 16384, 65536]
    assert cb.size_range("4K,1M") == [4096, 1 << 20]
    for bad in ("1Q", "abc", "-1K"):
        with pytest.raises(ValueError, match="cannot read the size"):
            cb.parse_size(bad)
    with pytest.raises(ValueError, match="starts above"):
        cb.size_range("1M:1K")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_split_collectives_round_counts_to_a_multiple_of_the_world_size(n):
    for name in ("all_gather", "reduce_scatter", "all_to_all"):
        count = cb.element_count(name, 1000, 4, n)
        assert count % n == 0 and 250 - n < count <= 250
    assert cb.element_count("all_reduce", 1000, 4, n) == 250


def test_benchmark_pattern_makes_every_op_exact():
    x = cb.pattern(3, 100, torch.float32, "cpu")
    assert x.min() >= 1 and x.max() <= 5 and torch.equal(x, x.round())
    assert not torch.equal(cb.pattern(0, 100, torch.float32, "cpu"), x)


# -- names -----------------------------------------------------------------------------------------
def test_names_and_ops_accept_aliases_and_refuse_unknown_ones():
    assert coll.canonical_name("allreduce") == "all_reduce"
    assert coll.canonical_name("All-Gather") == "all_gather"
    assert coll.canonical_name("ring_shift") == "send_recv"
    assert coll.canonical_op("MAX") == "max" and coll.canonical_op("ReduceOp.PRODUCT") == "product"
    assert coll.canonical_op("mean") == "avg"
    with pytest.raises(ValueError, match="unknown collective 'allsum'"):
        coll.canonical_name("allsum")
    with pytest.raises(ValueError, match="unknown reduce op 'xor'"):
        coll.canonical_op("xor")


# -- demo inputs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 12, 25])
def test_demo_inputs_hold_rank_plus_one_on_any_world_size(n):
    for r in range(n):
        t = demo.demo_tensor(r, (11, 11))
        assert t.shape == (11, 11) and t.dtype == torch.float32
        assert set(t.unique().tolist()) == {0.0, float(r + 1)}


def test_demo_shapes_differ_between_ranks():
    masks = [demo.demo_tensor(r, (11, 11)) > 0 for r in range(len(demo.SHAPES))]
    for a, b in itertools.combinations(range(len(masks)), 2):
        assert not torch.equal(masks[a], masks[b]), (demo.SHAPES[a], demo.SHAPES[b])
    assert demo.shape_name(0) == "disk" and demo.shape_name(1) == "square"


def test_demo_shapes_parse_and_one_dimensional_demo_is_filled():
    assert demo.parse_shape("12x12") == (12, 12) and demo.parse_shape("8") == (8,)
    assert demo.parse_shape(None) == (11, 11) and demo.parse_shape((4, 5)) == (4, 5)
    assert torch.equal(demo.demo_tensor(2, 5), torch.full((5,), 3.0))
    assert demo.demo_tensor(1, (2, 2), torch.int64).dtype == torch.int64
    for bad in ("0x4", "axb", (1, 2, 3), True):
        with pytest.raises(ValueError):
            demo.parse_shape(bad)


# -- logical schedules vs an independent reference -------------------------------------------------
def _reduce(op, xs):
    stacked = torch.stack(xs)
    return {
        "sum": stacked.sum(0),
        "product": stacked.prod(0),
        "min": stacked.min(0).values,
        "max": stacked.max(0).values,
        "avg": stacked.mean(0),
    }[op]


def reference(name, xs, op, src):
    n = len(xs)
    if name == "broadcast":
        return [xs[src].clone() for _ in xs]
    if name == "reduce":
        return [_reduce(op, xs) if r == src else None for r in range(n)]
    if name == "all_reduce":
        return [_reduce(op, xs) for _ in xs]
    if name == "all_gather":
        return [[x.clone() for x in xs] for _ in xs]
    if name == "reduce_scatter":
        return [_reduce(op, [x.chunk(n)[r] for x in xs]) for r in range(n)]
    if name == "scatter":
        return [xs[src].chunk(n)[r] for r in range(n)]
    if name == "gather":
        return [[x.clone() for x in xs] if r == src else None for r in range(n)]
    if name == "all_to_all":
        return [[xs[j].chunk(n)[r] for j in range(n)] for r in range(n)]
    if name == "barrier":
        return [x.clone() for x in xs]
    if name == "send_recv":
        return [xs[(r - 1) % n].clone() for r in range(n)]
    raise AssertionError(name)


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and torch.allclose(a.double(), b.double())


CASES = [(name, op) for name in coll.COLLECTIVES for op in (coll.OPS if name in coll.REDUCING else ("sum",))]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("name,op", CASES)
def test_logical_schedule_ends_with_the_reference_result(name, op, n):
    g = torch.Generator().manual_seed(n)
    xs = [torch.randint(1, 5, (2 * n, 3), generator=g).float() for _ in range(n)]
    src = n - 1
    frames = sched.schedule(name, xs, op, src)
    assert same(frames[-1].holdings, reference(name, xs, op, src))
    assert frames[0].caption.startswith("before")
    for f in frames:
        assert len(f.holdings) == n
        for a, b, label in f.transfers:
            assert 0 <= a < n and 0 <= b < n and a != b and label


@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_ring_all_reduce_is_reduce_scatter_then_all_gather_around_the_ring(n):
    xs = [torch.full((n, 2), float(r + 1)) for r in range(n)]
    frames = sched.schedule("all_reduce", xs, "sum")[1:]
    assert len(frames) == 2 * (n - 1)
    assert all(f.caption.startswith("reduce-scatter") for f in frames[: n - 1])
    assert all(f.caption.startswith("all-gather") for f in frames[n - 1 :])
    for f in frames:
        assert sorted((a, b) for a, b, _ in f.transfers) == [(r, (r + 1) % n) for r in range(n)]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_binomial_broadcast_takes_log2_steps(n):
    xs = [torch.full((2,), float(r)) for r in range(n)]
    frames = sched.schedule("broadcast", xs, src=1)[1:]
    assert len(frames) == (n - 1).bit_length()
    assert sum(len(f.transfers) for f in frames) == n - 1  # every rank but the root receives once


# -- pictures --------------------------------------------------------------------------------------
def test_rank_colours_are_stable_and_distinct():
    assert colors.rank_color(0) == "#1f77b4" and colors.rank_color(1) == "#ff7f0e"
    assert len({colors.rank_color(r) for r in range(20)}) == 20
    assert colors.rank_color(20) == colors.rank_color(0)
    with pytest.raises(ValueError):
        colors.rank_color(-1)


def _fills(svg: str) -> set[str]:
    return set(re.findall(r"<rect [^>]*fill='([^']+)'", svg))


def test_values_take_the_colour_of_the_rank_they_came_from_never_a_rank_for_a_value():
    n = 4
    xs = [torch.full((2, 2), float(r + 1)) for r in range(n)]
    svg = before_after_svg("all_reduce", "sum", None, xs, reference("all_reduce", xs, "sum", 0))
    # the sum 10 holds every rank's data: stripes of ranks 0-3, defined once; no colour of a rank past 3
    assert "url(#mgpu-mix-15)" in svg and svg.count("<pattern id='mgpu-mix-15'") == 1
    assert all(colors.rank_color(r) not in _fills(svg) for r in range(n, 20))
    # values 0..23 of an arange all_gather: only the 4 ranks' colours and white (0), whatever the values
    ar = [torch.arange(6.0).reshape(2, 3) + 6 * r for r in range(n)]
    fills = _fills(before_after_svg("all_gather", None, None, ar, reference("all_gather", ar, "sum", 0)))
    assert fills - {"none"} <= {colors.rank_color(r) for r in range(n)} | {colors.EMPTY, "#fafafa"}


def test_max_keeps_the_origin_of_the_winner_and_both_on_a_tie():
    xs = [torch.tensor([1.0, 5.0, 2.0]), torch.tensor([3.0, 2.0, 2.0])]
    final = tracked_schedule("all_reduce", "max", None, xs)[-1].holdings
    assert final[0].real.tolist() == [3.0, 5.0, 2.0]
    assert final[0].imag.long().tolist() == [0b10, 0b01, 0b11]
    summed = tracked_schedule("reduce_scatter", "sum", None, [torch.tensor([0.0, 4.0]), torch.tensor([2.0, 0.0])])
    assert [h.imag.long().tolist() for h in summed[-1].holdings] == [[0b10], [0b01]]  # zeros add nothing


def test_sizes_and_boxes_fit_the_figure():
    n = 4
    xs = [demo.demo_tensor(r, (12, 12)) for r in range(n)]
    svg = before_after_svg("reduce_scatter", "sum", None, xs, reference("reduce_scatter", xs, "sum", 0))
    width = float(re.search(r"width='([\d.]+)'", svg).group(1))
    assert width <= 900
    cells = [float(w) for w in re.findall(r"<rect x='[\d.]+' y='[\d.]+' width='([\d.]+)' height='\1' fill='[^n]", svg)]
    assert min(cells) >= 9  # a 3x12 chunk is drawn at a readable size, not a thumbnail


def test_before_after_svg_has_a_row_per_rank_and_says_who_receives_nothing():
    n = 3
    xs = [demo.demo_tensor(r, (6, 6)) for r in range(n)]
    after = reference("reduce", xs, "max", 1)
    svg = before_after_svg("reduce", "max", 1, xs, after, "gloo", 0.001)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert all(f"rank {r}" in svg for r in range(n))
    assert svg.count(">receives nothing<") == 2 and svg.count(">(root is rank 1)<") == 2  # on two lines: it fits
    assert "reduce (op max), root rank 1" in svg
    # rank 2's colour is drawn (its value 3 survives the max), rank 1's value 2 does too
    assert colors.rank_color(2) in svg and colors.rank_color(1) in svg
    lists = before_after_svg("all_gather", None, None, xs, reference("all_gather", xs, "sum", 0))
    assert lists.count(">from rank 2<") == n + 1  # a label above each slot, and the key


def test_frame_svg_draws_the_transfers_as_arrows():
    xs = [torch.full((4,), float(r + 1)) for r in range(4)]
    frames = tracked_schedule("all_reduce", "sum", None, xs)
    svg = frame_svg("all_reduce", "sum", None, frames[1], 1, len(frames), 4)
    assert "logical schedule" in svg and len(re.findall(r"<path d='M [0-9.]+ [0-9.]+ C", svg)) == 4
    assert "rank 3 → rank 0: chunk" in svg


def test_player_steps_plays_and_pauses_without_a_browser():
    p = FramePlayer(["<svg>0</svg>", "<svg>1</svg>", "<svg>2</svg>"], ["a", "b", "c"], badge="logical schedule")
    assert p.index == 0 and p.frame == "<svg>0</svg>"
    assert p.step() == 1 and p.step(5) == 2 and p.step(-9) == 0
    p.index = 2
    p.play()
    assert p.playing and p.index == 0  # play at the end restarts
    p.step(2)
    assert p.index == 2 and not p.playing  # reaching the end stops
    assert "logical schedule" in p.static_html() and "<svg>2</svg>" in p.static_html()
    data = p._repr_mimebundle_()
    data = data[0] if isinstance(data, tuple) else data
    assert "application/vnd.jupyter.widget-view+json" in data  # the live player …
    assert "<li>c</li>" in data["text/html"] and data["text/html"].endswith("<svg>2</svg></div>")  # … and its export
    assert p._esm.exists() if hasattr(p._esm, "exists") else "render" in p._esm
    with pytest.raises(ValueError):
        FramePlayer([])


def _bench_result(wrong=0):
    from jupyter_mgpu.collectives.collective_bench import BenchResult

    rows = []
    for name in ("all_reduce", "all_gather"):
        for i, size in enumerate((1024, 1 << 20)):
            row = cb.summarize(name, size, size // 4, 4, 4, [[1e-3 * (i + 1)]] * 4, [wrong, 0, 0, 0])
            row.update(dtype="float32", redop="sum" if name == "all_reduce" else "none", root=-1)
            rows.append(row)
    return BenchResult(rows, 4, "gloo", "float32", "sum", 0, 5, 1)


def test_bench_table_plot_and_svg_views():
    ok = _bench_result()
    text = ok.table()
    assert "# all_reduce" in text and "# all_gather" in text and "#wrong" in text and "(GB/s)" in text
    assert re.search(r"\n\s+1048576\s+262144\s+float32\s+sum\s+-\s+2000\.0\s+0\.52\s+0\.79\s+0\n", text)
    assert text.endswith("# Out of bounds values : 0 OK") and ok.wrong == 0
    assert " -1 " not in text and "<td>-1</td>" not in ok._repr_html_()  # no root: "-", not nccl-tests' -1
    fig = ok.figure()
    assert [t.name for t in fig.data] == ["all_reduce", "all_gather"] and fig.layout.xaxis.type == "log"
    assert list(fig.data[0].y) == [r["busbw"] for r in ok.rows[:2]]
    svg = ok.svg()
    assert svg.startswith("<svg") and svg.count(">1 MiB<") == 1 and "all_gather" in svg
    bad = _bench_result(wrong=3)
    assert bad.wrong == 12 and "12 wrong result elements" in bad.table()
    assert "color:#c00" in bad._repr_html_() and "color:#c00" not in ok._repr_html_()
