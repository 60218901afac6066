"""Fused Triton kernels for the depth read (forward, backward, one-pass and phase-1).

Layout. A source is read as a tile ``(BM tokens, HP heads, DHP columns)``: ``HP`` and
``DHP`` are the head count and head width rounded up to powers of two, and masked
loads keep the padded lanes at zero (so any ``H`` dividing ``d`` and any head width
works, ``d = 1`` and ``d = 123`` included, without moving padded bytes).

Sources are never stacked: the kernels take a device table of the sources' data
pointers (int64) and cast each entry to a typed pointer in-kernel. Gradients for the
sources are written the same way, through a table of the N freshly allocated
gradient tensors, so peak memory is one copy of the sources and one of their
gradients.

Forward (``_fwd_kernel``): grid ``(S, token tiles)``, the query index fastest, so the
S programs that read the same token tile run side by side and share it in L2: each
source is read from device memory about once per chunk of S queries. fp32 online
softmax over sources with the full-width key RMSNorm fused in. ``FINAL`` programs
(one query, the plain ``route``) normalise in-kernel and write the read in the
sources' dtype plus the per-head log-sum-exp; phase-1 programs write ``(m, l, o)``.

Both kernels prefetch: the next ``PF`` (1 or 2) sources' tiles, and the pointer after
them, are in flight while the current tile is reduced.

Backward (``_bwd_kernel``): a fixed number of programs (persistent over token tiles).
Each reads every source once per tile, recomputes the norm and the softmax weights
from the saved per-head statistic, and writes that source's gradient once (all
queries summed in registers; the norm's backward folded into three reductions per
source and query). The query/norm-weight gradient ``dw = d(q*g)`` is
reduced per program into its own row of a ``(programs, S, d)`` buffer and summed
afterwards by torch: no atomics, so gradients are bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _fwd_kernel(table, ref, W, OUT_M, OUT_L, OUT_O,
                n_src, n_tok, d, dh, eps,
                H: tl.constexpr, HP: tl.constexpr, DHP: tl.constexpr, BM: tl.constexpr,
                FINAL: tl.constexpr, PF: tl.constexpr = 1):
    s = tl.program_id(0)
    tile = tl.program_id(1)
    elem = ref.dtype.element_ty
    rm = tile * BM + tl.arange(0, BM)
    rh = tl.arange(0, HP)
    re = tl.arange(0, DHP)
    col = rh[:, None] * dh + re[None, :]                       # (HP, DHP)
    cmask = (rh[:, None] < H) & (re[None, :] < dh)
    mmask = rm < n_tok
    offs = rm.to(tl.int64)[:, None, None] * d + col[None, :, :]  # (BM, HP, DHP)
    mask = mmask[:, None, None] & cmask[None, :, :]
    w = tl.load(W + s * d + col, mask=cmask, other=0.0).to(tl.float32)

    m_i = tl.full([BM, HP], float("-inf"), tl.float32)
    l_i = tl.zeros([BM, HP], tl.float32)
    acc = tl.zeros([BM, HP, DHP], tl.float32)
    # software prefetch: the next source's tile (and the pointer after it) is in
    # flight while the current one is reduced
    # (PF = 2: two tiles ahead)
    zero3 = rm[:, None, None] * 0
    x_next = tl.load(tl.load(table).to(tl.pointer_type(elem)) + offs, mask=mask, other=0.0)
    if PF == 2:
        x_next2 = tl.load(tl.load(table + tl.minimum(1, n_src - 1)).to(tl.pointer_type(elem)) + offs,
                          mask=mask & ((zero3 + 1) < n_src), other=0.0)
    else:
        x_next2 = x_next
    p_next = tl.load(table + tl.minimum(PF, n_src - 1)).to(tl.pointer_type(elem))
    for i in range(n_src):
        x = x_next.to(tl.float32)
        if PF == 2:
            x_next = x_next2
            x_next2 = tl.load(p_next + offs, mask=mask & ((zero3 + i + 2) < n_src), other=0.0)
        else:
            x_next = tl.load(p_next + offs, mask=mask & ((zero3 + i + 1) < n_src), other=0.0)
        p_next = tl.load(table + tl.minimum(i + PF + 1, n_src - 1)).to(tl.pointer_type(elem))
        ss = tl.sum(tl.sum(x * x, axis=2), axis=1)             # (BM,)
        rstd = 1.0 / tl.sqrt(ss / d + eps)
        z = tl.sum(x * w[None, :, :], axis=2) * rstd[:, None]  # (BM, HP)
        m_new = tl.maximum(m_i, z)
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(z - m_new)
        l_i = l_i * alpha + p
        acc = acc * alpha[:, :, None] + p[:, :, None] * x
        m_i = m_new

    hmask = mmask[:, None] & (rh[None, :] < H)
    hoffs = rm.to(tl.int64)[:, None] * H + rh[None, :]
    if FINAL:
        # OUT_O: the read (n_tok, d) in the sources' dtype; OUT_M: log-sum-exp (n_tok, H)
        y = acc / l_i[:, :, None]
        tl.store(OUT_O + offs, y.to(OUT_O.dtype.element_ty), mask=mask)
        tl.store(OUT_M + hoffs, m_i + tl.log(l_i), mask=hmask)
    else:
        base_h = s.to(tl.int64) * n_tok * H
        base_o = s.to(tl.int64) * n_tok * d
        tl.store(OUT_M + base_h + hoffs, m_i, mask=hmask)
        tl.store(OUT_L + base_h + hoffs, l_i, mask=hmask)
        tl.store(OUT_O + base_o + offs, acc, mask=mask)


@triton.jit
def _bwd_kernel(table, ref, gtable, W, G, STAT, OFF, Y, DW,
                n_src, n_tok, n_q, d, dh, eps, n_tiles, n_prog,
                H: tl.constexpr, HP: tl.constexpr, DHP: tl.constexpr, BM: tl.constexpr,
                SINGLE: tl.constexpr, FINAL: tl.constexpr, PF: tl.constexpr = 1):
    """G: (S, n_tok, d) upstream gradient of the (unnormalised or final) output.
    STAT: (S, n_tok, H) the logit offset (m for a partial read, lse for a final read).
    OFF: (S, n_tok, H) added to g.s before multiplying by p (grad_l of a partial read);
    for a final read (FINAL, one query) it is -g.y per head, formed here from Y.

    Per source, with x the source tile, r its rstd, zr = x.w per head, a = exp(r zr - STAT),
    dz = a (g.x + OFF):  grad_x = r dz w - (r^3 sum_h dz zr / d) x + a g,  dw += r dz x.
    (The norm's backward folded in: only three reductions per source and query.)"""
    pid = tl.program_id(0)
    rh = tl.arange(0, HP)
    re = tl.arange(0, DHP)
    col = rh[:, None] * dh + re[None, :]
    cmask = (rh[:, None] < H) & (re[None, :] < dh)
    elem = ref.dtype.element_ty
    dw_acc = tl.zeros([HP, DHP], tl.float32)
    w0 = tl.load(W + col, mask=cmask, other=0.0).to(tl.float32)
    p_first = tl.load(table).to(tl.pointer_type(elem))
    p_second = tl.load(table + tl.minimum(1, n_src - 1)).to(tl.pointer_type(elem))
    p_third = tl.load(table + tl.minimum(2, n_src - 1)).to(tl.pointer_type(elem))
    for tile in range(pid, n_tiles, n_prog):
        rm = tile * BM + tl.arange(0, BM)
        mmask = rm < n_tok
        offs = rm.to(tl.int64)[:, None, None] * d + col[None, :, :]
        mask = mmask[:, None, None] & cmask[None, :, :]
        hmask = mmask[:, None] & (rh[None, :] < H)
        hoffs = rm.to(tl.int64)[:, None] * H + rh[None, :]
        zero3 = rm[:, None, None] * 0
        x_next = tl.load(p_first + offs, mask=mask, other=0.0)
        if PF == 2:
            x_next2 = tl.load(p_second + offs, mask=mask & ((zero3 + 1) < n_src), other=0.0)
            p_next = p_third
        else:
            x_next2 = x_next
            p_next = p_second
        if SINGLE:
            go0 = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
            st0 = tl.load(STAT + hoffs, mask=hmask, other=0.0).to(tl.float32)
            if FINAL:
                yv = tl.load(Y + offs, mask=mask, other=0.0).to(tl.float32)
                of0 = -tl.sum(go0 * yv, axis=2)
            else:
                of0 = tl.load(OFF + hoffs, mask=hmask, other=0.0).to(tl.float32)
        for i in range(n_src):
            x = x_next.to(tl.float32)
            if PF == 2:
                x_next = x_next2
                x_next2 = tl.load(p_next + offs, mask=mask & ((zero3 + i + 2) < n_src), other=0.0)
            else:
                x_next = tl.load(p_next + offs, mask=mask & ((zero3 + i + 1) < n_src), other=0.0)
            p_next = tl.load(table + tl.minimum(i + PF + 1, n_src - 1)).to(tl.pointer_type(elem))
            gdst = tl.load(gtable + i).to(tl.pointer_type(elem))
            ss = tl.sum(tl.sum(x * x, axis=2), axis=1)
            rstd = 1.0 / tl.sqrt(ss / d + eps)
            if SINGLE:
                zr = tl.sum(x * w0[None, :, :], axis=2)              # (BM, HP)
                a = tl.exp(zr * rstd[:, None] - st0)
                a = tl.where(hmask, a, 0.0)
                dz = a * (tl.sum(go0 * x, axis=2) + of0)
                rdz = dz * rstd[:, None]
                dw_acc += tl.sum(rdz[:, :, None] * x, axis=0)
                c = tl.sum(dz * zr, axis=1) * rstd * rstd * rstd / d  # (BM,)
                dx = rdz[:, :, None] * w0[None, :, :] - c[:, None, None] * x + a[:, :, None] * go0
            else:
                A = tl.zeros([BM, HP, DHP], tl.float32)
                cs = tl.zeros([BM], tl.float32)
                wq = W
                gq = G
                sq = STAT
                oq = OFF
                dwq = DW + pid.to(tl.int64) * n_q * d
                for q in range(n_q):
                    w = tl.load(wq + col, mask=cmask, other=0.0).to(tl.float32)
                    go = tl.load(gq + offs, mask=mask, other=0.0).to(tl.float32)
                    st = tl.load(sq + hoffs, mask=hmask, other=0.0).to(tl.float32)
                    of = tl.load(oq + hoffs, mask=hmask, other=0.0).to(tl.float32)
                    zr = tl.sum(x * w[None, :, :], axis=2)
                    a = tl.exp(zr * rstd[:, None] - st)
                    a = tl.where(hmask, a, 0.0)
                    dz = a * (tl.sum(go * x, axis=2) + of)
                    rdz = dz * rstd[:, None]
                    tl.store(dwq + col, tl.load(dwq + col, mask=cmask, other=0.0)
                             + tl.sum(rdz[:, :, None] * x, axis=0), mask=cmask)
                    tl.debug_barrier()
                    cs += tl.sum(dz * zr, axis=1)
                    A += rdz[:, :, None] * w[None, :, :] + a[:, :, None] * go
                    wq += d
                    gq += n_tok * d
                    sq += n_tok * H
                    oq += n_tok * H
                    dwq += d
                c = cs * rstd * rstd * rstd / d
                dx = A - c[:, None, None] * x
            tl.store(gdst + offs, dx.to(elem), mask=mask)
    if SINGLE:
        tl.store(DW + pid.to(tl.int64) * d + col, dw_acc, mask=cmask)
