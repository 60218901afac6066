"""The disagreement probe (SPEC.md section 4).

**Single-head models (H = 1): subspace disagreement.** At each routing site, with
query ``q`` (d,), key-norm weight ``g`` and sources ``s_1..s_N``, the normalised keys
are ``k_i = RMSNorm_g(s_i)`` (full width, as the model computes them). Split ``q`` and
every ``k_i`` into ``S`` contiguous slices of width d/S. Slice ``j`` alone would route
with ``p_j = softmax_i(q[j] . k_i[j])``; the model routes with the shared
``p = softmax_i(q . k_i) = softmax_i(sum_j q[j] . k_i[j])``. The site's score is

    D(q) = mean over tokens and slices of KL(p_j || p) = sum_i p_j,i (log p_j,i - log p_i)

(KL *of each slice from the shared distribution*: the expectation is under the
slice's own distribution.) The null replaces ``q`` by a random query of the same
Euclidean norm (``r ~ N(0, I)``, rescaled to ``||q||``; same keys, same ``g``), averaged
over ``draws`` draws from a generator seeded with ``seed`` (one draw per site, shared by
all tokens). Learned excess = D(q) - mean D(r).

Note that perfect agreement (every p_j equal to p) forces uniform routing: if
``softmax(z_j) = softmax(sum z)`` for every j, then ``z_j = sum z + c_j``; summing over j
gives ``sum z`` constant across sources. So the score is zero exactly when the site
routes uniformly (e.g. zero-initialised queries), and the null, not zero, is what
"no learned disagreement" looks like for a routing site that has moved off uniform.

**Multi-head models (H > 1): head disagreement.** Each head already routes with its
own softmax ``a_h``. Per site: the head consensus ``c = mean_h a_h`` (per token), each
head's deviation ``mean_tokens KL(a_h || c)``, the same mean deviation for a random
query of matched norm (the null) and its excess, and the head-to-head correlation:
the Pearson correlation of two heads' weights over all (token, source) pairs; the
table gives its mean over head pairs.

Sites that read a single source (sublayer 0) route trivially: they are listed but
left out of the overall means.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Iterable

import torch
from torch import Tensor, nn

from mhar.analysis.capture import Site, capture_sites, routing_stream
from mhar.routing.reference import KEY_NORM_EPS, check_heads


def normalised_keys(sources: list[Tensor], norm_weight: Tensor) -> Tensor:
    """RMSNorm_g of every source over the full width: (M, N, d) fp32, M = tokens."""
    d = norm_weight.shape[-1]
    s = torch.stack([x.reshape(-1, d).float() for x in sources], 1)
    return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + KEY_NORM_EPS) * norm_weight.float()


def slice_disagreement(keys: Tensor, query: Tensor, slices: int) -> Tensor:
    """Per-token mean over slices of KL(p_slice || p_shared): (M,). keys (M, N, d), query (d,)."""
    M, N, d = keys.shape
    check_heads(d, slices)
    z = torch.einsum("mnsw,sw->msn", keys.view(M, N, slices, d // slices), query.float().view(slices, -1))
    log_slice = torch.log_softmax(z, -1)
    log_shared = torch.log_softmax(z.sum(1), -1).unsqueeze(1)
    return (log_slice.exp() * (log_slice - log_shared)).sum(-1).mean(-1)


def head_weights(keys: Tensor, query: Tensor, heads: int) -> Tensor:
    """Routing weights (M, H, N) from normalised keys."""
    M, N, d = keys.shape
    z = torch.einsum("mnhw,hw->mhn", keys.view(M, N, heads, d // heads), query.float().view(heads, -1))
    return torch.softmax(z, -1)


def head_deviation(weights: Tensor) -> Tensor:
    """KL(a_h || consensus) per token and head: (M, H)."""
    c = weights.mean(1, keepdim=True)
    a = weights.clamp_min(1e-30)
    return (weights * (a.log() - c.clamp_min(1e-30).log())).sum(-1)


def head_correlation(weights: Tensor) -> Tensor:
    """(H, H) Pearson correlation of heads' weights over (token, source) pairs."""
    acc = _CorrAccumulator(weights.shape[1])
    acc.add(weights)
    return acc.value()


class _CorrAccumulator:
    """Running sums for the heads' correlation over (token, source) pairs, so that no
    weights are kept across batches."""

    def __init__(self, heads: int):
        self.n = 0
        self.s1 = torch.zeros(heads, dtype=torch.float64)
        self.s2 = torch.zeros(heads, heads, dtype=torch.float64)

    def add(self, weights: Tensor) -> None:
        M, H, N = weights.shape
        x = weights.permute(1, 0, 2).reshape(H, M * N).double().cpu()
        self.n += M * N
        self.s1 += x.sum(1)
        self.s2 += x @ x.T

    def value(self) -> Tensor:
        mean = self.s1 / self.n
        cov = self.s2 / self.n - mean[:, None] * mean[None, :]
        std = cov.diagonal().clamp_min(0).sqrt()
        corr = cov / (std[:, None] * std[None, :])
        corr[(std[:, None] < 1e-12) | (std[None, :] < 1e-12)] = float("nan")  # a constant head
        return corr.float()


def random_queries(query: Tensor, draws: int, generator: torch.Generator) -> Tensor:
    """``draws`` isotropic random queries with the norm of ``query``: (draws, d)."""
    r = torch.randn(draws, query.shape[-1], generator=generator, dtype=torch.float64)
    r = r / r.norm(dim=-1, keepdim=True) * query.double().norm()
    return r.float()


@dataclass
class SiteProbe:
    index: int
    name: str
    num_sources: int
    query_norm: float
    learned: float           # H=1: mean slice KL; H>1: mean head deviation
    null: float
    null_std: float          # std of the null over draws
    excess: float
    head_deviation: list[float] = field(default_factory=list)   # H>1: per head
    head_correlation: float = float("nan")                       # H>1: mean over head pairs
    trivial: bool = False    # a single source: routing is trivial


@dataclass
class ProbeResult:
    kind: str                # "slices" (H = 1) or "heads" (H > 1)
    heads: int
    slices: int
    draws: int
    seed: int
    tokens: int
    sites: list[SiteProbe]
    overall: dict
    correlation_matrix: list[list[float]] = field(default_factory=list)  # H>1: mean over sites
    run: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(_finite(self.to_dict()), indent=2)

    def to_markdown(self) -> str:
        return probe_markdown(self)


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def _fmt(x: float | None, nd: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{nd}f}"


def probe_markdown(r: ProbeResult) -> str:
    lines = []
    if r.kind == "slices":
        lines.append(f"Disagreement probe (H = 1, S = {r.slices} slices, KL(slice || shared), "
                     f"null: {r.draws} random queries of matched norm, seed {r.seed}; {r.tokens} tokens)")
        lines.append("")
        lines.append("| site | sources | query norm | learned KL | null KL | learned excess |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        for s in r.sites:
            t = " (trivial)" if s.trivial else ""
            lines.append(f"| {s.index} {s.name}{t} | {s.num_sources} | {_fmt(s.query_norm, 3)} | {_fmt(s.learned)} | "
                         f"{_fmt(s.null)} ± {_fmt(s.null_std)} | {_fmt(s.excess)} |")
        o = r.overall
        lines.append(f"| **overall** ({o['sites']} sites) | | | **{_fmt(o['learned'])}** | **{_fmt(o['null'])}** | "
                     f"**{_fmt(o['excess'])}** |")
    else:
        lines.append(f"Head disagreement (H = {r.heads}: KL(head || head consensus), null: {r.draws} random "
                     f"queries of matched norm, seed {r.seed}; {r.tokens} tokens)")
        lines.append("")
        hcols = " | ".join(f"h{h}" for h in range(r.heads))
        lines.append(f"| site | sources | query norm | mean deviation | null | excess | head corr. | {hcols} |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|" + "---:|" * r.heads)
        for s in r.sites:
            t = " (trivial)" if s.trivial else ""
            per = " | ".join(_fmt(v) for v in s.head_deviation) if s.head_deviation else " | ".join(["n/a"] * r.heads)
            lines.append(f"| {s.index} {s.name}{t} | {s.num_sources} | {_fmt(s.query_norm, 3)} | {_fmt(s.learned)} | "
                         f"{_fmt(s.null)} ± {_fmt(s.null_std)} | {_fmt(s.excess)} | {_fmt(s.head_correlation, 3)} | {per} |")
        o = r.overall
        per = " | ".join(_fmt(v) for v in o["head_deviation"])
        lines.append(f"| **overall** ({o['sites']} sites) | | | **{_fmt(o['learned'])}** | **{_fmt(o['null'])}** | "
                     f"**{_fmt(o['excess'])}** | **{_fmt(o['head_correlation'], 3)}** | {per} |")
        if r.correlation_matrix:
            lines += ["", "Head-to-head correlation (mean over non-trivial sites):", "",
                      "| | " + hcols + " |", "|---|" + "---:|" * r.heads]
            for h, row in enumerate(r.correlation_matrix):
                lines.append(f"| h{h} | " + " | ".join(_fmt(v, 3) for v in row) + " |")
    return "\n".join(lines) + "\n"


class _SiteAccumulator:
    """Token-weighted sums of the per-site statistics over batches."""

    def __init__(self, draws: int):
        self.tokens = 0
        self.learned = 0.0
        self.null = torch.zeros(draws, dtype=torch.float64)
        self.head_dev: Tensor | None = None
        self.corr: _CorrAccumulator | None = None  # H > 1
        self.meta: tuple | None = None


def probe_sites(batches: Iterable[list[Site]], slices: int = 4, draws: int = 8, seed: int = 0) -> ProbeResult:
    """Run the probe over captured sites (one list of :class:`Site` per batch). The
    null queries are drawn once per site (generator seeded with ``seed``) and reused
    for every batch."""
    if draws < 1:
        raise ValueError(f"draws={draws} must be >= 1")
    if slices < 2:
        raise ValueError(f"slices={slices} must be >= 2")
    acc: dict[int, _SiteAccumulator] = {}
    nulls: dict[int, Tensor] = {}
    heads = None
    gen = torch.Generator().manual_seed(seed)
    for sites in batches:
        for site in sites:
            if heads is None:
                heads = site.heads
            d = site.query.shape[-1]
            if heads == 1 and d % slices:
                raise ValueError(f"slices={slices} must divide the width d={d}")
            if site.index not in nulls:
                nulls[site.index] = random_queries(site.query.cpu(), draws, gen).to(site.query.device)
                acc[site.index] = _SiteAccumulator(draws)
            a = acc[site.index]
            keys = normalised_keys(site.sources, site.norm_weight)
            M = keys.shape[0]
            a.tokens += M
            a.meta = (site.name, len(site.sources), float(site.query.float().norm()))
            if heads == 1:
                a.learned += float(slice_disagreement(keys, site.query, slices).double().sum())
                for k, r in enumerate(nulls[site.index]):
                    a.null[k] += float(slice_disagreement(keys, r, slices).double().sum())
            else:
                w = head_weights(keys, site.query, heads)
                dev = head_deviation(w).double().sum(0).cpu()
                a.head_dev = dev if a.head_dev is None else a.head_dev + dev
                a.learned += float(dev.mean())
                if a.corr is None:
                    a.corr = _CorrAccumulator(heads)
                a.corr.add(w)
                for k, r in enumerate(nulls[site.index]):
                    a.null[k] += float(head_deviation(head_weights(keys, r, heads)).double().mean(-1).sum())
    if heads is None:
        raise ValueError("the probe got no tokens")
    rows = []
    corr_mats = []
    for index in sorted(acc):
        a = acc[index]
        name, n_src, qn = a.meta
        null = a.null / a.tokens
        row = SiteProbe(index, name, n_src, qn, a.learned / a.tokens, float(null.mean()),
                        float(null.std()) if draws > 1 else 0.0, a.learned / a.tokens - float(null.mean()),
                        trivial=n_src < 2)
        if heads > 1:
            row.head_deviation = [float(v) for v in a.head_dev / a.tokens]
            if n_src >= 2:
                c = a.corr.value()
                off = c[~torch.eye(heads, dtype=torch.bool)]
                row.head_correlation = float(off.nanmean()) if off.isfinite().any() else float("nan")
                corr_mats.append(c)
        rows.append(row)
    used = [r for r in rows if not r.trivial] or rows
    overall = {"sites": len(used),
               "learned": sum(r.learned for r in used) / len(used),
               "null": sum(r.null for r in used) / len(used),
               "excess": sum(r.excess for r in used) / len(used)}
    matrix: list[list[float]] = []
    if heads > 1:
        overall["head_deviation"] = [sum(r.head_deviation[h] for r in used) / len(used) for h in range(heads)]
        corrs = [r.head_correlation for r in used if math.isfinite(r.head_correlation)]
        overall["head_correlation"] = sum(corrs) / len(corrs) if corrs else float("nan")
        if corr_mats:
            matrix = torch.stack(corr_mats).nanmean(0).tolist()
    return ProbeResult("slices" if heads == 1 else "heads", heads, slices if heads == 1 else heads, draws, seed,
                       acc[min(acc)].tokens, rows, overall, matrix)


@torch.no_grad()
def probe_model(model: nn.Module, batches: Iterable[Tensor], slices: int = 4, draws: int = 8,
                seed: int = 0) -> ProbeResult:
    """The probe on a model over token batches (each (B, T) input ids)."""
    routing_stream(model)
    was_training = model.training
    model.eval()
    try:
        return probe_sites((capture_sites(model, ids) for ids in batches), slices, draws, seed)
    finally:
        model.train(was_training)
