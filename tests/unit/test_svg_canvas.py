"""Hand-written SVG (``widgets/svg_canvas.py``): text widths, wrapping inside a width, escaped well-formed markup."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from jupyter_mgpu.widgets import svg_canvas as sc

SVG = "{http://www.w3.org/2000/svg}"


def _parse(c: sc.Canvas) -> ET.Element:
    return ET.fromstring("<svg xmlns='http://www.w3.org/2000/svg'>" + "".join(c.parts) + "</svg>")


def test_text_width_grows_with_the_text_and_the_font():
    assert sc.text_width("", 12) == 0
    assert sc.text_width("abcd", 12) == 2 * sc.text_width("ab", 12)
    assert sc.text_width("abcd", 24) == 2 * sc.text_width("abcd", 12)


TEXT = "rank 3 holds nothing here because the scatter has not reached it yet, so this box stays empty"


@pytest.mark.parametrize("width", [40.0, 90.0, 200.0, 1000.0])
@pytest.mark.parametrize("size", [10.0, 11.0, 16.0])
def test_wrapped_lines_keep_every_word_in_order_and_fit_the_width(width, size):
    lines = sc.wrap(TEXT, width, size)
    assert " ".join(lines) == TEXT
    per = max(4, int(width / (size * sc.CHAR)))  # the fewest characters a line may always hold
    for line in lines:
        assert sc.text_width(line, size) <= max(width, per * size * sc.CHAR) or " " not in line
    joined = [a + " " + b.split()[0] for a, b in zip(lines, lines[1:])]
    assert all(sc.text_width(j, size) > width for j in joined)  # a line is broken only when the next word would not fit


def test_a_word_longer_than_the_width_gets_a_line_of_its_own():
    lines = sc.wrap("a verylongwordthatcannotfit b", 30, 12)
    assert "verylongwordthatcannotfit" in lines
    assert sc.wrap("", 100, 12) == [] and sc.wrap("   ", 100, 12) == []


def test_text_is_escaped_and_reads_back_as_given():
    c = sc.Canvas()
    s = "a < b & 'c' \"d\" </text><script>"
    c.text(1.26, 2, s, size=9.5, anchor="middle", weight="bold", fill="#123456")
    (el,) = _parse(c)
    assert el.tag == SVG + "text" and el.text == s
    assert (float(el.get("x")), float(el.get("y"))) == (1.3, 2.0)  # one decimal
    assert el.get("font-size") == "9.5" and el.get("text-anchor") == "middle"
    assert el.get("font-weight") == "bold" and el.get("fill") == "#123456"


def test_rects_carry_their_geometry_a_dash_only_when_asked_and_an_optional_hover_title():
    c = sc.Canvas()
    c.rect(0, 0.04, 10.26, 5, "#fff")
    c.rect(3, 4, 5, 6, "none", "#999", 1.5, dash="4 3", title="rank 1 → rank 2")
    plain, dashed = _parse(c)
    assert [plain.get(k) for k in ("x", "y", "width", "height", "fill")] == ["0.0", "0.0", "10.3", "5.0", "#fff"]
    assert plain.get("stroke-dasharray") is None and list(plain) == []
    assert dashed.get("stroke-dasharray") == "4 3" and dashed.get("stroke-width") == "1.5"
    (title,) = list(dashed)
    assert title.tag == SVG + "title" and title.text == "rank 1 → rank 2"


@pytest.mark.parametrize("title", ["a < b", "x & y", 'say "hi"', "</title></rect><script>alert(1)</script>", "&lt;"])
def test_a_hover_title_is_escaped_and_reads_back_as_given(title):
    c = sc.Canvas()
    c.rect(0, 0, 5, 5, "#fff", title=title)
    markup = "".join(c.parts)
    assert "<script" not in markup
    (el,) = _parse(c)  # well-formed: a raw < or & would not parse
    assert list(el)[0].text == title


def test_parts_stay_in_drawing_order():
    c = sc.Canvas()
    for i in range(5):
        c.rect(i, 0, 1, 1, "#000")
        c.text(i, 0, str(i))
    root = _parse(c)
    assert [el.tag[len(SVG) :] for el in root] == ["rect", "text"] * 5
    assert [el.text for el in root if el.tag == SVG + "text"] == ["0", "1", "2", "3", "4"]
