import os
import sys

import pytest
import torch

from mhar.analysis.maps import RoutingMap, plot_map, routing_map
from mhar.model import Decoder

sys.path.insert(0, os.path.dirname(__file__))
from analysis_helpers import tiny_config  # noqa: E402


@pytest.mark.parametrize("method,heads,block", [("routed", 1, 0), ("routed", 4, 3), ("delta", 2, 2)])
def test_map_rows_sum_to_one_over_available_sources(seeded, tmp_path, method, heads, block):
    model = Decoder(tiny_config(method, heads, block, n_layers=3))
    with torch.no_grad():
        model.residual.queries.normal_(0, 1.0)
    m = routing_map(model, [torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (1, 8))], title=method)
    assert m.weights.shape == (heads, 7, len(m.columns)) and m.tokens == 24
    avail = ~torch.isnan(m.weights)
    torch.testing.assert_close(torch.nan_to_num(m.weights).sum(-1), torch.ones(heads, 7, dtype=torch.float64))
    # sublayer 0 reads only the first source; the final site reads every completed source
    assert avail[:, 0].sum() == heads
    assert avail[:, -1, 0].all()
    if method == "routed" and not block:
        # full routing: site i reads exactly the embedding and sublayers < i (a lower triangle)
        tri = torch.ones(7, 7, dtype=torch.bool).tril()
        assert torch.equal(avail[0], tri)
    if method == "routed" and block:
        j = m.columns.index("partial")
        assert avail[0, 1, j] and not avail[0, 0, j] and not avail[0, 3, j] and avail[0, 4, j]
    png = plot_map(m, tmp_path / "map.png")
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    back = RoutingMap.from_dict(m.to_dict())
    assert torch.equal(torch.isnan(back.weights), ~avail)


def test_zero_queries_give_uniform_maps():
    m = routing_map(Decoder(tiny_config("routed", 2, 0)), [torch.randint(0, 64, (1, 5))])
    for r in range(m.weights.shape[1]):
        row = m.weights[0, r]
        n = int((~torch.isnan(row)).sum())
        assert torch.allclose(row[~torch.isnan(row)], torch.full((n,), 1.0 / n, dtype=torch.float64))


def test_maps_reject_the_standard_stream():
    with pytest.raises(ValueError, match="no routing sites"):
        routing_map(Decoder(tiny_config("standard")), [torch.zeros(1, 3, dtype=torch.long)])


@pytest.mark.parametrize("sites,heads", [(7, 1), (61, 8)])
def test_map_title_clears_the_panels(sites, heads):
    """The figure title sits above every panel: on a deep model's map (61 sites, the
    30-layer SmolLM2 conversion) it was drawn over the first row's panels."""
    from mhar.analysis.maps import map_figure

    w = torch.rand(heads, sites, 9, dtype=torch.float64)
    w[:, :, 1:] = w[:, :, 1:].masked_fill(torch.rand(sites, 8) < 0.5, float("nan"))
    w = w / torch.nan_to_num(w).sum(-1, keepdim=True)
    m = RoutingMap([f"s{i}" for i in range(sites)], [f"c{j}" for j in range(9)], w, 128, "deep")
    fig = map_figure(m)
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    for ax in fig.axes:
        if ax.axison:
            box = ax.get_tightbbox(renderer)
            assert title.y0 >= box.y1 - 1 or not title.overlaps(box), (ax.get_title(), title, box)
    import matplotlib.pyplot as plt
    plt.close(fig)
