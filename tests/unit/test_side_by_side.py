"""side_by_side lays any number of placement players out to fit the cell: a wrapping row, each scaled
down when it alone is wider (the browser test of 04_placement checks the pixels)."""

from __future__ import annotations

import pytest

from jupyter_mgpu.layout import placement as pl
from jupyter_mgpu.widgets.placement import PlacementWidget, side_by_side
from jupyter_mgpu.widgets.placement_data import view_data


@pytest.mark.parametrize("n", [1, 3, 7])
def test_players_wrap_and_shrink_to_the_cell(n):
    data = view_data((64, 64), pl.Shard(0), 4, 4, "T")
    players = [PlacementWidget(data=data, title=f"p{i}") for i in range(n)]
    row = side_by_side(*players)
    assert row.layout.flex_flow == "row wrap" and row.layout.width == "100%"
    assert all(p.layout.max_width == "100%" for p in row.children) and len(row.children) == n
    bundle = row._repr_mimebundle_()
    html = (bundle[0] if isinstance(bundle, tuple) else bundle)["text/html"]
    assert "flex-wrap:wrap" in html and html.count("max-width:100%") >= 2 * n  # the export wraps too
    assert 'style="max-width:100%;height:auto"' in players[0].svg()  # each picture scales down, never up
