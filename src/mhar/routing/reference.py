"""The depth read in plain PyTorch: the definition every fast path is checked against.

One routing site owns a pseudo-query ``q`` (d,) and a key RMSNorm weight ``g`` (d,).
Over sources ``s_0 .. s_{N-1}`` (each ``(..., d)``), with ``H`` heads of width ``d/H``::

    k_i      = RMSNorm_g(s_i)            # over the full width d, eps 1e-6
    z_i^(h)  = q[h] . k_i[h]             # no 1/sqrt(d) scale
    alpha^(h) = softmax_i(z^(h))
    x[h]     = sum_i alpha_i^(h) s_i[h]

The two-phase pieces split the softmax over sources into partial reads that return,
per query and head, the running max ``m``, the normaliser ``l`` and the unnormalised
output ``o``; :func:`merge_partials` combines two of them exactly (online softmax) and
:func:`finalize` divides.

Memory: sources are taken as a sequence of tensors (or one stacked tensor, read as
views) and are never stacked or copied. The partial read is an autograd Function
that saves only the sources (by reference), the queries, the norm weights and the
per-head max; backward recomputes the norm and the softmax. So a model that keeps
its sources once keeps them once, whatever the number of sites reading them.

All softmax arithmetic is fp32 (fp64 when the inputs are fp64), whatever the input
dtype.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

KEY_NORM_EPS = 1e-6

Sources = Sequence[Tensor] | Tensor


class Partial(NamedTuple):
    """An unnormalised partial read: per query s, token t and head h.

    m: (S, M, H) running max of the logits (treated as a constant by autograd: the
       final read does not depend on it).
    l: (S, M, H) sum of exp(z - m).
    o: (S, M, d) sum of exp(z - m) * source, head h in columns [h*dh, (h+1)*dh).
    """

    m: Tensor
    l: Tensor
    o: Tensor


def _compute_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _as_list(sources: Sources) -> list[Tensor]:
    if isinstance(sources, Tensor):
        return list(sources.unbind(0))  # views, no copy
    return list(sources)


def check_heads(d: int, heads: int) -> int:
    if isinstance(heads, bool) or not isinstance(heads, int):
        raise ValueError(f"heads must be an int, got {heads!r}")
    if heads < 1 or d % heads != 0:
        raise ValueError(f"heads={heads} must be a positive divisor of the width d={d}")
    return d // heads


def _key_logits(s: Tensor, weighted_queries: Tensor, heads: int, eps: float) -> tuple[Tensor, Tensor]:
    """Logits of S queries against one source. s: (M, d) in compute dtype;
    weighted_queries: (S, d) = q * g. Returns z (S, M, H) and rstd (M, 1)."""
    M, d = s.shape
    rstd = torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    u = (s * rstd).view(M, heads, d // heads)
    w = weighted_queries.view(-1, heads, d // heads)
    z = torch.einsum("mhe,she->smh", u, w)
    return z, rstd


class _PartialRead(torch.autograd.Function):
    """Partial read of S queries over N sources; see :func:`route_partial`."""

    @staticmethod
    def forward(ctx, queries: Tensor, norm_weights: Tensor, heads: int, eps: float, *sources: Tensor):
        ct = _compute_dtype(sources[0])
        S, d = queries.shape
        M = sources[0].numel() // d
        w = (queries.to(ct) * norm_weights.to(ct))
        logits = torch.stack([_key_logits(s.reshape(M, d).to(ct), w, heads, eps)[0] for s in sources])
        m = logits.amax(0)  # (S, M, H)
        p = torch.exp(logits - m)  # (N, S, M, H)
        l = p.sum(0)
        o = torch.zeros(S, M, heads, d // heads, dtype=ct, device=queries.device)
        for i, s in enumerate(sources):
            o += p[i].unsqueeze(-1) * s.reshape(M, heads, d // heads).to(ct)
        ctx.save_for_backward(queries, norm_weights, m, *sources)
        ctx.heads, ctx.eps = heads, eps
        ctx.mark_non_differentiable(m)
        return m, l, o.view(S, M, d)

    @staticmethod
    @once_differentiable  # its backward is not itself differentiable: a second order is an error
    def backward(ctx, grad_m, grad_l, grad_o):
        queries, norm_weights, m, *sources = ctx.saved_tensors
        heads, eps = ctx.heads, ctx.eps
        ct = m.dtype
        S, d = queries.shape
        M = m.shape[1]
        dh = d // heads
        q, g = queries.to(ct), norm_weights.to(ct)
        w = q * g
        grad_l = torch.zeros_like(m) if grad_l is None else grad_l.to(ct)
        grad_o = torch.zeros(S, M, d, dtype=ct, device=m.device) if grad_o is None else grad_o.to(ct)
        go = grad_o.view(S, M, heads, dh)
        grad_w = torch.zeros(S, heads, dh, dtype=ct, device=m.device)
        grad_sources = []
        for s in sources:
            x = s.reshape(M, d).to(ct)
            z, rstd = _key_logits(x, w, heads, eps)
            p = torch.exp(z - m)  # (S, M, H)
            xh = x.view(M, heads, dh)
            # dL/dz = p * (grad_o . s + grad_l)
            dz = p * (torch.einsum("smhe,mhe->smh", go, xh) + grad_l)
            u = (x * rstd).view(M, heads, dh)
            grad_w += torch.einsum("smh,mhe->she", dz, u)
            # through the normalised key u = s * rstd
            du = torch.einsum("smh,she->mhe", dz, w.view(S, heads, dh)).reshape(M, d)
            un = u.reshape(M, d)
            dx = rstd * (du - un * (du * un).mean(-1, keepdim=True))
            # through the value
            dx = dx + torch.einsum("smh,smhe->mhe", p, go).reshape(M, d)
            grad_sources.append(dx.view(s.shape).to(s.dtype))
        grad_w = grad_w.view(S, d)
        grad_q = (grad_w * g).to(queries.dtype)
        grad_g = (grad_w * q).to(norm_weights.dtype)
        return (grad_q, grad_g, None, None, *grad_sources)


def route_partial(sources: Sources, queries: Tensor, norm_weights: Tensor, heads: int = 1,
                  eps: float = KEY_NORM_EPS) -> Partial:
    """Phase 1 of the two-phase read: S queries over the same N sources, each source
    read once. ``queries`` and ``norm_weights`` are (S, d) (one row per routing site);
    each source is (..., d) with the same leading shape. Returns a :class:`Partial`
    with M = number of tokens (the product of the leading dims)."""
    srcs = _as_list(sources)
    if not srcs:
        raise ValueError("route needs at least one source")
    if queries.dim() != 2 or norm_weights.shape != queries.shape:
        raise ValueError(f"queries and norm_weights must both be (S, d); got {tuple(queries.shape)} "
                         f"and {tuple(norm_weights.shape)}")
    d = queries.shape[1]
    check_heads(d, heads)
    lead = srcs[0].shape
    for s in srcs:
        if s.shape != lead or s.shape[-1] != d:
            raise ValueError(f"every source must have shape {tuple(lead)} with last dim d={d}; got {tuple(s.shape)}")
    m, l, o = _PartialRead.apply(queries, norm_weights, heads, eps, *srcs)
    return Partial(m, l, o)


def merge_partials(a: Partial, b: Partial) -> Partial:
    """Exact online-softmax merge of two partial reads over disjoint source sets."""
    m = torch.maximum(a.m, b.m)
    ea, eb = torch.exp(a.m - m), torch.exp(b.m - m)
    l = ea * a.l + eb * b.l
    S, M, H = m.shape
    d = a.o.shape[-1]
    o = (ea.unsqueeze(-1) * a.o.view(S, M, H, d // H) + eb.unsqueeze(-1) * b.o.view(S, M, H, d // H)).view(S, M, d)
    return Partial(m, l, o)


def finalize(p: Partial, shape: torch.Size | tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """Normalise a partial read: x = o / l, reshaped to (S, *shape) in ``dtype``."""
    S, M, H = p.l.shape
    d = p.o.shape[-1]
    x = (p.o.view(S, M, H, d // H) / p.l.unsqueeze(-1)).view(S, *shape)
    return x.to(dtype)


def route(sources: Sources, query: Tensor, norm_weight: Tensor, heads: int = 1,
          eps: float = KEY_NORM_EPS) -> Tensor:
    """One routing site: read N sources with H heads. ``query``, ``norm_weight``: (d,).
    Each source (..., d). Returns (..., d) in the sources' dtype."""
    srcs = _as_list(sources)
    if not srcs:
        raise ValueError("route needs at least one source")
    p = route_partial(srcs, query.view(1, -1), norm_weight.view(1, -1), heads, eps)
    return finalize(p, srcs[0].shape, srcs[0].dtype)[0]


def routing_weights(sources: Sources, query: Tensor, norm_weight: Tensor, heads: int = 1,
                    eps: float = KEY_NORM_EPS) -> Tensor:
    """The softmax weights alpha (..., H, N) of one site, for analysis (no custom backward)."""
    srcs = _as_list(sources)
    d = query.shape[-1]
    check_heads(d, heads)
    ct = _compute_dtype(srcs[0])
    lead = srcs[0].shape[:-1]
    w = (query.to(ct) * norm_weight.to(ct)).view(1, d)
    z = torch.stack([_key_logits(s.reshape(-1, d).to(ct), w, heads, eps)[0][0] for s in srcs], -1)
    return torch.softmax(z, -1).view(*lead, heads, len(srcs))
