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
Offsets are int64 (``_block``), so sizes past 2^31 elements are addressed correctly.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mhar.backends import fix_interpreter_index

fix_interpreter_index()


@triton.jit
def _streams(ptr, stride_s, rs, offs, mask_s, mask_k):
    """The (NP, BLOCK) tile of n streams at ``offs``, stream s at ``ptr + s * stride_s``."""
    return tl.load(ptr + rs[:, None].to(tl.int64) * stride_s + offs[None, :], mask=mask_s[:, None] & mask_k[None, :],
                   other=0.0).to(tl.float32)


@triton.jit
def _block(K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """This program's block of stream elements and the stream rows, with their masks, and
    the row length as int64 (row offsets t * K past 2^31 elements)."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    rs = tl.arange(0, NP)
    return pid, offs, offs < K, rs, rs < N, tl.cast(K, tl.int64)


@triton.jit
def _row(ptr, offs, mask_k):
    """One stream-sized row's block at ``offs``, in fp32."""
    return tl.load(ptr + offs, mask=mask_k, other=0.0).to(tl.float32)


@triton.jit
def _alpha_col(A, c, rs, mask_s, N: tl.constexpr):
    """Column c of alpha (N, 1 + N) over the streams s, padded to NP."""
    return tl.load(A + rs * (N + 1) + c, mask=mask_s, other=0.0)


# Each kernel holds the (NP, BLOCK) tile of the streams it reads more than once and loops
# over the output streams t with a static (unrolled) loop, a (BLOCK,) row at a time: no
# (NP, NP, BLOCK) products, whose registers made the first version (BLOCK 256) run at
# 4-5x its bytes' time on the H200.

@triton.jit
def _mix_fwd_kernel(X, stride_x, A, XOUT, MIXED, K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """x = sum_s A[s, 0] X_s (into XOUT) and mixed_t = sum_s A[s, 1 + t] X_s (into MIXED,
    row t at t * K)."""
    pid, offs, mask_k, rs, mask_s, K64 = _block(K, N, NP, BLOCK)
    x = _streams(X, stride_x, rs, offs, mask_s, mask_k)                                    # (NP, BLOCK)
    a0 = _alpha_col(A, 0, rs, mask_s, N)
    tl.store(XOUT + offs, tl.sum(a0[:, None] * x, axis=0).to(XOUT.dtype.element_ty), mask=mask_k)
    for t in tl.static_range(N):
        at = _alpha_col(A, 1 + t, rs, mask_s, N)
        tl.store(MIXED + t * K64 + offs, tl.sum(at[:, None] * x, axis=0).to(MIXED.dtype.element_ty), mask=mask_k)


@triton.jit
def _mix_bwd_kernel(X, stride_x, A, GX, GM, DX, P0, PM, K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """DX_s = A[s, 0] GX + sum_t A[s, 1 + t] GM_t; this program's partial sums of alpha's
    gradient: P0[pid, s] = sum_k X_s GX and PM[pid, s, t] = sum_k X_s GM_t (t < N; the
    padded columns are left unwritten)."""
    pid, offs, mask_k, rs, mask_s, K64 = _block(K, N, NP, BLOCK)
    x = _streams(X, stride_x, rs, offs, mask_s, mask_k)                                    # (NP s, BLOCK)
    gx = _row(GX, offs, mask_k)
    dx = _alpha_col(A, 0, rs, mask_s, N)[:, None] * gx[None, :]
    tl.store(P0 + pid * NP + rs, tl.sum(x * gx[None, :], axis=1))
    for t in tl.static_range(N):
        gm = _row(GM + t * K64, offs, mask_k)
        dx += _alpha_col(A, 1 + t, rs, mask_s, N)[:, None] * gm[None, :]
        tl.store(PM + pid * NP * NP + rs * NP + t, tl.sum(x * gm[None, :], axis=1))
    tl.store(DX + rs[:, None] * K64 + offs[None, :], dx.to(DX.dtype.element_ty), mask=mask_s[:, None] & mask_k[None, :])


@triton.jit
def _update_fwd_kernel(MIXED, B, Y, OUT, K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """OUT_t = MIXED_t + B[t] Y."""
    pid, offs, mask_k, rs, mask_s, K64 = _block(K, N, NP, BLOCK)
    y = _row(Y, offs, mask_k)
    for t in tl.static_range(N):
        out = _row(MIXED + t * K64, offs, mask_k) + tl.load(B + t) * y
        tl.store(OUT + t * K64 + offs, out.to(OUT.dtype.element_ty), mask=mask_k)


@triton.jit
def _update_bwd_kernel(G, B, Y, DY, PB, K, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    """DY = sum_t B[t] G_t; this program's partial sums of beta's gradient,
    PB[pid, t] = sum_k G_t Y (t < N). (The mixed streams' gradient is G itself.)"""
    pid, offs, mask_k, rs, mask_s, K64 = _block(K, N, NP, BLOCK)
    y = _row(Y, offs, mask_k)
    dy = tl.zeros([BLOCK], tl.float32)
    for t in tl.static_range(N):
        g = _row(G + t * K64, offs, mask_k)
        dy += tl.load(B + t) * g
        tl.store(PB + pid * NP + t, tl.sum(g * y, axis=0))
    tl.store(DY + offs, dy.to(DY.dtype.element_ty), mask=mask_k)
