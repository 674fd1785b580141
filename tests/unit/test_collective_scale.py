"""``%mgpu_collective`` at 8 to 64 ranks: what a cell sends stays small, and its pictures stay legible.

No cluster: the ranks' inputs and results are built as ``collectives/collective_run.py`` builds them
(demo tensors, the schedule's final holdings as the captured "after"), and everything the cell displays
is measured as a notebook gets it: the figure's mime bundle, the player's widget state and its bundle.
"""

from __future__ import annotations

import json
import math
import re
import time
import xml.etree.ElementTree as ET

import pytest
from IPython.core.formatters import DisplayFormatter

from jupyter_mgpu.collectives.collective_run import CollectiveResult, reference
from jupyter_mgpu.ops import collective_schedule as sched
from jupyter_mgpu.ops import demo_inputs as demo
from jupyter_mgpu.widgets import rank_grid
from jupyter_mgpu.widgets.colors import rank_color
from jupyter_mgpu.widgets.grid_geometry import WIDTH
from jupyter_mgpu.widgets.row_folding import SameAs, fold_equal
from jupyter_mgpu.widgets.slot_codes import patch_parts, unfold
from jupyter_mgpu.widgets.svg_canvas import MIN_FONT, text_width

SVG = "{http://www.w3.org/2000/svg}"
NAMES = ("all_gather", "all_to_all", "reduce_scatter", "all_reduce")
SIZES = (8, 16, 32, 64)
BUDGET = {8: 5e6, 16: 2e6, 32: 3e6, 64: 10e6}  # bytes a cell sends (the target at 32 ranks was < 10 MB)
N_SQUARED = 4.4  # 64 ranks cost at most (64/32)² × 1.1 what 32 do: see test_sixty_four_ranks_cost_n_squared


@pytest.fixture(autouse=True)
def one_host(monkeypatch):
    """The ranks of one host (whatever session another test left current): no host labels."""
    monkeypatch.setattr(rank_grid, "rank_names", lambda n: None)


def result(name: str, n: int, op: str = "sum") -> CollectiveResult:
    """A run of ``name`` on ``n`` ranks with the default demo shape, as ``mg.collective`` returns it."""
    dims = demo.DEFAULT_SHAPE
    if name in ("all_to_all", "reduce_scatter"):  # split into n chunks: rows rounded up to a multiple of n
        dims = (math.ceil(dims[0] / n) * n, dims[1])
    xs = [demo.demo_tensor(r, dims) for r in range(n)]
    before = [sched.before_entries(name, x, r, 0, n) for r, x in enumerate(xs)]
    reducing = op if name in ("all_reduce", "reduce_scatter") else None
    return CollectiveResult(name, reducing, None, xs, before, reference(name, xs, op, 0), 1.6e-4, "gloo", "demo")


def _bundle_bytes(data: dict) -> int:
    return sum(len(v.encode()) if isinstance(v, str) else len(json.dumps(v)) for v in data.values())


def sent(res: CollectiveResult) -> tuple[dict[str, float], object]:
    """Bytes of everything the cell displays (the figure, the player's state and bundle), seconds to
    build them, and the player."""
    fmt = DisplayFormatter()  # every mime type, as a notebook kernel asks for
    t0 = time.perf_counter()
    figure, _ = fmt.format(res)
    player = res.animation()
    state = {k: v for k, v in player.get_state().items() if not isinstance(v, (bytes, memoryview))}
    bundle, _ = fmt.format(player)
    seconds = time.perf_counter() - t0
    player_bytes = len(json.dumps(state).encode()) + _bundle_bytes(bundle)
    return {"figure": _bundle_bytes(figure), "player": player_bytes, "seconds": seconds}, player


_cache: dict[tuple[str, int], tuple[CollectiveResult, dict[str, float], object]] = {}


def run(name: str, n: int) -> tuple[CollectiveResult, dict[str, float], object]:
    """The run, what its cell sends and its player (each size built once for this module's tests)."""
    if (name, n) not in _cache:
        res = result(name, n)
        _cache[name, n] = (res, *sent(res))
    return _cache[name, n]


def cost(name: str, n: int) -> dict[str, float]:
    return run(name, n)[1]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", NAMES)
def test_what_a_collective_cell_sends_stays_within_its_budget(name, n):
    c = cost(name, n)
    assert c["figure"] + c["player"] <= BUDGET[n], (name, n, c)
    assert c["player"] <= BUDGET[n] / 2 and c["figure"] <= BUDGET[n] / 2, (name, n, c)


@pytest.mark.parametrize("name", NAMES)
def test_sixty_four_ranks_cost_n_squared(name):
    """The schedule of a ring moves N(N-1) entries and all_to_all's ranks hold N² distinct chunks, so
    the bytes grow as N², not as N³ (frames × ranks × entries) as whole frames did."""
    small, large = cost(name, 32), cost(name, 64)
    total = (large["figure"] + large["player"]) / (small["figure"] + small["player"])
    assert total <= N_SQUARED, (name, total)
    assert large["player"] / small["player"] <= N_SQUARED, name


HALF_MB = 500e3  # bytes, as benchmarks/collective_pictures.py counts them


def _state_bytes(player: object) -> int:
    """The player's widget state as JSON (what the notebook sends the browser, less its binary buffers)."""
    state = {k: v for k, v in player.get_state().items() if not isinstance(v, (bytes, memoryview))}
    return len(json.dumps(state))


@pytest.mark.parametrize("name", NAMES)
def test_at_sixty_four_ranks_a_player_is_under_half_a_megabyte(name):
    """Each step's changes as short codes the browser draws (``widgets/slot_codes.py``): an all_reduce's
    player was 2.7 MB of SVG pieces at 64 ranks."""
    assert _state_bytes(run(name, 64)[2]) < HALF_MB, name


def test_at_sixty_four_ranks_the_all_to_all_figure_is_under_half_a_megabyte():
    """64 × 64 entries each way: each rank's row drawn once and used by the rows that look the same, one
    hover per row (it was 1.1 MB, a hover per entry)."""
    svg = run("all_to_all", 64)[0].svg()
    assert len(svg) < HALF_MB
    assert svg.count("<title>") <= 2 * 64  # one per rank and column: not one per entry


def _covered(spans: list[tuple[float, float]]) -> float:
    """The length of the union of ``spans``."""
    total, end = 0.0, float("-inf")
    for top, bottom in sorted(spans):
        if bottom > end:
            total += bottom - max(top, end)
            end = bottom
    return total


@pytest.mark.parametrize("name", NAMES)
def test_the_first_frame_of_thirty_two_ranks_is_drawn_down_its_whole_height(name):
    """The player's frames share one size, that of its fullest frame; an all_gather's input was then a
    small strip in rows two lines high, the first frame (1 400 px) two-thirds empty. Its input now
    spans its row and a row of 32 entries is one line: most of the frame's height is drawn."""
    root = ET.fromstring(run(name, 32)[2].frames[0])
    height = float(root.get("height"))
    shapes = _shapes(root)
    assert max(bottom for _, _, _, bottom in shapes) <= height  # the legend's last line is within the figure
    drawn = _covered([(top, bottom) for _, _, top, bottom in shapes])
    assert drawn > 0.5 * height, (name, drawn, height)


def _legend(root: ET.Element) -> tuple[list[tuple[float, float, float, float]], list[tuple[float, float, str]]]:
    """The key under a figure: its swatches (x, y, w, h) and its texts (x, y, text), after its head."""
    children = list(root)
    head = next(i for i, el in enumerate(children) if el.text == "colour = whose data a value holds:")
    rects, texts = [], []
    for el in children[head + 1 :]:
        if el.tag == SVG + "rect":
            rects.append(tuple(float(el.get(a)) for a in ("x", "y", "width", "height")))
        elif el.tag == SVG + "text":
            texts.append((float(el.get("x")), float(el.get("y")), el.text or ""))
    return rects, texts


@pytest.mark.parametrize(("name", "n"), [("all_gather", 32), ("all_to_all", 32), ("all_reduce", 16), ("all_to_all", 4)])
def test_every_key_of_the_legend_says_what_it_stands_for(name, n):
    """A swatch holds its rank's number, or a label that says what it stands for follows it: no bare
    "0" after a white box (it meant "a value 0 is drawn white"), and white only where a 0 is drawn."""
    res, _, player = run(name, n)
    for what, svg in (("figure", res.svg()), ("frame 0", player.frames[0])):
        rects, texts = _legend(ET.fromstring(svg))
        assert rects, (what, "no key")
        for x, y, w, h in rects:
            inside = [t for tx, ty, t in texts if x <= tx <= x + w and y <= ty <= y + h + 1]
            after = [t for tx, ty, t in texts if x + w < tx <= x + w + 8 and y <= ty <= y + h + 1]
            assert inside or after, (what, "a swatch says nothing", x, y)
            assert all(re.fullmatch(r"\d+", t) for t in inside), (what, inside)
            assert all(re.search("[a-z]", t) for t in after), (what, after)  # words, not a bare number
        drawn = svg.split("colour = whose data")[0]  # a white strip or cell: a value 0 ("same as" boxes are too)
        zero = re.search(r"fill='#ffffff' stroke='#(888888|dddddd)'", drawn) is not None
        assert ("value 0" in [t for _, _, t in texts]) == zero, what


def test_all_gather_on_32_ranks_is_light_and_quick():
    c, _ = sent(result("all_gather", 32))
    assert c["figure"] + c["player"] < 2e6  # was 265 MB: a full SVG of every rank's holdings per frame
    # how long it takes is benchmarks/collective_pictures.py's to say (0.5 s on a 2-core machine; whole frames took 10 s)


def test_the_schedule_s_frames_share_what_a_step_left_alone():
    """The frames of an all_gather on N ranks hold N³ entries, but a step makes only N new ones: frames
    share the rest (36 000 clones took 0.3 s of a 32-rank cell), and an earlier frame still shows what
    it showed."""
    n = 32
    frames = sched.schedule("all_gather", [demo.demo_tensor(r, (4, 4)) for r in range(n)])
    tensors = {id(t) for f in frames[1:] for h in f.holdings for t in h if t is not None}
    assert len(tensors) <= n * n, len(tensors)
    assert [sum(t is not None for t in h) for h in frames[2].holdings] == [2] * n  # unchanged by later steps
    assert all(all(t is not None for t in h) for h in frames[-1].holdings)


@pytest.mark.parametrize("name", ["all_gather", "all_reduce"])
def test_the_figure_of_sixty_four_ranks_grows_linearly_where_every_rank_ends_alike(name):
    """After an all_gather every rank holds the same 64 entries: drawn once, then "same as rank 0", the
    figure grows as N (it was 3 800 px and 670 kB at 64 ranks), not N²."""
    small, large = run(name, 16)[0].svg(), run(name, 64)[0].svg()
    assert len(large) / len(small) <= 4 * 1.4, (len(small), len(large))
    height = float(re.search(r"height='([\d.]+)'", large).group(1))
    assert height <= 64 * 26 + 400, height
    if name == "all_gather":
        assert large.count("= same as rank 0<") == 63


def test_only_lists_equal_to_the_one_above_fold_and_each_names_the_first_of_its_run():
    import torch

    a, b = [torch.ones(2), None], [torch.zeros(2), None]
    column = [a, [t if t is None else t.clone() for t in a], b, [torch.zeros(2), None], torch.ones(2), torch.ones(2)]
    assert fold_equal(column)[1:4] == [SameAs(0), b, SameAs(2)]
    assert fold_equal(column)[4:] == column[4:]  # a tensor is one line already
    assert fold_equal([a, [torch.ones(3), None]])[1] is not None and not isinstance(fold_equal([a, a[:1]])[1], SameAs)


def test_a_rank_that_ends_differently_is_drawn_whole_and_not_folded():
    n = 16
    res = result("all_gather", n)
    res.after[5] = [t + 1 for t in res.after[5]]  # rank 5's copy differs (a bug the figure must show)
    svg = res.svg()
    folded = re.findall(r"rank (\d+) holds exactly what rank (\d+) holds", svg)
    assert folded == [(str(r), "0") for r in range(1, 5)] + [(str(r), "6") for r in range(7, n)]


# -- legible ----------------------------------------------------------------------------------------
def _fonts(el: ET.Element, size: float | None = None) -> list[tuple[float, str]]:
    """``(font size, text)`` of every text, with the font size a text inherits from its groups."""
    size = float(el.get("font-size")) if el.get("font-size") else size
    out = [(size, el.text or "")] if el.tag == SVG + "text" else []
    for child in el:
        out += _fonts(child, size)
    return out


def _svgs(name: str, n: int) -> list[tuple[str, ET.Element]]:
    res, _, player = run(name, n)
    frames = [player.frames[0], player.frames[len(player.frames) // 2], player.frames[-1]]
    return [("figure", ET.fromstring(res.svg()))] + [(f"frame {i}", ET.fromstring(f)) for i, f in enumerate(frames)]


def _shapes(root: ET.Element) -> list[tuple[float, float, float, float]]:
    """``(left, right, top, bottom)`` of every rect and text drawn (a ``<use>`` as what it uses, moved by
    its x and y; a text's font size and anchor from its groups, its width estimated)."""
    ids = {el.get("id"): el for el in root.iter() if el.get("id")}
    out: list[tuple[float, float, float, float]] = []

    def walk(el: ET.Element, dx: float, dy: float, size: float, anchor: str) -> None:
        size, anchor = float(el.get("font-size") or size), el.get("text-anchor") or anchor
        x, y = dx + float(el.get("x") or 0), dy + float(el.get("y") or 0)
        if el.tag == SVG + "rect" and el.get("width") is not None:
            out.append((x, x + float(el.get("width")), y, y + float(el.get("height"))))
        elif el.tag == SVG + "text":
            tw = text_width(el.text or "", size)
            left = x - {"start": 0, "middle": tw / 2, "end": tw}[anchor]
            out.append((left, left + tw, y - 0.75 * size, y + 0.25 * size))
        elif el.tag == SVG + "use":
            walk(ids[el.get("href")[1:]], x, y, size, anchor)
        for child in el:
            if child.tag not in (SVG + "defs", SVG + "title") and el.tag != SVG + "use":
                walk(child, dx, dy, size, anchor)

    walk(root, 0.0, 0.0, 12.0, "start")
    return out


def _right_edges(root: ET.Element) -> list[float]:
    """The right edge of every rect and text drawn."""
    return [right for _, right, _, _ in _shapes(root)]


@pytest.mark.parametrize("n", [4, 8, 32, 64])
@pytest.mark.parametrize("name", ["all_gather", "all_reduce"])
def test_no_text_is_smaller_than_nine_px_and_nothing_is_wider_than_the_cell(name, n):
    for what, root in _svgs(name, n):
        fonts = _fonts(root)
        assert fonts and all(size is not None and size >= MIN_FONT for size, _ in fonts), (what, min(fonts))
        width = float(root.get("width"))
        assert width <= WIDTH, what
        assert max(_right_edges(root)) <= width + 0.5, what


def _drawn(el: ET.Element, ids: dict[str, ET.Element]):
    """Every element drawn inside ``el``, in order, a ``<use>`` as what it uses."""
    for child in el:
        if child.tag == SVG + "use":
            yield from _drawn(ids[child.get("href")[1:]], ids)
        else:
            yield child
            yield from _drawn(child, ids)


@pytest.mark.parametrize("n", [32, 64])
def test_every_rank_is_told_apart_by_its_fill_and_its_printed_number(n):
    root = ET.fromstring(run("all_gather", n)[0].svg())
    strips = root.find(f"{SVG}g[@font-size='9']")  # the strips, in one group that sets their font
    drawn = list(_drawn(strips, {el.get("id"): el for el in root.iter() if el.get("id")}))
    texts = [el.text for el in drawn if el.tag == SVG + "text"]
    # rank 0's row: before (its own strip), then n entries, each printing the rank whose data it is
    assert texts[: n + 1] == ["0"] + [str(r) for r in range(n)]
    fills = [el.get("fill") for el in drawn if el.tag == SVG + "rect"][1 : n + 1]
    assert len(set(fills)) == n  # 20 colours: solid, then hatched, dotted, cross-hatched
    patterns = {p.get("id"): p for p in root.iter(SVG + "pattern")}
    for r in range(20, n):
        assert fills[r] == f"url(#mgpu-rank-{r})"
        assert patterns[f"mgpu-rank-{r}"].find(SVG + "rect").get("fill") == rank_color(r)
    said = [el.text for el in root.iter(SVG + "text")]
    key = said[said.index("colour = whose data a value holds:") + 1 :]
    assert key == [str(r) for r in range(n)]  # every rank in the key, numbered (no value is 0: no white)


def test_reductions_over_more_than_fifty_two_ranks_still_know_every_rank():
    root = ET.fromstring(run("all_reduce", 64)[0].svg())
    hovers = [el.text for el in root.iter(SVG + "title") if el.text.startswith("rank 63:")]
    assert len(hovers) == 2  # before and after
    assert hovers[0].startswith("rank 63: 11×11: ") and "from rank 63," in hovers[0]
    assert "ranks 0–63 in all" in hovers[1] and "summed" in hovers[1]
    assert "unknown" not in " ".join(el.text for el in root.iter(SVG + "title"))


@pytest.mark.parametrize("name", NAMES)
def test_the_player_s_frames_all_have_one_size(name):
    player = run(name, 32)[2]
    sizes = {re.match(r"<svg [^>]*width='(\d+)' height='(\d+)'", f).groups() for f in player.frames}
    assert len(sizes) == 1
    assert all(0 not in patch_parts(p) for p in player.patches)  # the head (the size, the patterns) is sent once


def test_an_all_gather_s_frames_carry_only_the_entry_each_rank_receives():
    n = 32
    player = run("all_gather", n)[2]
    first_slot = 5  # parts 1 and 2 are the title and the caption
    per_frame = [[k for k in patch_parts(p) if k >= first_slot] for p in player.patches]
    # frame 1 turns each rank's input into slot r of its output list; then each ring step brings each
    # rank one entry: N(N-1) entries in all, not frames × ranks × entries
    assert per_frame[0] == [] and len(per_frame) == n + 1
    assert [len(p) for p in per_frame[2:]] == [n] * (n - 1)
    assert [len(unfold(m.get("arrows", []), 3)) for m in player.marks] == [0, 0] + [n] * (n - 1)


@pytest.mark.parametrize("name", ["all_gather", "all_to_all", "all_reduce"])
def test_up_to_eight_ranks_are_drawn_as_cells_with_their_values(name):
    res = result(name, 4 if name == "all_reduce" else 8)
    svg = res.svg()
    root = ET.fromstring(svg)
    assert root.find(f"{SVG}g[@font-size='9']") is None  # no strips
    cells = [el for el in root.iter(SVG + "rect") if el.find(SVG + "title") is not None]
    assert len(cells) >= 8 * 121 if name != "all_reduce" else len(cells) == 2 * 4 * 121  # every value, with hover
    assert float(root.get("width")) <= WIDTH


def test_holdings_compare_by_structure_and_values_floats_to_rounding_unless_exact():
    import torch

    from jupyter_mgpu.ops.holdings import holdings_equal

    a = [torch.tensor([1.0, 2.0]), None]
    near = [torch.tensor([1.0, 2.000001]), None]
    assert holdings_equal(a, near) and not holdings_equal(a, near, exact=True)
    assert holdings_equal(a, [a[0].clone(), None], exact=True)
    assert not holdings_equal(a, a[:1]) and not holdings_equal(a, [a[0], torch.zeros(2)])
    assert not holdings_equal(a[0], a[0].to(torch.float64)) and not holdings_equal(None, a)
    assert holdings_equal(torch.arange(3), torch.arange(3), exact=True)
