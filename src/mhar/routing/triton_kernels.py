"""Fused Triton kernels for the depth read (forward, backward, one-pass and phase-1).

Layout. A row of d = H x dh columns is read as two tiles: part A ``(BM tokens, HP heads,
DA columns)`` and part B ``(BM, HP, DB)``. ``HP`` is the head count rounded up to a
power of two, ``DA`` the largest power of two <= dh and ``DB`` the rest of the head
rounded up. So a 1280-wide row is 1024 + 256 lanes instead of 2048 padded ones, a
160-wide head 128 + 32; any ``H`` dividing ``d`` and any head width works (``d = 1``
and ``d = 123`` included), and masked lanes never move bytes. Every reduction adds
the two parts. When dh is a power of two there is no part B (``HAS_B`` false): the
two parts' reductions land in different register layouts, and converting between
them costs a shared-memory round trip per reduction.

Sources are never stacked: the kernels take a device table of the sources' data
pointers (int64) and cast each entry to a typed pointer in-kernel. The sources'
gradients are written through a second table. The first ``n_acc`` of them are running
sums that the backward adds into (read, add in fp32, write): a stream's sources are
read by every later site, and summing their gradients here moves one read and one
write per site, where returning a fresh gradient per site and letting autograd add
them moves one write plus two reads and a write (see ``op.GradientSink``). The rest are
fresh tensors, written once. Peak memory is one copy of the sources and one of their
gradients.

Forward (``_fwd_kernel``): grid ``(S, token tiles)``, the query index fastest, so the
S programs that read the same token tile run side by side and share it in L2: each
source is read from device memory about once per chunk of S queries. fp32 online
softmax over sources with the full-width key RMSNorm fused in. ``FINAL`` programs
(one query, the plain ``route``) normalise in-kernel and write the read in the
sources' dtype plus the per-head log-sum-exp; phase-1 programs write ``(m, l, o)``.

Both kernels prefetch: the next ``PF`` (1 or 2) sources' tiles, and the pointer after
them, are in flight while the current tile is reduced. Past the last source the
pointer index is clamped, so the tail re-reads the last tile (an L2 hit) instead of
masking every load.

Backward (``_bwd_kernel``): a fixed number of programs (persistent over token tiles).
Each reads every source once per tile, recomputes the norm and the softmax weights
from the saved per-head statistic, and writes that source's gradient once (all
queries summed in registers; the norm's backward folded into three reductions per
source and query). The query/norm-weight gradient ``dw = d(q*g)`` is
reduced per program into its own row of a ``(programs, S, d)`` buffer and summed
afterwards by torch: no atomics, so gradients are bitwise reproducible.

Two-pass S-query backward (``op``'s "bwd_twopass", off by default): ``_bwd_kernel`` with
``COEF`` runs one program per query and stores, per source and token, the coefficients
of the source's gradient; ``_bwd_gather_kernel`` runs one program per source and forms
its gradient from them and the queries' upstream gradients. Each pass parallelises over
the axis that owns its output, so neither holds all S queries' rows per token.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _ld(ptr, mask, EVEN: tl.constexpr):
    """Masked load, unmasked when every lane is known valid (``EVEN``): no predicates to
    keep in registers."""
    if EVEN:
        return tl.load(ptr)
    return tl.load(ptr, mask=mask, other=0.0)


@triton.jit
def _ld_if(ptr, mask, on, EVEN: tl.constexpr):
    """Load where ``on`` (a uniform mask), zeros elsewhere."""
    if EVEN:
        return tl.load(ptr, mask=on, other=0.0)
    return tl.load(ptr, mask=mask & on, other=0.0)


@triton.jit
def _st(ptr, value, mask, EVEN: tl.constexpr):
    if EVEN:
        tl.store(ptr, value)
    else:
        tl.store(ptr, value, mask=mask)


@triton.jit
def _src(table, k, ref, ALIGN: tl.constexpr):
    """Source k's data pointer from the table, typed like ``ref``. ``ALIGN`` (16 when every
    source is 16-byte aligned, checked at launch) lets the compiler use 16-byte vector
    loads; without the hint a pointer read from memory only allows 2-byte ones."""
    return tl.multiple_of(tl.load(table + k).to(tl.pointer_type(ref.dtype.element_ty)), ALIGN)


@triton.jit
def _next_tile(x_n, x_n2, p_next, offs, mask, EVEN: tl.constexpr, PF: tl.constexpr):
    """The prefetch rotation of the source loops: returns the tile to reduce now (fp32)
    and the tiles in flight after issuing the load of the one PF sources ahead."""
    x = x_n.to(tl.float32)
    if PF == 2:
        return x, x_n2, _ld(p_next + offs, mask, EVEN)
    return x, _ld(p_next + offs, mask, EVEN), x_n2


@triton.jit
def _fwd_kernel(table, ref, W, OUT_M, OUT_L, OUT_O, M0, L0, O0,
                n_src, n_tok, d: tl.constexpr, dh: tl.constexpr, eps,
                H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, BM: tl.constexpr,
                HAS_B: tl.constexpr, EVEN: tl.constexpr, ALIGN: tl.constexpr, FINAL: tl.constexpr,
                INIT: tl.constexpr = False, PF: tl.constexpr = 1):
    """INIT (one query): the online softmax starts from a phase-1 partial read of other
    sources, M0/L0 (n_tok, H) and O0 (n_tok, d) fp32, instead of from empty: phase 2 of
    the two-phase schedule, merged and normalised in the same pass."""
    s = tl.program_id(0)
    tile = tl.program_id(1)
    rm = tile * BM + tl.arange(0, BM)
    rh = tl.arange(0, HP)
    ra = tl.arange(0, DA)
    col_a = rh[:, None] * dh + ra[None, :]                      # (HP, DA)
    cmask_a = (rh[:, None] < H) & (ra[None, :] < dh)
    mmask = rm < n_tok
    row = rm.to(tl.int64)[:, None, None] * d
    offs_a = row + col_a[None, :, :]                            # (BM, HP, DA)
    mask_a = mmask[:, None, None] & cmask_a[None, :, :]
    wa = _ld(W + s * d + col_a, cmask_a, EVEN).to(tl.float32)
    hmask = mmask[:, None] & (rh[None, :] < H)
    hoffs = rm.to(tl.int64)[:, None] * H + rh[None, :]
    if INIT:
        m_i = tl.load(M0 + hoffs, mask=hmask, other=float("-inf"))
        l_i = _ld(L0 + hoffs, hmask, EVEN)
        acc_a = _ld(O0 + offs_a, mask_a, EVEN)
    else:
        m_i = tl.full([BM, HP], float("-inf"), tl.float32)
        l_i = tl.zeros([BM, HP], tl.float32)
        acc_a = tl.zeros([BM, HP, DA], tl.float32)
    p0 = _src(table, 0, ref, ALIGN)
    p1 = _src(table, tl.minimum(1, n_src - 1), ref, ALIGN)
    xa_n = _ld(p0 + offs_a, mask_a, EVEN)
    xa_n2 = xa_n
    if PF == 2:
        xa_n2 = _ld(p1 + offs_a, mask_a, EVEN)
    if HAS_B:
        rb = tl.arange(0, DB)
        col_b = rh[:, None] * dh + DA + rb[None, :]             # (HP, DB)
        cmask_b = (rh[:, None] < H) & ((DA + rb[None, :]) < dh)
        offs_b = row + col_b[None, :, :]
        mask_b = mmask[:, None, None] & cmask_b[None, :, :]
        wb = _ld(W + s * d + col_b, cmask_b, EVEN).to(tl.float32)
        if INIT:
            acc_b = _ld(O0 + offs_b, mask_b, EVEN)
        else:
            acc_b = tl.zeros([BM, HP, DB], tl.float32)
        xb_n = _ld(p0 + offs_b, mask_b, EVEN)
        xb_n2 = xb_n
        if PF == 2:
            xb_n2 = _ld(p1 + offs_b, mask_b, EVEN)
    p_next = _src(table, tl.minimum(PF, n_src - 1), ref, ALIGN)
    for i in range(n_src):
        xa, xa_n, xa_n2 = _next_tile(xa_n, xa_n2, p_next, offs_a, mask_a, EVEN, PF)
        ss = tl.sum(tl.sum(xa * xa, axis=2), axis=1)            # (BM,)
        zr = tl.sum(xa * wa[None, :, :], axis=2)                # (BM, HP)
        if HAS_B:
            xb, xb_n, xb_n2 = _next_tile(xb_n, xb_n2, p_next, offs_b, mask_b, EVEN, PF)
            ss += tl.sum(tl.sum(xb * xb, axis=2), axis=1)
            zr += tl.sum(xb * wb[None, :, :], axis=2)
        p_next = _src(table, tl.minimum(i + PF + 1, n_src - 1), ref, ALIGN)
        rstd = 1.0 / tl.sqrt(ss / d + eps)
        z = zr * rstd[:, None]
        m_new = tl.maximum(m_i, z)
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(z - m_new)
        l_i = l_i * alpha + p
        acc_a = acc_a * alpha[:, :, None] + p[:, :, None] * xa
        if HAS_B:
            acc_b = acc_b * alpha[:, :, None] + p[:, :, None] * xb
        m_i = m_new

    if FINAL:
        # OUT_O: the read (n_tok, d) in the sources' dtype; OUT_M: log-sum-exp (n_tok, H)
        inv = 1.0 / l_i[:, :, None]
        _st(OUT_O + offs_a, (acc_a * inv).to(OUT_O.dtype.element_ty), mask_a, EVEN)
        if HAS_B:
            _st(OUT_O + offs_b, (acc_b * inv).to(OUT_O.dtype.element_ty), mask_b, EVEN)
        _st(OUT_M + hoffs, m_i + tl.log(l_i), hmask, EVEN)
    else:
        base_h = s.to(tl.int64) * n_tok * H
        base_o = s.to(tl.int64) * n_tok * d
        _st(OUT_M + base_h + hoffs, m_i, hmask, EVEN)
        _st(OUT_L + base_h + hoffs, l_i, hmask, EVEN)
        _st(OUT_O + base_o + offs_a, acc_a, mask_a, EVEN)
        if HAS_B:
            _st(OUT_O + base_o + offs_b, acc_b, mask_b, EVEN)


@triton.jit
def _bwd_kernel(table, ref, gtable, W, G, STAT, OFF, Y, DW, CA, CB, CC, PM, PGO, PGL,
                n_src, n_acc, n_tok, n_q, d: tl.constexpr, dh: tl.constexpr, eps, n_tiles, n_prog,
                H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, BM: tl.constexpr,
                HAS_B: tl.constexpr, EVEN: tl.constexpr, ALIGN: tl.constexpr, SINGLE: tl.constexpr, FINAL: tl.constexpr,
                ACCUM: tl.constexpr = False, PF: tl.constexpr = 1, COEF: tl.constexpr = False,
                PARTIAL: tl.constexpr = False):
    """gtable: data pointers of the sources' gradients; with ACCUM the first n_acc are
    running sums added into, the rest are written once (ACCUM is a constexpr so that
    calls without sums keep the registers the sum's tile would take).
    G: (S, n_tok, d) upstream gradient of the (unnormalised or final) output.
    STAT: (S, n_tok, H) the logit offset (m for a partial read, lse for a final read).
    OFF: (S, n_tok, H) added to g.s before multiplying by p (grad_l of a partial read);
    for a final read (FINAL, one query) it is -g.y per head, formed here from Y.

    Per source, with x the source tile, r its rstd, zr = x.w per head, a = exp(r zr - STAT),
    dz = a (g.x + OFF):  grad_x = r dz w - (r^3 sum_h dz zr / d) x + a g,  dw += r dz x.
    (The norm's backward folded in: only three reductions per source and query.)

    COEF (with SINGLE; grid (S, programs), the query axis first): program (q, pid) runs
    query q of an S-query read and, instead of writing gradients, stores per source i
    the coefficients of its gradient, a and r dz per head into CA and CB (n_src, S, n_tok,
    H) and c into CC (n_src, S, n_tok); ``_bwd_gather_kernel`` then forms the gradients.
    The S programs of a token tile run side by side and share its source rows in L2.

    PARTIAL (with FINAL; the backward of a fused phase-2 read that started from a phase-1
    row with max PM (n_tok, H)): also writes that row's gradients, per head
    PGO = e^(PM - lse) g (n_tok, d) and PGL = -e^(PM - lse) (g . y) (n_tok, H), fp32, from
    the g and g . y the kernel has loaded anyway (no separate elementwise passes)."""
    pid = tl.program_id(0)
    dw_row = DW + pid.to(tl.int64) * d
    if COEF:  # one query per program: every per-query pointer moves to query q
        q = tl.program_id(0)
        pid = tl.program_id(1)
        W += q * d
        q64 = tl.cast(q, tl.int64)
        G += q64 * n_tok * d
        STAT += q64 * n_tok * H
        OFF += q64 * n_tok * H
        dw_row = DW + (tl.cast(pid, tl.int64) * n_q + q64) * d
    rh = tl.arange(0, HP)
    ra = tl.arange(0, DA)
    col_a = rh[:, None] * dh + ra[None, :]
    cmask_a = (rh[:, None] < H) & (ra[None, :] < dh)
    elem = ref.dtype.element_ty
    if SINGLE:
        dwa_acc = tl.zeros([HP, DA], tl.float32)
        w0a = _ld(W + col_a, cmask_a, EVEN).to(tl.float32)
    if HAS_B:
        rb = tl.arange(0, DB)
        col_b = rh[:, None] * dh + DA + rb[None, :]
        cmask_b = (rh[:, None] < H) & ((DA + rb[None, :]) < dh)
        if SINGLE:
            dwb_acc = tl.zeros([HP, DB], tl.float32)
            w0b = _ld(W + col_b, cmask_b, EVEN).to(tl.float32)
    p_first = _src(table, 0, ref, ALIGN)
    p_second = _src(table, tl.minimum(1, n_src - 1), ref, ALIGN)
    p_third = _src(table, tl.minimum(2, n_src - 1), ref, ALIGN)
    for tile in range(pid, n_tiles, n_prog):
        rm = tile * BM + tl.arange(0, BM)
        mmask = rm < n_tok
        row = rm.to(tl.int64)[:, None, None] * d
        offs_a = row + col_a[None, :, :]
        mask_a = mmask[:, None, None] & cmask_a[None, :, :]
        hmask = mmask[:, None] & (rh[None, :] < H)
        hoffs = rm.to(tl.int64)[:, None] * H + rh[None, :]
        xa_n = _ld(p_first + offs_a, mask_a, EVEN)
        xa_n2 = xa_n
        p_next = p_second
        if PF == 2:
            xa_n2 = _ld(p_second + offs_a, mask_a, EVEN)
            p_next = p_third
        if HAS_B:
            offs_b = row + col_b[None, :, :]
            mask_b = mmask[:, None, None] & cmask_b[None, :, :]
            xb_n = _ld(p_first + offs_b, mask_b, EVEN)
            xb_n2 = xb_n
            if PF == 2:
                xb_n2 = _ld(p_second + offs_b, mask_b, EVEN)
        if SINGLE:
            goa = _ld(G + offs_a, mask_a, EVEN).to(tl.float32)
            st0 = _ld(STAT + hoffs, hmask, EVEN).to(tl.float32)
            if HAS_B:
                gob = _ld(G + offs_b, mask_b, EVEN).to(tl.float32)
            if FINAL:
                of0 = -tl.sum(goa * _ld(Y + offs_a, mask_a, EVEN).to(tl.float32), axis=2)
                if HAS_B:
                    of0 -= tl.sum(gob * _ld(Y + offs_b, mask_b, EVEN).to(tl.float32), axis=2)
            else:
                of0 = _ld(OFF + hoffs, hmask, EVEN).to(tl.float32)
            if PARTIAL:  # the phase-1 row's gradients: its weight in this read, per head
                sc = tl.where(hmask, tl.exp(_ld(PM + hoffs, hmask, EVEN) - st0), 0.0)
                _st(PGO + offs_a, sc[:, :, None] * goa, mask_a, EVEN)
                if HAS_B:
                    _st(PGO + offs_b, sc[:, :, None] * gob, mask_b, EVEN)
                _st(PGL + hoffs, sc * of0, hmask, EVEN)
        for i in range(n_src):
            xa, xa_n, xa_n2 = _next_tile(xa_n, xa_n2, p_next, offs_a, mask_a, EVEN, PF)
            ss = tl.sum(tl.sum(xa * xa, axis=2), axis=1)
            if HAS_B:
                xb, xb_n, xb_n2 = _next_tile(xb_n, xb_n2, p_next, offs_b, mask_b, EVEN, PF)
                ss += tl.sum(tl.sum(xb * xb, axis=2), axis=1)
            p_next = _src(table, tl.minimum(i + PF + 1, n_src - 1), ref, ALIGN)
            gdst = _src(gtable, i, ref, ALIGN)
            if ACCUM:
                # a running sum's current value (zeros, no traffic, past n_acc), loaded early
                # so that it arrives while this source's gradient is computed: measured
                # faster in the whole step than loading it just before the store
                summing = (tl.zeros([1, 1, 1], tl.int32) + i) < n_acc  # a (1, 1, 1) mask, broadcast
                prev_a = _ld_if(gdst + offs_a, mask_a, summing, EVEN)
                if HAS_B:
                    prev_b = _ld_if(gdst + offs_b, mask_b, summing, EVEN)
            rstd = 1.0 / tl.sqrt(ss / d + eps)
            if SINGLE:
                zr = tl.sum(xa * w0a[None, :, :], axis=2)               # (BM, HP)
                gx = tl.sum(goa * xa, axis=2)
                if HAS_B:
                    zr += tl.sum(xb * w0b[None, :, :], axis=2)
                    gx += tl.sum(gob * xb, axis=2)
                a = tl.exp(zr * rstd[:, None] - st0)
                a = tl.where(hmask, a, 0.0)
                dz = a * (gx + of0)
                rdz = dz * rstd[:, None]
                c = tl.sum(dz * zr, axis=1) * rstd * rstd * rstd / d  # (BM,)
                dwa_acc += tl.sum(rdz[:, :, None] * xa, axis=0)
                if HAS_B:
                    dwb_acc += tl.sum(rdz[:, :, None] * xb, axis=0)
                if COEF:
                    pair = tl.cast(i * n_q + q, tl.int64) * n_tok
                    _st(CA + pair * H + hoffs, a, hmask, EVEN)
                    _st(CB + pair * H + hoffs, rdz, hmask, EVEN)
                    tl.store(CC + pair + rm, c, mask=mmask)
                else:
                    dxa = rdz[:, :, None] * w0a[None, :, :] - c[:, None, None] * xa + a[:, :, None] * goa
                    if HAS_B:
                        dxb = rdz[:, :, None] * w0b[None, :, :] - c[:, None, None] * xb + a[:, :, None] * gob
            else:
                dxa = tl.zeros([BM, HP, DA], tl.float32)
                if HAS_B:
                    dxb = tl.zeros([BM, HP, DB], tl.float32)
                cs = tl.zeros([BM], tl.float32)
                wq = W
                gq = G
                sq = STAT
                oq = OFF
                dwq = DW + pid.to(tl.int64) * n_q * d
                for q in range(n_q):
                    wa = _ld(wq + col_a, cmask_a, EVEN).to(tl.float32)
                    goa = _ld(gq + offs_a, mask_a, EVEN).to(tl.float32)
                    st = _ld(sq + hoffs, hmask, EVEN).to(tl.float32)
                    of = _ld(oq + hoffs, hmask, EVEN).to(tl.float32)
                    zr = tl.sum(xa * wa[None, :, :], axis=2)
                    gx = tl.sum(goa * xa, axis=2)
                    if HAS_B:
                        wb = _ld(wq + col_b, cmask_b, EVEN).to(tl.float32)
                        gob = _ld(gq + offs_b, mask_b, EVEN).to(tl.float32)
                        zr += tl.sum(xb * wb[None, :, :], axis=2)
                        gx += tl.sum(gob * xb, axis=2)
                    a = tl.exp(zr * rstd[:, None] - st)
                    a = tl.where(hmask, a, 0.0)
                    dz = a * (gx + of)
                    rdz = dz * rstd[:, None]
                    _st(dwq + col_a, _ld(dwq + col_a, cmask_a, EVEN) + tl.sum(rdz[:, :, None] * xa, axis=0),
                        cmask_a, EVEN)
                    dxa += rdz[:, :, None] * wa[None, :, :] + a[:, :, None] * goa
                    if HAS_B:
                        _st(dwq + col_b, _ld(dwq + col_b, cmask_b, EVEN) + tl.sum(rdz[:, :, None] * xb, axis=0),
                            cmask_b, EVEN)
                        dxb += rdz[:, :, None] * wb[None, :, :] + a[:, :, None] * gob
                    tl.debug_barrier()
                    cs += tl.sum(dz * zr, axis=1)
                    wq += d
                    gq += n_tok * d
                    sq += n_tok * H
                    oq += n_tok * H
                    dwq += d
                c = cs * rstd * rstd * rstd / d
                dxa -= c[:, None, None] * xa
                if HAS_B:
                    dxb -= c[:, None, None] * xb
            if ACCUM:
                dxa += prev_a.to(tl.float32)
                if HAS_B:
                    dxb += prev_b.to(tl.float32)
            if not COEF:
                _st(gdst + offs_a, dxa.to(elem), mask_a, EVEN)
                if HAS_B:
                    _st(gdst + offs_b, dxb.to(elem), mask_b, EVEN)
    if SINGLE:
        _st(dw_row + col_a, dwa_acc, cmask_a, EVEN)
        if HAS_B:
            _st(dw_row + col_b, dwb_acc, cmask_b, EVEN)


@triton.jit
def _bwd_gather_kernel(table, ref, gtable, W, G, CA, CB, CC, n_src, n_acc, n_tok, n_q, d: tl.constexpr,
                       dh: tl.constexpr, H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr,
                       BM: tl.constexpr, HAS_B: tl.constexpr, EVEN: tl.constexpr, ALIGN: tl.constexpr,
                       ACCUM: tl.constexpr):
    """The gradients of an S-query read's sources from ``_bwd_kernel``'s COEF coefficients:
    grad_x = sum over queries q of (a_q g_q + r dz_q w_q) per head - (sum_q c_q) x. Grid
    (sources, token tiles), the source axis first: the programs of a token tile run side by
    side and share its S upstream-gradient rows G (S, n_tok, d) in L2; each writes its
    source's gradient once (added into a running sum for the first n_acc when ACCUM)."""
    i = tl.program_id(0)
    tile = tl.program_id(1)
    elem = ref.dtype.element_ty
    rm = tile * BM + tl.arange(0, BM)
    mmask = rm < n_tok
    rh = tl.arange(0, HP)
    ra = tl.arange(0, DA)
    col_a = rh[:, None] * dh + ra[None, :]
    cmask_a = (rh[:, None] < H) & (ra[None, :] < dh)
    row = rm.to(tl.int64)[:, None, None] * d
    offs_a = row + col_a[None, :, :]
    mask_a = mmask[:, None, None] & cmask_a[None, :, :]
    hmask = mmask[:, None] & (rh[None, :] < H)
    hoffs = rm.to(tl.int64)[:, None] * H + rh[None, :]
    src = _src(table, i, ref, ALIGN)
    xa = _ld(src + offs_a, mask_a, EVEN).to(tl.float32)
    acc_a = tl.zeros([BM, HP, DA], tl.float32)
    if HAS_B:
        rb = tl.arange(0, DB)
        col_b = rh[:, None] * dh + DA + rb[None, :]
        cmask_b = (rh[:, None] < H) & ((DA + rb[None, :]) < dh)
        offs_b = row + col_b[None, :, :]
        mask_b = mmask[:, None, None] & cmask_b[None, :, :]
        xb = _ld(src + offs_b, mask_b, EVEN).to(tl.float32)
        acc_b = tl.zeros([BM, HP, DB], tl.float32)
    cs = tl.zeros([BM], tl.float32)
    for q in range(n_q):
        pair = tl.cast(i * n_q + q, tl.int64) * n_tok
        a = _ld(CA + pair * H + hoffs, hmask, EVEN)[:, :, None]
        b = _ld(CB + pair * H + hoffs, hmask, EVEN)[:, :, None]
        cs += tl.load(CC + pair + rm, mask=mmask, other=0.0)
        gq = G + tl.cast(q, tl.int64) * n_tok * d
        acc_a += a * _ld(gq + offs_a, mask_a, EVEN) + b * _ld(W + q * d + col_a, cmask_a, EVEN)[None, :, :]
        if HAS_B:
            acc_b += a * _ld(gq + offs_b, mask_b, EVEN) + b * _ld(W + q * d + col_b, cmask_b, EVEN)[None, :, :]
    dst = _src(gtable, i, ref, ALIGN)
    acc_a -= cs[:, None, None] * xa
    if ACCUM:  # a running sum's current value (zeros, no traffic, past n_acc)
        summing = (tl.zeros([1, 1, 1], tl.int32) + i) < n_acc
        acc_a += _ld_if(dst + offs_a, mask_a, summing, EVEN).to(tl.float32)
    _st(dst + offs_a, acc_a.to(elem), mask_a, EVEN)
    if HAS_B:
        acc_b -= cs[:, None, None] * xb
        if ACCUM:
            acc_b += _ld_if(dst + offs_b, mask_b, summing, EVEN).to(tl.float32)
        _st(dst + offs_b, acc_b.to(elem), mask_b, EVEN)


@triton.jit
def _query_part(W, rq, qmask, d: tl.constexpr, dh: tl.constexpr, H: tl.constexpr, HP: tl.constexpr,
                START: tl.constexpr, WIDTH: tl.constexpr):
    """One column part (columns START .. START + WIDTH of every head) for the kernels with
    the queries as the leading tile axis: the part's (HP, WIDTH) row offsets and mask, its
    (SP, HP, WIDTH) offsets and mask in an (S, d) array, and the queries' weights W there."""
    rh = tl.arange(0, HP)
    rc = tl.arange(0, WIDTH)
    col = rh[:, None] * dh + START + rc[None, :]
    cmask = (rh[:, None] < H) & ((START + rc[None, :]) < dh)
    qcol = rq[:, None, None] * d + col[None, :, :]
    qmask3 = qmask[:, None, None] & cmask[None, :, :]
    w = tl.load(W + qcol, mask=qmask3, other=0.0).to(tl.float32)
    return col, cmask, qcol, qmask3, w



@triton.jit
def _bwd_gather_tokens_kernel(table, ref, gtable, W, G, CA, CB, CC, n_src, n_acc, n_tok, n_q, n_prog,
                              d: tl.constexpr, dh: tl.constexpr, H: tl.constexpr, HP: tl.constexpr,
                              DA: tl.constexpr, DB: tl.constexpr, SP: tl.constexpr, HAS_B: tl.constexpr,
                              ALIGN: tl.constexpr, ACCUM: tl.constexpr):
    """``_bwd_gather_kernel``'s gradients, one token per step and every source of it in turn
    (persistent programs over tokens): the token's S upstream-gradient rows are loaded once
    and stay in registers, where the per-source kernel re-reads them from L2 for every
    source. The gradient is elementwise in them (the sum over queries is a register axis),
    so no reduction crosses warps and no barrier waits per source. The next source's row,
    running sum and coefficients are loaded while this one's gradient is formed."""
    pid = tl.program_id(0)
    elem = ref.dtype.element_ty
    rq = tl.arange(0, SP)
    qmask = rq < n_q
    rh = tl.arange(0, HP)
    hq = qmask[:, None] & (rh[None, :] < H)                                   # (SP, HP)
    col_a, cmask_a, qcol_a, qmask_a, w_a = _query_part(W, rq, qmask, d, dh, H, HP, 0, DA)
    if HAS_B:
        col_b, cmask_b, qcol_b, qmask_b, w_b = _query_part(W, rq, qmask, d, dh, H, HP, DA, DB)
    for tok in range(pid, n_tok, n_prog):
        t64 = tl.cast(tok, tl.int64)
        g_rows = ((rq.to(tl.int64) * n_tok + t64) * d)[:, None, None]         # query q's row of this token
        g_a = tl.load(G + g_rows + col_a[None, :, :], mask=qmask_a, other=0.0)
        if HAS_B:
            g_b = tl.load(G + g_rows + col_b[None, :, :], mask=qmask_b, other=0.0)
        # source 0's row, running sum and coefficients; inside the loop the next source's
        # are loaded before this one's gradient is formed (one source of prefetch)
        x_a_n, s_a_n, a_n, b_n, c_n = _gather_loads(table, gtable, ref, CA, CB, CC, 0, t64, rq, rh, qmask, hq,
                                                    n_acc, n_tok, n_q, d, H, col_a, cmask_a, ALIGN, ACCUM)
        x_b_n, s_b_n = x_a_n, s_a_n  # placeholders without a part B
        if HAS_B:
            x_b_n, s_b_n = _gather_rows(table, gtable, ref, 0, t64, n_acc, d, col_b, cmask_b, ALIGN, ACCUM)
        for i in range(n_src):
            x_a, s_a, a, b, c = x_a_n, s_a_n, a_n, b_n, c_n
            x_b, s_b = x_b_n, s_b_n
            nxt = tl.minimum(i + 1, n_src - 1)
            x_a_n, s_a_n, a_n, b_n, c_n = _gather_loads(table, gtable, ref, CA, CB, CC, nxt, t64, rq, rh, qmask, hq,
                                                        n_acc, n_tok, n_q, d, H, col_a, cmask_a, ALIGN, ACCUM)
            if HAS_B:
                x_b_n, s_b_n = _gather_rows(table, gtable, ref, nxt, t64, n_acc, d, col_b, cmask_b, ALIGN, ACCUM)
            dst = _src(gtable, i, ref, ALIGN) + t64 * d
            tl.store(dst + col_a, (tl.sum(a * g_a + b * w_a, axis=0) - c * x_a + s_a).to(elem), mask=cmask_a)
            if HAS_B:
                tl.store(dst + col_b, (tl.sum(a * g_b + b * w_b, axis=0) - c * x_b + s_b).to(elem), mask=cmask_b)


@triton.jit
def _gather_rows(table, gtable, ref, i, t64, n_acc, d: tl.constexpr, col, cmask, ALIGN: tl.constexpr,
                 ACCUM: tl.constexpr):
    """Source i's row of one token in one column part (fp32), and its running sum there
    (zeros past n_acc, or without ACCUM)."""
    x = tl.load(_src(table, i, ref, ALIGN) + t64 * d + col, mask=cmask, other=0.0).to(tl.float32)
    if ACCUM:
        summing = (tl.zeros([1, 1], tl.int32) + i) < n_acc
        prev = tl.load(_src(gtable, i, ref, ALIGN) + t64 * d + col, mask=cmask & summing, other=0.0)
        return x, prev.to(tl.float32)
    return x, tl.zeros_like(x)


@triton.jit
def _gather_loads(table, gtable, ref, CA, CB, CC, i, t64, rq, rh, qmask, hq, n_acc, n_tok, n_q, d: tl.constexpr,
                  H: tl.constexpr, col_a, cmask_a, ALIGN: tl.constexpr, ACCUM: tl.constexpr):
    """What ``_bwd_gather_tokens_kernel`` reads per (source i, token), part B's row and
    running sum aside: part A's, and the gradient's coefficients a, b (SP, HP, 1) and the
    sum of c over queries."""
    x_a, s_a = _gather_rows(table, gtable, ref, i, t64, n_acc, d, col_a, cmask_a, ALIGN, ACCUM)
    pair = (tl.cast(i * n_q, tl.int64) + rq) * n_tok + t64                  # (SP,)
    a = tl.load(CA + pair[:, None] * H + rh[None, :], mask=hq, other=0.0)[:, :, None]
    b = tl.load(CB + pair[:, None] * H + rh[None, :], mask=hq, other=0.0)[:, :, None]
    c = tl.sum(tl.load(CC + pair, mask=qmask, other=0.0), axis=0)
    return x_a, s_a, a, b, c


@triton.jit
def _query_tile(x_n, p_next, row, col, cmask, w, EVEN: tl.constexpr):
    """One column part of a token's source row in the queries-tile kernels: the tile to
    use now (fp32), the next source's tile (its load issued here, in flight meanwhile),
    and the part's sum of squares and per-(query, head) dot products with w (SP, HP, .)."""
    x = x_n.to(tl.float32)
    nxt = _ld(p_next + row + col, cmask, EVEN)
    return x, nxt, tl.sum(tl.sum(x * x, axis=1), axis=0), tl.sum(x[None, :, :] * w, axis=2)


@triton.jit
def _bwd_queries_kernel(table, ref, gtable, W, G, STAT, OFF, DW,
                        n_src, n_acc, n_tok, n_q, d: tl.constexpr, dh: tl.constexpr, eps, n_prog,
                        H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, SP: tl.constexpr,
                        HAS_B: tl.constexpr, EVEN: tl.constexpr, ALIGN: tl.constexpr, ACCUM: tl.constexpr):
    """The S-query backward (phase 1 of the two-phase read) with the queries as a tile
    axis: one token per step, every query at once. W (S, d), G (S, n_tok, d), STAT and OFF
    (S, n_tok, H) as in ``_bwd_kernel``. Each program keeps the queries' weights (loaded
    once), the token's upstream gradients (loaded once per token, not once per source and
    query) and its ``d(q*g)`` rows (written once, to DW[pid]) in registers; ``_bwd_kernel``'s
    S-query path instead reloads the first two and read-modify-writes the third for every
    (source, query) pair. SP: S rounded up to a power of two; EVEN here means every
    column lane is valid (the query axis is always masked)."""
    pid = tl.program_id(0)
    elem = ref.dtype.element_ty
    rq = tl.arange(0, SP)
    rh = tl.arange(0, HP)
    qmask = rq < n_q
    col_a, cmask_a, qcol_a, qmask_a, w_a = _query_part(W, rq, qmask, d, dh, H, HP, 0, DA)
    dw_a = tl.zeros([SP, HP, DA], tl.float32)
    if HAS_B:
        col_b, cmask_b, qcol_b, qmask_b, w_b = _query_part(W, rq, qmask, d, dh, H, HP, DA, DB)
        dw_b = tl.zeros([SP, HP, DB], tl.float32)
    hmask = qmask[:, None] & (rh[None, :] < H)                            # (SP, HP)
    p_first = _src(table, 0, ref, ALIGN)
    p_second = _src(table, tl.minimum(1, n_src - 1), ref, ALIGN)
    for tok in range(pid, n_tok, n_prog):
        t64 = tl.cast(tok, tl.int64)
        row = t64 * d
        # query q's row of this token in the (S, n_tok, .) inputs
        g_rows = (rq.to(tl.int64)[:, None, None] * n_tok + t64) * d
        h_rows = (rq.to(tl.int64)[:, None] * n_tok + t64) * H + rh[None, :]
        g_a = tl.load(G + g_rows + col_a[None, :, :], mask=qmask_a, other=0.0).to(tl.float32)
        st = tl.load(STAT + h_rows, mask=hmask, other=0.0).to(tl.float32)
        of = tl.load(OFF + h_rows, mask=hmask, other=0.0).to(tl.float32)
        xa_n = _ld(p_first + row + col_a, cmask_a, EVEN)
        if HAS_B:
            g_b = tl.load(G + g_rows + col_b[None, :, :], mask=qmask_b, other=0.0).to(tl.float32)
            xb_n = _ld(p_first + row + col_b, cmask_b, EVEN)
        p_next = p_second
        for i in range(n_src):
            # this source's tile (the next one's load in flight meanwhile), its sum of squares and logits
            xa, xa_n, ss, zr = _query_tile(xa_n, p_next, row, col_a, cmask_a, w_a, EVEN)
            gx = tl.sum(xa[None, :, :] * g_a, axis=2)
            if HAS_B:
                xb, xb_n, ss_b, zr_b = _query_tile(xb_n, p_next, row, col_b, cmask_b, w_b, EVEN)
                ss += ss_b
                zr += zr_b
                gx += tl.sum(xb[None, :, :] * g_b, axis=2)
            p_next = _src(table, tl.minimum(i + 2, n_src - 1), ref, ALIGN)
            gdst = _src(gtable, i, ref, ALIGN)
            rstd = 1.0 / tl.sqrt(ss / d + eps)
            a = tl.where(hmask, tl.exp(zr * rstd - st), 0.0)
            dz = a * (gx + of)
            rdz = dz * rstd
            c = tl.sum(tl.sum(dz * zr, axis=1), axis=0) * rstd * rstd * rstd / d
            dxa = tl.sum(rdz[:, :, None] * w_a + a[:, :, None] * g_a, axis=0) - c * xa
            dw_a += rdz[:, :, None] * xa[None, :, :]
            if HAS_B:
                dxb = tl.sum(rdz[:, :, None] * w_b + a[:, :, None] * g_b, axis=0) - c * xb
                dw_b += rdz[:, :, None] * xb[None, :, :]
            if ACCUM:  # add a running sum's current value (zeros, no traffic, past n_acc)
                summing = (tl.zeros([1, 1], tl.int32) + i) < n_acc
                dxa += _ld_if(gdst + row + col_a, cmask_a, summing, EVEN).to(tl.float32)
                if HAS_B:
                    dxb += _ld_if(gdst + row + col_b, cmask_b, summing, EVEN).to(tl.float32)
            _st(gdst + row + col_a, dxa.to(elem), cmask_a, EVEN)
            if HAS_B:
                _st(gdst + row + col_b, dxb.to(elem), cmask_b, EVEN)
    dw_row = DW + pid.to(tl.int64) * n_q * d
    tl.store(dw_row + qcol_a, dw_a, mask=qmask_a)
    if HAS_B:
        tl.store(dw_row + qcol_b, dw_b, mask=qmask_b)


@triton.jit
def _fwd_queries_kernel(table, ref, W, OUT_M, OUT_L, OUT_O, n_src, n_tok, n_q, d: tl.constexpr, dh: tl.constexpr,
                        eps, n_prog, H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr,
                        SP: tl.constexpr, HAS_B: tl.constexpr, EVEN: tl.constexpr, ALIGN: tl.constexpr):
    """Phase 1 with the queries as a tile axis: one token per step, every query at once,
    each source's row read once (``_fwd_kernel``'s phase-1 grid reads it once per query,
    from L2 after the first). Writes m, l (S, n_tok, H) and o (S, n_tok, d) fp32, as
    ``_fwd_kernel`` does. EVEN: every column lane valid (the query axis is always masked)."""
    pid = tl.program_id(0)
    rq = tl.arange(0, SP)
    rh = tl.arange(0, HP)
    qmask = rq < n_q
    col_a, cmask_a, qcol_a, qmask_a, w_a = _query_part(W, rq, qmask, d, dh, H, HP, 0, DA)
    if HAS_B:
        col_b, cmask_b, qcol_b, qmask_b, w_b = _query_part(W, rq, qmask, d, dh, H, HP, DA, DB)
    hmask = qmask[:, None] & (rh[None, :] < H)
    p_first = _src(table, 0, ref, ALIGN)
    p_second = _src(table, tl.minimum(1, n_src - 1), ref, ALIGN)
    for tok in range(pid, n_tok, n_prog):
        t64 = tl.cast(tok, tl.int64)
        row = t64 * d
        m_i = tl.full([SP, HP], float("-inf"), tl.float32)
        l_i = tl.zeros([SP, HP], tl.float32)
        acc_a = tl.zeros([SP, HP, DA], tl.float32)
        xa_n = _ld(p_first + row + col_a, cmask_a, EVEN)
        if HAS_B:
            acc_b = tl.zeros([SP, HP, DB], tl.float32)
            xb_n = _ld(p_first + row + col_b, cmask_b, EVEN)
        p_next = p_second
        for i in range(n_src):
            xa, xa_n, ss, zr = _query_tile(xa_n, p_next, row, col_a, cmask_a, w_a, EVEN)
            if HAS_B:
                xb, xb_n, ss_b, zr_b = _query_tile(xb_n, p_next, row, col_b, cmask_b, w_b, EVEN)
                ss += ss_b
                zr += zr_b
            p_next = _src(table, tl.minimum(i + 2, n_src - 1), ref, ALIGN)
            z = zr / tl.sqrt(ss / d + eps)
            m_new = tl.maximum(m_i, z)
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(z - m_new)
            l_i = l_i * alpha + p
            acc_a = acc_a * alpha[:, :, None] + p[:, :, None] * xa[None, :, :]
            if HAS_B:
                acc_b = acc_b * alpha[:, :, None] + p[:, :, None] * xb[None, :, :]
            m_i = m_new
        h_rows = (rq.to(tl.int64)[:, None] * n_tok + t64) * H + rh[None, :]
        o_rows = (rq.to(tl.int64)[:, None, None] * n_tok + t64) * d
        tl.store(OUT_M + h_rows, m_i, mask=hmask)
        tl.store(OUT_L + h_rows, l_i, mask=hmask)
        tl.store(OUT_O + o_rows + col_a[None, :, :], acc_a, mask=qmask_a)
        if HAS_B:
            tl.store(OUT_O + o_rows + col_b[None, :, :], acc_b, mask=qmask_b)
