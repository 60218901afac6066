"""Triton kernels for the hyper-connection stream's glue, forward and backward.

Per sublayer the static hyper-connection stream mixes its n streams (n x K elements,
K = tokens x d) with alpha (n, 1 + n) and, after the sublayer, adds beta (n) times the
sublayer's output. As one contraction and broadcast ops this glue took about 10x its
bytes' time on an H200 (``bench/hyper_mix.py``); likely, though not profiled, because
the contraction's alpha gradient is a matrix product with K as its inner dimension.
Here every pass is one kernel over
blocks of K: each program reads its block of every stream once, and the alpha and beta
gradients are per-program partial sums, added up by torch afterwards (no atomics, so
the gradients are reproducible).

Tiles are (NP, BLOCK) with NP the stream count rounded up to a power of two; padded
rows are masked. Arithmetic is fp32; outputs take the dtype the caller asks for.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _streams(ptr, stride_s, rs, offs, mask_s, mask_k):
    """The (NP, BLOCK) tile of n streams at ``offs``, stream s at ``ptr + s * stride_s``."""
    return tl.load(ptr + rs[:, None] * stride_s + offs[None, :], mask=mask_s[:, None] & mask_k[None, :],
                   other=0.0).to(tl.float32)


@triton.jit
def _block(K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """This program's block of stream elements and the stream rows, with their masks."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    rs = tl.arange(0, NP)
    return pid, offs, offs < K, rs, rs < N


@triton.jit
def _alpha(A, rs, mask_s, N: tl.constexpr):
    """alpha (N, 1 + N) as its column 0 (NP,) and its mixing block (NP s, NP t)."""
    a0 = tl.load(A + rs * (N + 1), mask=mask_s, other=0.0)
    am = tl.load(A + rs[:, None] * (N + 1) + 1 + rs[None, :], mask=mask_s[:, None] & mask_s[None, :], other=0.0)
    return a0, am


@triton.jit
def _mix_fwd_kernel(X, stride_x, A, XOUT, MIXED, K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """x = sum_s A[s, 0] X_s (into XOUT) and mixed_t = sum_s A[s, 1 + t] X_s (into MIXED,
    row t at t * K)."""
    pid, offs, mask_k, rs, mask_s = _block(K, N, NP, BLOCK)
    x = _streams(X, stride_x, rs, offs, mask_s, mask_k)                                    # (NP, BLOCK)
    a0, am = _alpha(A, rs, mask_s, N)
    tl.store(XOUT + offs, tl.sum(a0[:, None] * x, axis=0).to(XOUT.dtype.element_ty), mask=mask_k)
    mixed = tl.sum(am[:, :, None] * x[:, None, :], axis=0)                                 # (NP t, BLOCK)
    tl.store(MIXED + rs[:, None] * K + offs[None, :], mixed.to(MIXED.dtype.element_ty),
             mask=mask_s[:, None] & mask_k[None, :])


@triton.jit
def _mix_bwd_kernel(X, stride_x, A, GX, GM, DX, P0, PM, K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """DX_s = A[s, 0] GX + sum_t A[s, 1 + t] GM_t; this program's partial sums of alpha's
    gradient: P0[pid, s] = sum_k X_s GX and PM[pid, s, t] = sum_k X_s GM_t."""
    pid, offs, mask_k, rs, mask_s = _block(K, N, NP, BLOCK)
    x = _streams(X, stride_x, rs, offs, mask_s, mask_k)
    gx = tl.load(GX + offs, mask=mask_k, other=0.0).to(tl.float32)                         # (BLOCK,)
    gm = _streams(GM, K, rs, offs, mask_s, mask_k)                                         # (NP t, BLOCK)
    a0, am = _alpha(A, rs, mask_s, N)
    dx = a0[:, None] * gx[None, :] + tl.sum(am[:, :, None] * gm[None, :, :], axis=1)        # (NP s, BLOCK)
    tl.store(DX + rs[:, None] * K + offs[None, :], dx.to(DX.dtype.element_ty), mask=mask_s[:, None] & mask_k[None, :])
    tl.store(P0 + pid * NP + rs, tl.sum(x * gx[None, :], axis=1))
    pm = tl.sum(x[:, None, :] * gm[None, :, :], axis=2)                                    # (NP s, NP t)
    tl.store(PM + pid * NP * NP + rs[:, None] * NP + rs[None, :], pm)


@triton.jit
def _update_fwd_kernel(MIXED, B, Y, OUT, K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """OUT_t = MIXED_t + B[t] Y."""
    pid, offs, mask_k, rs, mask_s = _block(K, N, NP, BLOCK)
    m = _streams(MIXED, K, rs, offs, mask_s, mask_k)
    y = tl.load(Y + offs, mask=mask_k, other=0.0).to(tl.float32)
    b = tl.load(B + rs, mask=mask_s, other=0.0)
    tl.store(OUT + rs[:, None] * K + offs[None, :], (m + b[:, None] * y[None, :]).to(OUT.dtype.element_ty),
             mask=mask_s[:, None] & mask_k[None, :])


@triton.jit
def _update_bwd_kernel(G, B, Y, DY, PB, K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """DY = sum_t B[t] G_t; this program's partial sums of beta's gradient,
    PB[pid, t] = sum_k G_t Y. (The mixed streams' gradient is G itself.)"""
    pid, offs, mask_k, rs, mask_s = _block(K, N, NP, BLOCK)
    g = _streams(G, K, rs, offs, mask_s, mask_k)
    y = tl.load(Y + offs, mask=mask_k, other=0.0).to(tl.float32)
    b = tl.load(B + rs, mask=mask_s, other=0.0)
    tl.store(DY + offs, tl.sum(b[:, None] * g, axis=0).to(DY.dtype.element_ty), mask=mask_k)
    tl.store(PB + pid * NP + rs, tl.sum(g * y[None, :], axis=1))
