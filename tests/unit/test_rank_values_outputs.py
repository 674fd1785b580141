"""A ``%%mgpu`` cell's values at many ranks stay under JupyterLab's 50-output limit: values the browser
shows as HTML are one output with a label per rank group; values it draws itself are capped and the rest
named (``session/cell_values.py``)."""

from __future__ import annotations

import IPython.display
import pytest

from jupyter_mgpu.session import cell_values
from jupyter_mgpu.session.cell_values import RankValues


@pytest.fixture
def shown(monkeypatch):
    out: list[dict] = []
    monkeypatch.setattr(IPython.display, "display", lambda data, raw=False, **kw: out.append(data))
    return out


def _reports(datas: list[dict]) -> list[dict]:
    return [{"repr": d.get("text/plain", ""), "data": d} for d in datas]


def test_32_different_tables_are_one_output_with_every_rank_labelled(shown, capsys):
    datas = [{"text/plain": f"df {r}", "text/html": f"<table><tr><td>{r}</td></tr></table>"} for r in range(32)]
    RankValues(list(range(32)), _reports(datas))._ipython_display_()
    (one,) = shown
    page = one["text/html"]
    assert [page.count(f"rank {r}</div>") for r in (0, 17, 31)] == [1, 1, 1]
    assert page.count("mgpu-rank-label") == 32 and "max-height" in page  # a box that scrolls
    assert one["text/plain"].startswith("[rank 0]\ndf 0") and capsys.readouterr().out == ""


def test_equal_tables_are_one_block_for_all_ranks(shown):
    datas = [{"text/plain": "df", "text/html": "<table></table>"}] * 4
    RankValues([0, 1, 2, 3], _reports(datas))._ipython_display_()
    (one,) = shown
    assert "ranks 0–3</div><table></table>" in one["text/html"] and "max-height" not in one["text/html"]


def test_images_merge_as_img_tags(shown):
    datas = [{"text/plain": "<Figure>", "image/png": f"AAA{r}"} for r in range(3)]
    RankValues([0, 1, 2], _reports(datas))._ipython_display_()
    (one,) = shown
    assert "<img src='data:image/png;base64,AAA2'/>" in one["text/html"]


def test_values_the_front_end_draws_past_the_cap_are_all_kept_grouped_and_paged(shown, capsys):
    """64 ranks, a figure each, 33 different (ranks 32-63 share one): one output, every value on a page."""
    from jupyter_mgpu.session.value_pages import PER_PAGE

    plot = "application/vnd.plotly.v1+json"
    datas = [{"text/plain": f"fig {min(r, 32)}", plot: {"data": [min(r, 32)]}} for r in range(64)]
    RankValues(list(range(64)), _reports(datas))._ipython_display_()
    (box,) = shown  # one output: the pages
    assert capsys.readouterr().out == ""
    bar, area = box.children
    pages = bar.children[1]
    assert len(pages.options) == 9 and pages.options[0][0] == "1/9: rank 0, rank 1, rank 2, rank 3"
    assert pages.options[-1][0] == "9/9: ranks 32–63"
    assert "33 different values on 64 ranks" in bar.children[3].value
    seen = []
    for n in range(len(pages.options)):
        if n:
            bar.children[2].click()  # ▶
        outs = area.outputs
        assert len(outs) <= 2 * PER_PAGE
        seen += [o["data"][plot]["data"][0] for o in outs if plot in o["data"]]
        labels = [o["data"]["text/plain"] for o in outs if plot not in o["data"]]
        assert len(labels) == len(outs) // 2
    assert seen == list(range(33)) and labels == ["[ranks 32–63]"]
    assert bar.children[2].disabled and not bar.children[0].disabled
    bar.children[0].click()  # ◀
    assert pages.value == 7 and area.outputs[0]["data"]["text/plain"] == "[rank 28]"


def test_up_to_the_cap_each_drawn_value_is_two_outputs(shown):
    plot = "application/vnd.plotly.v1+json"
    cap = cell_values.MAX_RICH_GROUPS
    datas = [{"text/plain": f"fig {r}", plot: {"data": [r]}} for r in range(cap)]
    RankValues(list(range(cap)), _reports(datas))._ipython_display_()
    assert len(shown) == 2 * cap <= 48  # a label and a figure each, under the front end's limit of 50
    assert shown[0]["text/plain"] == "[rank 0]" and shown[-1][plot] == {"data": [cap - 1]}


def test_plain_text_values_stay_one_line_each(shown, capsys):
    RankValues([0, 1], _reports([{"text/plain": "1"}, {"text/plain": "2"}]))._ipython_display_()
    assert shown == [] and capsys.readouterr().out.splitlines() == ["Out[rank 0]: 1", "Out[rank 1]: 2"]
