"""Routing maps: token-averaged routing weights, routing site x source, per head.

``weights[h, site, column]`` is the mean over tokens of the weight head ``h`` of
``site`` puts on the source named ``columns[column]``; sources a site cannot read
(later sublayers' outputs, the partial sum at a block's first sublayer) are NaN, so
every row sums to one over the sources available at that site.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch
from torch import Tensor, nn

from mhar.analysis.capture import capture_sites, routing_stream, source_columns


@dataclass
class RoutingMap:
    sites: list[str]          # row names: "attn0", "mlp0", ..., "final"
    columns: list[str]        # source names
    weights: Tensor           # (H, sites, columns) float64, NaN where unavailable
    tokens: int
    title: str = ""

    @property
    def heads(self) -> int:
        return self.weights.shape[0]

    def to_dict(self) -> dict:
        w = [[[None if math.isnan(v) else v for v in row] for row in head] for head in self.weights.tolist()]
        return {"sites": self.sites, "columns": self.columns, "tokens": self.tokens, "title": self.title, "weights": w}

    def save_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict()) + "\n")

    @classmethod
    def from_dict(cls, d: dict) -> "RoutingMap":
        w = torch.tensor([[[math.nan if v is None else v for v in row] for row in head] for head in d["weights"]],
                         dtype=torch.float64)
        return cls(d["sites"], d["columns"], w, d["tokens"], d.get("title", ""))


@torch.no_grad()
def routing_map(model: nn.Module, batches: Iterable[Tensor], title: str = "") -> RoutingMap:
    """Token-averaged routing weights of ``model`` over ``batches`` of input ids (B, T)."""
    stream = routing_stream(model)
    columns = source_columns(stream)
    col = {c: j for j, c in enumerate(columns)}
    sums: Tensor | None = None
    names: list[str] = []
    tokens = 0
    was_training = model.training
    model.eval()
    try:
        for ids in batches:
            sites = capture_sites(model, ids)
            if sums is None:
                names = [s.name for s in sites]
                sums = torch.zeros(stream.heads, len(sites), len(columns), dtype=torch.float64)
                avail = torch.zeros(len(sites), len(columns), dtype=torch.bool)
                for r, s in enumerate(sites):
                    avail[r, [col[lab] for lab in s.labels]] = True
            for r, s in enumerate(sites):
                w = s.weights().reshape(-1, stream.heads, len(s.sources)).double().sum(0).cpu()  # (H, N)
                sums[:, r, [col[lab] for lab in s.labels]] += w
            tokens += ids.numel()
    finally:
        model.train(was_training)
    if sums is None or tokens == 0:
        raise ValueError("routing maps need at least one batch of tokens")
    weights = sums / tokens
    weights[:, ~avail] = math.nan
    return RoutingMap(names, columns, weights, tokens, title)


def plot_map(m: RoutingMap, path: str | Path, dpi: int = 110) -> Path:
    """One heatmap per head (site rows x source columns) in one PNG."""
    import matplotlib.pyplot as plt

    fig = map_figure(m)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def map_figure(m: RoutingMap):
    """The matplotlib figure of :func:`plot_map` (the caller closes it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    H = m.heads
    ncols = min(H, 4)
    nrows = -(-H // ncols)
    cell = 0.28
    w = max(3.0, cell * len(m.columns) + 1.5)
    h = max(2.5, cell * len(m.sites) + 1.2)
    # constrained layout keeps the title and the colour bar clear of the panels (tight_layout
    # left the title over the first row of a tall figure)
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols + 0.8, h * nrows + 0.6), squeeze=False,
                             layout="constrained")
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
    # colour scale: up to the largest weight of a site with a choice (the single-source
    # first site is always 1 and would flatten everything else)
    W = m.weights.numpy()
    choice = (~np.isnan(W[0])).sum(-1) > 1
    vmax = float(np.nanmax(W[:, choice])) if choice.any() else 1.0
    vmax = min(1.0, max(vmax, 1e-3))
    annotate = len(m.sites) <= 16 and len(m.columns) <= 16
    im = None
    for k in range(nrows * ncols):
        ax = axes[k // ncols][k % ncols]
        if k >= H:
            ax.axis("off")
            continue
        data = np.ma.masked_invalid(m.weights[k].numpy())
        im = ax.imshow(data, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_title(f"head {k}" if H > 1 else "H = 1", fontsize=9)
        if annotate:
            for r in range(W.shape[1]):
                for c in range(W.shape[2]):
                    v = W[k, r, c]
                    if not np.isnan(v):
                        ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=5,
                                color="white" if v < 0.6 * vmax else "black")
        ax.set_xticks(range(len(m.columns)))
        ax.set_xticklabels(m.columns, rotation=90, fontsize=6)
        ax.set_yticks(range(len(m.sites)))
        ax.set_yticklabels(m.sites, fontsize=6)
        if k % ncols == 0:
            ax.set_ylabel("routing site", fontsize=8)
        if k // ncols == nrows - 1:
            ax.set_xlabel("source", fontsize=8)
    fig.suptitle((m.title + ": " if m.title else "") + f"token-averaged routing weights ({m.tokens} tokens)",
                 fontsize=10)
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="weight" + (f" (scale capped at {vmax:.2f})" if vmax < 1 else ""))
    return fig
