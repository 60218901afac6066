"""Fused Triton kernels for the depth read (forward, backward, one-pass and phase-1).

Layout. A row of d = H x dh columns is read as two tiles: part A, the first ``DA``
lanes of every head, and part B, the rest. ``HP`` is the head count rounded up to a
power of two, ``DA`` the largest power of two <= dh and ``DB`` the rest of the head
rounded up. So a 1280-wide row is 1024 + 256 lanes instead of 2048 padded ones, a
160-wide head 128 + 32; any ``H`` dividing ``d`` and any head width works (``d = 1``
and ``d = 123`` included), and masked lanes never move bytes. When dh is a power of two
there is no part B (``HAS_B`` false).

The per-query kernels (``_fwd_kernel``, ``_bwd_kernel``) hold part A as ``(BM tokens,
HP heads, DA / DC chunks, DC lanes)`` and part B as ``(BM, HP, 1, DB)`` (heads and chunks
swapped from triton 3.7 on, ``CF``; see ``_chunked_cols``). With several heads
``DC = DB``: both parts then have one shape past the chunk axis, triton gives them one
register layout (threads over heads and lanes, the chunks in each thread's registers),
and a per-head sum adds its chunks and both parts in registers before one reduction
across threads (``_head_sums``, ``_add_parts``). With plain (HP, DA) and
(HP, DB) tiles the two parts' sums landed in different layouts: at 1280 with 8 heads
the source loops converted 1-5 tiles of (1, 8, 128) through shared memory per source,
and a call cost 11% more than with one head (6% now, bench/results/session13/). One
head keeps ``DC = DA``: its full-row sums meet without conversions anyway.

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

Phase 1's forward and the backward's COEF pass as matrix products (``_fwd_dot_kernel``,
``_coef_dot_kernel``; op's "fwd_dot" and "coef_dot", the defaults for several heads with
bf16 sources): one program per token and all S queries, so each source row is read once
per token; per head the logits, g.x, the read and d(q*g) are small matrix products (flash
attention over depth, batched over heads). One head of many lanes (attnres at 1024 or
1280) runs as lane groups in the heads' place (``VH``, op's "dot_lane_groups"), its
logits and g.x summed over the groups.

Two-pass S-query backward (``op``'s "bwd_twopass", the default): ``_bwd_kernel`` with
``COEF`` runs one program per query and stores, per source and token, the coefficients
of the source's gradient; ``_bwd_gather_kernel`` runs one program per token and block
of sources and forms their gradients from them and the queries' upstream gradients, per
head as a small matrix product (``tl.dot``). Each pass parallelises over the axis that
owns its output, so neither holds all S queries' rows per token. With a head per program
the COEF pass can form its head's lanes of the gradients itself (``GRAD``,
``_coef_grads``), the key norm's x term, which needs every head, deferred to a later
kernel (op's "coef_grads" and ``GradientSink``).

Few sources (op's "dot_tokens", "coef_tokens", "gather_tokens"): a phase-1 read of at
most 8 sources takes several tokens at a time in the product kernels (``_fwd_packed``,
``_coef_packed``, the gather's ``TOK``), their sources side by side in a product's 16
rows, where a token alone padded them.

Finalize (``_finalize_fwd_kernel``, ``_finalize_bwd_kernel``): a partial read normalised,
x = o / l per head, and its backward, each one pass over the rows: one program per
(token block, head), the head's columns walked in chunks of ``BD`` lanes (masked past
the head), so any head width works with registers bounded by the tile.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from mhar.backends import fix_interpreter_index

fix_interpreter_index()

# Under TRITON_INTERPRET=1 (the CPU tests), tl.dot of bf16 tiles returns garbage in triton
# 3.6 and 3.9 (errors of 1e10 on a 16x16 product of unit values): the bf16 products then
# run on the same values in fp32.
_INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")


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
def _chunked_cols(rh, dh: tl.constexpr, H: tl.constexpr, OFF: tl.constexpr, NC: tl.constexpr, DC: tl.constexpr,
                  CF: tl.constexpr):
    """Column offsets and mask of a head part as a tile of NC chunks of DC lanes per head:
    chunk c holds lanes OFF + c*DC .. of every head (see the module docstring, "Layout").
    (HP heads, NC chunks, DC lanes), or with CF ("chunks first") (NC, HP, DC). triton
    spreads a warp's threads over the lanes and then over the other axes in index order up
    to 3.6, in reverse index order from 3.7 (offline sm_90 compiles of 3.6 to 3.9). The
    axis order that gives the threads to the heads, so that the chunks stay in each
    thread's registers, is heads first up to 3.6 and chunks first from 3.7 (op's
    ``_chunks_first``); the other order puts threads on the chunks of part A only, and
    the source loops convert a tile per source again."""
    rc = tl.arange(0, NC)
    rj = tl.arange(0, DC)
    if CF:
        lane = OFF + rc[:, None, None] * DC + rj[None, None, :]   # (NC, 1, DC)
        heads = rh[None, :, None]
    else:
        lane = OFF + rc[None, :, None] * DC + rj[None, None, :]   # (1, NC, DC)
        heads = rh[:, None, None]
    return heads * dh + lane, (heads < H) & (lane < dh)


@triton.jit
def _head_sums(t, CF: tl.constexpr):
    """Per-head sums of a part's tile over its chunks, still per lane: (BM, HP, DC). The
    chunks are in each thread's registers, so this costs no shuffles; adding both parts'
    before ``tl.sum(.., axis=2)`` reduces each head across threads once."""
    if CF:
        s = tl.sum(t, axis=1)
    else:
        s = tl.sum(t, axis=2)
    return s


@triton.jit
def _add_parts(a, b, SAME: tl.constexpr):
    """Both parts' ``_head_sums``, to be reduced over their last axis: added per lane when
    the parts have one shape (chunks of part B's width: one reduction across threads),
    else each part reduced to (BM, HP, 1) first."""
    if SAME:
        t = a + b
    else:
        t = tl.sum(a, axis=2, keep_dims=True) + tl.sum(b, axis=2, keep_dims=True)
    return t


@triton.jit
def _heads_tile(t, CF: tl.constexpr):
    """A per-head (BM, HP) value as a tile that broadcasts against a part's. Expanded lanes
    first, then chunks: the inverse of the reductions' order (``_head_sums``, then lanes),
    so that it lands in the tiles' own register layout with no conversion."""
    if CF:
        x = t[:, :, None][:, None, :, :]      # (BM, 1, HP, 1)
    else:
        x = t[:, :, None][:, :, None, :]      # (BM, HP, 1, 1)
    return x


@triton.jit
def _fwd_kernel(table, ref, W, OUT_M, OUT_L, OUT_O, M0, L0, O0,
                n_src, n_tok, n_q, d: tl.constexpr, dh: tl.constexpr, eps,
                H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, DC: tl.constexpr,
                CF: tl.constexpr, BM: tl.constexpr, HAS_B: tl.constexpr, EVEN: tl.constexpr, ALIGN: tl.constexpr,
                FINAL: tl.constexpr, INIT: tl.constexpr = False, PF: tl.constexpr = 1,
                SCALE_OUT=None, LAST_SCALE: tl.constexpr = False):
    """INIT (one query): the online softmax starts from a phase-1 partial read of other
    sources, M0/L0 (n_tok, H) fp32 and O0 (n_tok, d) fp32 or bf16 (op's "rows_bf16"),
    instead of from empty: phase 2 of the two-phase schedule, merged and normalised in the
    same pass. LAST_SCALE: also write the last source's key-norm scale 1 / rms (n_tok,)
    fp32 into SCALE_OUT, for the stream's KeyScales (op's merge_scales). A partial read
    (not FINAL) stores o in OUT_O's dtype (fp32, or bf16 for "rows_bf16").

    Grid: (n_q * token tiles,), the n_q queries of a tile side by side, so that they read
    its source rows while L2 holds them. One axis, because the grid's second and third
    stop at 65,535 programs (a 100M micro-batch of 64 x 2048 has 131,072 tokens)."""
    pid = tl.program_id(0)
    s = pid % n_q
    tile = pid // n_q
    rm = tile * BM + tl.arange(0, BM)
    rh = tl.arange(0, HP)
    col_a, cmask_a = _chunked_cols(rh, dh, H, 0, DA // DC, DC, CF)
    mmask = rm < n_tok
    row = rm.to(tl.int64)[:, None, None, None] * d
    offs_a = row + col_a[None, :, :, :]                         # (BM, HP, NC, DC); CF: (BM, NC, HP, DC)
    mask_a = mmask[:, None, None, None] & cmask_a[None, :, :, :]
    wa = _ld(W + s * d + col_a, cmask_a, EVEN).to(tl.float32)
    hmask = mmask[:, None] & (rh[None, :] < H)
    hoffs = rm.to(tl.int64)[:, None] * H + rh[None, :]
    if INIT:
        m_i = tl.load(M0 + hoffs, mask=hmask, other=float("-inf"))
        l_i = _ld(L0 + hoffs, hmask, EVEN)
        acc_a = _ld(O0 + offs_a, mask_a, EVEN).to(tl.float32)
    else:
        m_i = tl.full([BM, HP], float("-inf"), tl.float32)
        l_i = tl.zeros([BM, HP], tl.float32)
        acc_a = tl.zeros(offs_a.shape, tl.float32)
    p0 = _src(table, 0, ref, ALIGN)
    p1 = _src(table, tl.minimum(1, n_src - 1), ref, ALIGN)
    xa_n = _ld(p0 + offs_a, mask_a, EVEN)
    xa_n2 = xa_n
    if PF == 2:
        xa_n2 = _ld(p1 + offs_a, mask_a, EVEN)
    if HAS_B:
        col_b, cmask_b = _chunked_cols(rh, dh, H, DA, 1, DB, CF)
        offs_b = row + col_b[None, :, :, :]
        mask_b = mmask[:, None, None, None] & cmask_b[None, :, :, :]
        wb = _ld(W + s * d + col_b, cmask_b, EVEN).to(tl.float32)
        if INIT:
            acc_b = _ld(O0 + offs_b, mask_b, EVEN).to(tl.float32)
        else:
            acc_b = tl.zeros(offs_b.shape, tl.float32)
        xb_n = _ld(p0 + offs_b, mask_b, EVEN)
        xb_n2 = xb_n
        if PF == 2:
            xb_n2 = _ld(p1 + offs_b, mask_b, EVEN)
    p_next = _src(table, tl.minimum(PF, n_src - 1), ref, ALIGN)
    if LAST_SCALE:
        last_rstd = tl.zeros([BM], tl.float32)
    for i in range(n_src):
        xa, xa_n, xa_n2 = _next_tile(xa_n, xa_n2, p_next, offs_a, mask_a, EVEN, PF)
        x2 = _head_sums(xa * xa, CF)                            # (BM, HP, DC)
        zl = _head_sums(xa * wa[None, :, :, :], CF)
        if HAS_B:
            xb, xb_n, xb_n2 = _next_tile(xb_n, xb_n2, p_next, offs_b, mask_b, EVEN, PF)
            x2 = _add_parts(x2, _head_sums(xb * xb, CF), DC == DB)
            zl = _add_parts(zl, _head_sums(xb * wb[None, :, :, :], CF), DC == DB)
        p_next = _src(table, tl.minimum(i + PF + 1, n_src - 1), ref, ALIGN)
        ss = tl.sum(tl.sum(x2, axis=2), axis=1)                 # (BM,)
        zr = tl.sum(zl, axis=2)                                 # (BM, HP)
        rstd = 1.0 / tl.sqrt(ss / d + eps)
        if LAST_SCALE:
            last_rstd = rstd
        z = zr * rstd[:, None]
        m_new = tl.maximum(m_i, z)
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(z - m_new)
        l_i = l_i * alpha + p
        acc_a = acc_a * _heads_tile(alpha, CF) + _heads_tile(p, CF) * xa
        if HAS_B:
            acc_b = acc_b * _heads_tile(alpha, CF) + _heads_tile(p, CF) * xb
        m_i = m_new

    if LAST_SCALE:
        _st(SCALE_OUT + rm, last_rstd, mmask, EVEN)
    if FINAL:
        # OUT_O: the read (n_tok, d) in the sources' dtype; OUT_M: log-sum-exp (n_tok, H)
        inv = 1.0 / _heads_tile(l_i, CF)
        _st(OUT_O + offs_a, (acc_a * inv).to(OUT_O.dtype.element_ty), mask_a, EVEN)
        if HAS_B:
            _st(OUT_O + offs_b, (acc_b * inv).to(OUT_O.dtype.element_ty), mask_b, EVEN)
        _st(OUT_M + hoffs, m_i + tl.log(l_i), hmask, EVEN)
    else:
        base_h = s.to(tl.int64) * n_tok * H
        base_o = s.to(tl.int64) * n_tok * d
        _st(OUT_M + base_h + hoffs, m_i, hmask, EVEN)
        _st(OUT_L + base_h + hoffs, l_i, hmask, EVEN)
        _st(OUT_O + base_o + offs_a, acc_a.to(OUT_O.dtype.element_ty), mask_a, EVEN)
        if HAS_B:
            _st(OUT_O + base_o + offs_b, acc_b.to(OUT_O.dtype.element_ty), mask_b, EVEN)


@triton.jit
def _bwd_kernel(table, ref, gtable, W, G, gref, STAT, OFF, Y, DW, CA, CB, CC, PM, PGO, PGL, PC,
                n_src, n_acc, n_tok, n_q, d: tl.constexpr, dh: tl.constexpr, eps, n_tiles, n_prog,
                H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, DC: tl.constexpr,
                CF: tl.constexpr, BM: tl.constexpr, HAS_B: tl.constexpr, EVEN: tl.constexpr, ALIGN: tl.constexpr,
                SINGLE: tl.constexpr, FINAL: tl.constexpr, ACCUM: tl.constexpr = False, PF: tl.constexpr = 1,
                COEF: tl.constexpr = False, PARTIAL: tl.constexpr = 0, PARTS: tl.constexpr = False,
                SP: tl.constexpr = 8, CLAIM: tl.constexpr = False):
    """gtable: data pointers of the sources' gradients; with ACCUM the first n_acc are
    running sums added into, the rest are written once (ACCUM is a constexpr so that
    calls without sums keep the registers the sum's tile would take).
    G: (S, n_tok, d) upstream gradient of the (unnormalised or final) output; with COEF a
    table of the S queries' (n_tok, d) gradient rows' data pointers, typed like ``gref``.
    STAT: (S, n_tok, H) the logit offset (m for a partial read, lse for a final read).
    OFF: (S, n_tok, H) added to g.s before multiplying by p (grad_l of a partial read);
    for a final read (FINAL, one query) it is -g.y per head, formed here from Y.

    Per source, with x the source tile, r its rstd, zr = x.w per head, a = exp(r zr - STAT),
    dz = a (g.x + OFF):  grad_x = r dz w - (r^3 sum_h dz zr / d) x + a g,  dw += r dz x.
    (The norm's backward folded in: only three reductions per source and query.)

    COEF (with SINGLE; grid (S, programs), the query axis first): program (q, pid) runs
    query q of an S-query read and, instead of writing gradients, stores per source i
    the coefficients of its gradient, a and r dz per head into CA and CB (n_tok, H, n_src,
    S) and c into CC (n_tok, n_src, S); ``_bwd_gather_kernel`` then forms the gradients.
    The S programs of a token tile run side by side and share its source rows in L2.

    PARTIAL (with FINAL; the backward of a fused phase-2 read that started from a phase-1
    row with max PM (n_tok, H)): 1 also writes that row's gradients, per head
    PGO = e^(PM - lse) g (n_tok, d) and PGL = -e^(PM - lse) (g . y) (n_tok, H), fp32, from
    the g and g . y the kernel has loaded anyway (no separate elementwise passes); 2 writes
    PGL = -(g . y) and PGO = lse (n_tok, H), the STAT it read (a copy launch fewer per
    site): the phase-1 backward then takes the read in its final form (g,
    lse and -(g . y); op's ``_RowGrads``).

    CLAIM (with SINGLE, not COEF): the last source's deferred key-norm terms PC (H, n_tok)
    fp32, the shares of c that earlier phase-1 backward passes left for it
    (``_coef_grads``), join this read's c: their x term is applied with this one's."""
    pid = tl.program_id(0)
    dw_row = DW + pid.to(tl.int64) * d
    if COEF:  # one query per program: every per-query pointer moves to query q
        q = tl.program_id(0)
        pid = tl.program_id(1)
        W += q * d
        q64 = tl.cast(q, tl.int64)
        G = _src(G, q, gref, ALIGN)
        STAT += q64 * n_tok * H
        OFF += q64 * n_tok * H
        dw_row = DW + (tl.cast(pid, tl.int64) * n_q + q64) * d
    rh = tl.arange(0, HP)
    col_a, cmask_a = _chunked_cols(rh, dh, H, 0, DA // DC, DC, CF)
    elem = ref.dtype.element_ty
    if SINGLE:
        dwa_acc = tl.zeros(col_a.shape, tl.float32)
        w0a = _ld(W + col_a, cmask_a, EVEN).to(tl.float32)
    if HAS_B:
        col_b, cmask_b = _chunked_cols(rh, dh, H, DA, 1, DB, CF)
        if SINGLE:
            dwb_acc = tl.zeros(col_b.shape, tl.float32)
            w0b = _ld(W + col_b, cmask_b, EVEN).to(tl.float32)
    p_first = _src(table, 0, ref, ALIGN)
    p_second = _src(table, tl.minimum(1, n_src - 1), ref, ALIGN)
    p_third = _src(table, tl.minimum(2, n_src - 1), ref, ALIGN)
    for tile in range(pid, n_tiles, n_prog):
        rm = tile * BM + tl.arange(0, BM)
        mmask = rm < n_tok
        row = rm.to(tl.int64)[:, None, None, None] * d
        offs_a = row + col_a[None, :, :, :]                     # (BM, HP, NC, DC); CF: (BM, NC, HP, DC)
        mask_a = mmask[:, None, None, None] & cmask_a[None, :, :, :]
        hmask = mmask[:, None] & (rh[None, :] < H)
        hoffs = rm.to(tl.int64)[:, None] * H + rh[None, :]
        xa_n = _ld(p_first + offs_a, mask_a, EVEN)
        xa_n2 = xa_n
        p_next = p_second
        if PF == 2:
            xa_n2 = _ld(p_second + offs_a, mask_a, EVEN)
            p_next = p_third
        if HAS_B:
            offs_b = row + col_b[None, :, :, :]
            mask_b = mmask[:, None, None, None] & cmask_b[None, :, :, :]
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
                gy = _head_sums(goa * _ld(Y + offs_a, mask_a, EVEN).to(tl.float32), CF)
                if HAS_B:
                    gyb = _head_sums(gob * _ld(Y + offs_b, mask_b, EVEN).to(tl.float32), CF)
                    gy = _add_parts(gy, gyb, DC == DB)
                of0 = -tl.sum(gy, axis=2)
            else:
                of0 = _ld(OFF + hoffs, hmask, EVEN).to(tl.float32)
            if PARTIAL == 1:  # the phase-1 row's gradients: its weight in this read, per head
                sc = tl.where(hmask, tl.exp(_ld(PM + hoffs, hmask, EVEN) - st0), 0.0)
                _st(PGO + offs_a, _heads_tile(sc, CF) * goa, mask_a, EVEN)
                if HAS_B:
                    _st(PGO + offs_b, _heads_tile(sc, CF) * gob, mask_b, EVEN)
                _st(PGL + hoffs, sc * of0, hmask, EVEN)
            if PARTIAL == 2:  # the row's -(g . y) and lse per head; phase 1 reads g itself
                _st(PGL + hoffs, of0, hmask, EVEN)
                _st(PGO + hoffs, st0, hmask, EVEN)
            if CLAIM:  # the last source's deferred c, summed over the heads' shares
                c_last = tl.sum(tl.load(PC + rh[None, :].to(tl.int64) * n_tok + rm[:, None], mask=hmask, other=0.0),
                                axis=1)
        for i in range(n_src):
            xa, xa_n, xa_n2 = _next_tile(xa_n, xa_n2, p_next, offs_a, mask_a, EVEN, PF)
            x2 = _head_sums(xa * xa, CF)
            if HAS_B:
                xb, xb_n, xb_n2 = _next_tile(xb_n, xb_n2, p_next, offs_b, mask_b, EVEN, PF)
                x2 = _add_parts(x2, _head_sums(xb * xb, CF), DC == DB)
            ss = tl.sum(tl.sum(x2, axis=2), axis=1)
            p_next = _src(table, tl.minimum(i + PF + 1, n_src - 1), ref, ALIGN)
            gdst = _src(gtable, i, ref, ALIGN)
            if ACCUM:
                # a running sum's current value (zeros, no traffic, past n_acc), loaded early
                # so that it arrives while this source's gradient is computed: measured
                # faster in the whole step than loading it just before the store
                summing = (tl.zeros([1, 1, 1, 1], tl.int32) + i) < n_acc  # a (1, 1, 1, 1) mask, broadcast
                prev_a = _ld_if(gdst + offs_a, mask_a, summing, EVEN)
                if HAS_B:
                    prev_b = _ld_if(gdst + offs_b, mask_b, summing, EVEN)
            rstd = 1.0 / tl.sqrt(ss / d + eps)
            if SINGLE:
                zl = _head_sums(xa * w0a[None, :, :, :], CF)
                gl = _head_sums(goa * xa, CF)
                if HAS_B:
                    zl = _add_parts(zl, _head_sums(xb * w0b[None, :, :, :], CF), DC == DB)
                    gl = _add_parts(gl, _head_sums(gob * xb, CF), DC == DB)
                zr = tl.sum(zl, axis=2)                                 # (BM, HP)
                gx = tl.sum(gl, axis=2)
                a = tl.exp(zr * rstd[:, None] - st0)
                a = tl.where(hmask, a, 0.0)
                dz = a * (gx + of0)
                rdz = dz * rstd[:, None]
                c = tl.sum(dz * zr, axis=1) * rstd * rstd * rstd / d  # (BM,)
                if CLAIM:
                    c += tl.where(i == n_src - 1, c_last, 0.0)
                dwa_acc += tl.sum(_heads_tile(rdz, CF) * xa, axis=0)
                if HAS_B:
                    dwb_acc += tl.sum(_heads_tile(rdz, CF) * xb, axis=0)
                if COEF:
                    # token-major (see CA, CB, CC above): the gather's reads are contiguous
                    tk = rm.to(tl.int64)
                    if PARTS:  # two bf16 parts each (the gather's EXACT)
                        crow = (tk[:, None] * H + rh[None, :]) * n_src + i
                        _store_coef_parts(CA, crow, q, a, hmask, SP)
                        _store_coef_parts(CB, crow, q, rdz, hmask, SP)
                    else:
                        ch = ((tk[:, None] * H + rh[None, :]) * n_src + i) * n_q + q
                        _st(CA + ch, a, hmask, EVEN)
                        _st(CB + ch, rdz, hmask, EVEN)
                    tl.store(CC + (tk * n_src + i) * n_q + q, c, mask=mmask)
                else:
                    dxa = (_heads_tile(rdz, CF) * w0a[None, :, :, :] - _heads_tile(c[:, None], CF) * xa
                           + _heads_tile(a, CF) * goa)
                    if HAS_B:
                        dxb = (_heads_tile(rdz, CF) * w0b[None, :, :, :] - _heads_tile(c[:, None], CF) * xb
                               + _heads_tile(a, CF) * gob)
            else:
                dxa = tl.zeros(offs_a.shape, tl.float32)
                if HAS_B:
                    dxb = tl.zeros(offs_b.shape, tl.float32)
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
                    zl = _head_sums(xa * wa[None, :, :, :], CF)
                    gl = _head_sums(goa * xa, CF)
                    if HAS_B:
                        wb = _ld(wq + col_b, cmask_b, EVEN).to(tl.float32)
                        gob = _ld(gq + offs_b, mask_b, EVEN).to(tl.float32)
                        zl = _add_parts(zl, _head_sums(xb * wb[None, :, :, :], CF), DC == DB)
                        gl = _add_parts(gl, _head_sums(gob * xb, CF), DC == DB)
                    zr = tl.sum(zl, axis=2)
                    gx = tl.sum(gl, axis=2)
                    a = tl.exp(zr * rstd[:, None] - st)
                    a = tl.where(hmask, a, 0.0)
                    dz = a * (gx + of)
                    rdz = dz * rstd[:, None]
                    _st(dwq + col_a, _ld(dwq + col_a, cmask_a, EVEN) + tl.sum(_heads_tile(rdz, CF) * xa, axis=0),
                        cmask_a, EVEN)
                    dxa += _heads_tile(rdz, CF) * wa[None, :, :, :] + _heads_tile(a, CF) * goa
                    if HAS_B:
                        _st(dwq + col_b, _ld(dwq + col_b, cmask_b, EVEN) + tl.sum(_heads_tile(rdz, CF) * xb, axis=0),
                            cmask_b, EVEN)
                        dxb += _heads_tile(rdz, CF) * wb[None, :, :, :] + _heads_tile(a, CF) * gob
                    tl.debug_barrier()
                    cs += tl.sum(dz * zr, axis=1)
                    wq += d
                    gq += n_tok * d
                    sq += n_tok * H
                    oq += n_tok * H
                    dwq += d
                c = cs * rstd * rstd * rstd / d
                dxa -= _heads_tile(c[:, None], CF) * xa
                if HAS_B:
                    dxb -= _heads_tile(c[:, None], CF) * xb
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
def _gather_rows(G, gref, W, WB, t, n_q, n_tok, d: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr,
                 EXACT: tl.constexpr, TOK: tl.constexpr, NSEG: tl.constexpr):
    """The row pointers of the gather's right operand at tokens t .. t + TOK - 1, and their
    mask (queries past n_q and tokens past n_tok off), NSEG segments of SP rows: the TOK
    tokens' upstream gradients g_q, then with EXACT (bf16 gradients) w's two bf16 parts
    (WB: (2, n_q, d)), else w in fp32, then zeros: [g_q(t) ; w_hi_q ; w_lo_q ; 0] and
    [g_q(t) ; w_q] at one token. G is a table of the queries' gradient pointers, typed like
    ``gref``."""
    j = tl.arange(0, NSEG * SP)
    seg = j // SP
    qj = j % SP
    on = (qj < n_q) & (seg < TOK + (2 if EXACT else 1)) & ((seg >= TOK) | (t + seg < n_tok))
    gp = tl.multiple_of(tl.load(G + qj, mask=on & (seg < TOK), other=0).to(tl.pointer_type(gref.dtype.element_ty)),
                        ALIGN)
    if EXACT:
        wrows = WB + ((seg - TOK) * n_q + qj) * d
    else:
        wrows = W + qj * d
    rows = tl.where(seg < TOK, gp + (t + seg).to(tl.int64) * d, wrows)
    return rows, on


@triton.jit
def _gather_loads(src, dst, rows, r_on, offs, kmask, acc_on, c0, d: tl.constexpr, WIDTH: tl.constexpr,
                  FULL: tl.constexpr, ACCUM: tl.constexpr):
    """The tiles of the chunk of WIDTH columns from c0 (those past d off unless FULL): the
    right operand's rows (``_gather_rows``; zeros where off), the sources' rows and their
    running sums' (zeros past n_acc or without ACCUM), and the chunk's columns, element
    offsets and mask. ``offs``: each row's token offset t * d, (KS, 1), or (1, 1) when
    every row has the program's one token."""
    rc = tl.arange(0, WIDTH)
    cols = c0 + rc
    if FULL:
        cmask = rc < WIDTH
    else:
        cmask = cols < d
    rmat = tl.load(rows[:, None] + cols[None, :], mask=r_on[:, None] & cmask[None, :], other=0.0)
    offs = offs + cols[None, :]
    mask = kmask[:, None] & cmask[None, :]
    x = tl.load(src[:, None] + offs, mask=mask, other=0.0)
    if ACCUM:
        prev = tl.load(dst[:, None] + offs, mask=mask & acc_on[:, None], other=0.0)
    else:
        prev = x
    return rmat, x, prev, cols, offs, mask


@triton.jit
def _gather_coef_mask(kmask, rseg, cols_on, SP: tl.constexpr, TOK: tl.constexpr, NSEG: tl.constexpr):
    """The coefficient tile's columns, matched to ``_gather_rows``' segments: each column's
    segment and query (NSEG SP,), and the (KS, NSEG SP) mask: a row (its token's segment
    rseg) takes a in that segment only and b in w's; ``cols_on`` turns columns off."""
    j = tl.arange(0, NSEG * SP)
    seg = j // SP
    on = kmask[:, None] & cols_on[None, :]
    if TOK > 1:
        on = on & ((seg[None, :] >= TOK) | (seg[None, :] == rseg[:, None]))
    return seg, j % SP, on


@triton.jit
def _gather_coefs(CA, CB, r_on, k, kmask, tr, rseg, h, n_src, n_q, H: tl.constexpr, SP: tl.constexpr,
                  TOK: tl.constexpr, NSEG: tl.constexpr):
    """Head h's coefficients of the KS rows (source k at token tr, its token's segment
    rseg): (KS, NSEG SP), a in the row's own token's segment and b in w's
    (``_gather_rows``): [a_q | b_q] at one token, with EXACT [a_q | b_q | b_q | 0]."""
    seg, qj, on = _gather_coef_mask(kmask, rseg, r_on, SP, TOK, NSEG)
    coef = ((tr.to(tl.int64) * H + h) * n_src + k)[:, None] * n_q + qj[None, :]       # (t, h, k, q)
    return tl.load(tl.where((seg < TOK)[None, :], CA, CB) + coef, mask=on, other=0.0)


@triton.jit
def _gather_coef_parts(CA, CB, k, kmask, tr, rseg, h, n_src, H: tl.constexpr, SP: tl.constexpr,
                       TOK: tl.constexpr, NSEG: tl.constexpr):
    """``_gather_coefs`` with EXACT from coefficients stored as two bf16 parts (the COEF
    pass's PARTS, ``_store_coef_parts``; zeros past n_q, so the loads are masked by source
    and segment only, in 16-byte runs): the (KS, NSEG SP) high and low parts, bf16, as the
    products take them."""
    segs = tl.arange(0, NSEG * SP) // SP
    seg, qj, on = _gather_coef_mask(kmask, rseg, segs < TOK + 2, SP, TOK, NSEG)
    row = ((tr.to(tl.int64) * H + h) * n_src + k)[:, None]                            # (t, h, k)
    cp = tl.where((seg < TOK)[None, :], CA, CB) + (row * (2 * SP) + qj[None, :])
    return tl.load(cp, mask=on, other=0.0), tl.load(cp + SP, mask=on, other=0.0)


@triton.jit
def _dot_bf16(a, b, acc):
    """acc + a b for bf16 a and b, fp32 accumulation."""
    if _INTERPRETED:  # the interpreter multiplies bf16 tiles wrongly: the same values in fp32
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        out = tl.dot(a, b, acc)
    return out


@triton.jit
def _dot_exact_rows(a, b, acc):
    """acc + a b for fp32 a and bf16 b (exact rows): a split in two bf16 parts, two
    products, within about 2^-17 of the fp32 product (b's rows w_hi and w_lo carry w to
    2^-17)."""
    a_hi, a_lo = _split_bf16(a)
    return _dot_bf16(a_hi, b, _dot_bf16(a_lo, b, acc))


@triton.jit
def _dot_fp32(a, b, PREC: tl.constexpr):
    """a b for fp32 tiles: tl.dot at input precision PREC ("ieee", "tf32x3", "tf32"), or
    "bf16x3": each operand split into two bf16 parts (``_split_bf16``) and three bf16
    products, the parts' product lo x lo left out: errors up to a few 2^-16 of the terms'
    size (tf32x3's are about 2^-21, one bf16 product's 2^-8)."""
    if PREC == "bf16x3":
        a_hi, a_lo = _split_bf16(a)
        b_hi, b_lo = _split_bf16(b)
        if _INTERPRETED:  # the interpreter multiplies bf16 tiles wrongly: the same values in fp32
            a_hi, a_lo = a_hi.to(tl.float32), a_lo.to(tl.float32)
            b_hi, b_lo = b_hi.to(tl.float32), b_lo.to(tl.float32)
            out = tl.dot(a_hi, b_lo, input_precision="ieee")
            out = tl.dot(a_lo, b_hi, out, input_precision="ieee")
            out = tl.dot(a_hi, b_hi, out, input_precision="ieee")
        else:
            out = tl.dot(a_hi, b_hi, tl.dot(a_lo, b_hi, tl.dot(a_hi, b_lo)))
    else:
        out = tl.dot(a, b, input_precision=PREC)
    return out


@triton.jit
def _bwd_gather_kernel(table, ref, gtable, W, WB, G, gref, CA, CB, CC, n_src, n_acc, n_q, n_tok, d: tl.constexpr,
                       dh: tl.constexpr, H: tl.constexpr, WIDTH: tl.constexpr, SPAN: tl.constexpr,
                       KS: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr, ACCUM: tl.constexpr,
                       PREC: tl.constexpr, EXACT: tl.constexpr = False, CH: tl.constexpr = 1,
                       XDOT: tl.constexpr = False, PARTS: tl.constexpr = False, TOK: tl.constexpr = 1,
                       NSEG: tl.constexpr = 4):
    """The gradients of an S-query read's sources from ``_bwd_kernel``'s COEF coefficients:
    grad_x = sum over queries q of (a_q g_q + r dz_q w_q) per head - (sum_q c_q) x (G: a
    table of the S queries' upstream-gradient pointers, typed like ``gref``). A 1-D
    grid over (token, block of KS sources) pairs, the block fastest, so the programs that
    share a token's upstream-gradient rows run side by side.

    Per token and head the sum over queries is a small matrix product: the KS sources'
    coefficients (KS, 2 SP) times the S upstream-gradient rows and S w rows of the head's
    columns (2 SP, columns), with SP the query count rounded up to a power of two, at
    least 8 (the product's inner size is then at least 16). A program walks its token's
    row in chunks of WIDTH columns, whatever the heads: a chunk that meets SPAN heads
    (at most; op's ``_gather_walk``) takes one product per head from the same right
    operand and keeps each column's own head's (a head of 160 lanes, 1B's, is 10 chunks
    of 128 with two products each, where a walk by head parts took 8 chunks of 128 and 8
    of 32). With XDOT (bf16 rows) ``-(sum c) x`` and the running sum enter the products too,
    as ``diag(-c) x + I prev``, so that triton's pipeliner copies the sources' and sums'
    tiles ahead of their chunk like the products' other operands (by hand, the next
    chunk's loads issued before this chunk's product measured slower: 27.2 against 22.9
    ms of gather at 1280/73 with 8 heads). ``PREC`` is the product's input precision for
    fp32 gradient rows: "ieee" for fp32 sources; for bf16 ones, whose gradients are
    rounded to bf16, "bf16x3" (three bf16 products, ``_dot_fp32``), "tf32x3" (three tf32
    products, about fp32's accuracy) or "tf32". With EXACT (bf16 gradient rows, which a
    bf16 product takes as they are) the right operand is all bf16, [g ; w_hi ; w_lo ; 0]
    (4 SP rows, one load per chunk; WB holds w's two bf16 parts, (2, n_q, d)), and the
    coefficients [a | b | b | 0] enter as two bf16 parts: two products (``_dot_exact_rows``),
    within about 2^-17 (G's rows in fp32 beside W's would take two masked loads per chunk:
    the gather measured 22.4 against 18.2 ms per step at 1280/73 with 8 heads, session 17).
    (The kernels this replaced multiplied and added per element: the first held all heads
    at once and ran at 21% of copy bandwidth at 1280/73 with 8 heads, its per-thread
    copies of every coefficient as many loads as multiply-adds; the second, a 2-D tile of
    (token, source) rows per head part, at 31%.) Each source's gradient is written once
    (added into a running sum for the first n_acc when ACCUM). CC holds c in CH parts
    (one per head from a COEF pass with a head per program), summed here. PARTS (with
    EXACT): the COEF pass stored the coefficients as their two bf16 parts
    (``_store_coef_parts``), which enter the products as they are: the same products,
    without the split at every chunk (at 1280 with 8 heads a head's coefficients meet 2
    or 3 chunks; offline with triton 3.6 the loop takes 221 SASS instructions per chunk
    and warp with PARTS, 401 without).

    ``TOK``: a program takes TOK tokens (a 1-D grid over groups of TOK tokens), for reads of
    at most KS / TOK sources: row r of the KS-row tiles is source r % (KS / TOK) at the
    group's token r // (KS / TOK), so a read of few sources fills the products' rows
    instead of padding one token's (a block of 1 to 8 sources cost what 16 do, session 34).
    The right operand holds every token's g rows, then w's: NSEG (a power of two) segments
    of SP rows, and a row's coefficients take a in its own token's segment only
    (``_gather_rows``, ``_gather_coef_mask``). TOK 1 is one token and block per program."""
    tl.static_assert(EXACT or not PARTS)
    elem = ref.dtype.element_ty
    rk = tl.arange(0, KS)
    if TOK == 1:  # a token and block of KS sources per program, the block fastest
        n_blk = tl.cdiv(n_src, KS)
        t = tl.program_id(0) // n_blk
        k = (tl.program_id(0) % n_blk) * KS + rk
        tr = t
        rseg = 0
        kmask = k < n_src
        toff = (t.to(tl.int64) * d)[None, None]                                          # (1, 1)
    else:  # TOK tokens of at most KS / TOK sources each
        t = tl.program_id(0) * TOK
        rseg = rk // (KS // TOK)
        k = rk % (KS // TOK)
        tr = t + rseg
        kmask = (k < n_src) & (tr < n_tok)
        toff = tr.to(tl.int64)[:, None] * d                                              # (KS, 1)
    rq = tl.arange(0, SP)
    cq = (tr.to(tl.int64) * n_src + k)[:, None] * n_q + rq[None, :]                    # (t, k, q)
    cmask = kmask[:, None] & (rq[None, :] < n_q)
    c_all = tl.load(CC + cq, mask=cmask, other=0.0)
    for part in range(1, CH):
        c_all += tl.load(CC + part * n_tok.to(tl.int64) * n_src * n_q + cq, mask=cmask, other=0.0)
    cs = tl.sum(c_all, axis=1)
    src = tl.multiple_of(tl.load(table + k, mask=kmask, other=0).to(tl.pointer_type(elem)), ALIGN)
    dst = tl.multiple_of(tl.load(gtable + k, mask=kmask, other=0).to(tl.pointer_type(elem)), ALIGN)
    acc_on = k < n_acc
    # the right operand's row pointers at this program's tokens, made once
    rows, r_on = _gather_rows(G, gref, W, WB, t, n_q, n_tok, d, SP, ALIGN, EXACT, TOK, NSEG)
    tl.static_assert(EXACT or not XDOT)  # bf16 rows
    if XDOT:  # -(sum of c) x and the running sum as products too: diag(-c) x + I prev
        on_diag = rk[:, None] == rk[None, :]
        neg_c = tl.where(on_diag, -cs[:, None], 0.0)                                    # (KS, KS)
        eye = tl.where(on_diag, 1.0, 0.0).to(tl.bfloat16)
    for it in range(tl.cdiv(d, WIDTH)):
        c0 = it * WIDTH
        h0 = c0 // dh
        if PARTS:
            c_hi, c_lo = _gather_coef_parts(CA, CB, k, kmask, tr, rseg, h0, n_src, H, SP, TOK, NSEG)
        else:
            cmat = _gather_coefs(CA, CB, r_on, k, kmask, tr, rseg, h0, n_src, n_q, H, SP, TOK, NSEG)
        rmat, x, prev, cols, offs, mask = _gather_loads(src, dst, rows, r_on, toff, kmask, acc_on, c0, d, WIDTH,
                                                        d % WIDTH == 0, ACCUM)
        if XDOT:
            base = _dot_exact_rows(neg_c, x, tl.zeros((KS, WIDTH), tl.float32))
            if ACCUM:
                base = _dot_bf16(eye, prev, base)
        else:
            base = tl.zeros((KS, WIDTH), tl.float32)
        for s in tl.static_range(SPAN):  # the chunk's heads in turn; each column keeps its own
            if s > 0:
                h = tl.minimum(h0 + s, H - 1)
                if PARTS:
                    c_hi, c_lo = _gather_coef_parts(CA, CB, k, kmask, tr, rseg, h, n_src, H, SP, TOK, NSEG)
                else:
                    cmat = _gather_coefs(CA, CB, r_on, k, kmask, tr, rseg, h, n_src, n_q, H, SP, TOK, NSEG)
            if PARTS:  # as _dot_exact_rows, the parts stored
                prod = _dot_bf16(c_hi, rmat, _dot_bf16(c_lo, rmat, base))
            elif EXACT:
                prod = _dot_exact_rows(cmat, rmat, base)                                # (KS, WIDTH) fp32
            else:
                prod = _dot_fp32(cmat, rmat, PREC)
            if s == 0:
                acc = prod
            else:
                acc = tl.where((cols // dh == h0 + s)[None, :], prod, acc)
        if not XDOT:
            acc -= cs[:, None] * x.to(tl.float32)
            if ACCUM:
                acc += prev.to(tl.float32)
        tl.store(dst[:, None] + offs, acc.to(dst.dtype.element_ty), mask=mask)


@triton.jit
def _dot_cols(rh, rc, dh: tl.constexpr, H: tl.constexpr, OFF: tl.constexpr, AXIS: tl.constexpr):
    """Column offsets and mask of a head part (``OFF`` onward, lanes ``rc``) as a 3-D
    (heads, 1, lanes) tile (AXIS 2) or (heads, lanes, 1) tile (AXIS 1)."""
    hh = rh[:, None, None]
    if AXIS == 2:
        cc = rc[None, None, :]
    else:
        cc = rc[None, :, None]
    return hh * dh + OFF + cc, (hh < H) & (OFF + cc < dh)


@triton.jit
def _split_bf16(x):
    """x (fp32) as bf16 high and low parts: hi + lo holds 16 of fp32's 24 mantissa bits, so
    a product with bf16 operands taken twice (hi, then lo, fp32 accumulation) is within
    about 2^-17 of the fp32 one."""
    hi = x.to(tl.bfloat16)
    return hi, (x - hi.to(tl.float32)).to(tl.bfloat16)


@triton.jit
def _store_coef_parts(C, row, q, value, mask, SP: tl.constexpr):
    """A COEF pass's coefficients of query q at ``row`` = (t * H + h) * n_src + k (token,
    head, source) as their two bf16 parts (``_split_bf16``; op's coef_parts): C is bf16,
    (n_tok, H, n_src, 2 SP), the high part at C[row * 2 SP + q], the low at
    C[row * 2 SP + SP + q], so that the gather loads them as product operands as they are
    (16-byte runs) instead of splitting them at every chunk. A row's queries past n_q
    are zeros (stored by the caller, or the buffer zeroed): the gather reads them
    unmasked."""
    hi, lo = _split_bf16(value)
    cp = C + (row * (2 * SP) + q)
    tl.store(cp, hi, mask=mask)
    tl.store(cp + SP, lo, mask=mask)


@triton.jit
def _operand(b, PREC: tl.constexpr):
    """An fp32 operand of ``_dot_split``: its two bf16 parts for "bf16x2", else itself twice."""
    if PREC == "bf16x2":
        hi, lo = _split_bf16(b)
    else:
        hi, lo = b, b
    return hi, lo


@triton.jit
def _dot_split(a, hi, lo, acc, PREC: tl.constexpr):
    """acc + a b, b from ``_operand``: with PREC "bf16x2", a bf16 (exact) and b's two bf16
    parts, two products; otherwise both fp32 at tl.dot's input precision PREC."""
    if PREC == "bf16x2":
        if _INTERPRETED:  # the interpreter multiplies bf16 tiles wrongly: the same values in fp32
            a, hi, lo = a.to(tl.float32), hi.to(tl.float32), lo.to(tl.float32)
            out = tl.dot(a, lo, tl.dot(a, hi, acc, input_precision="ieee"), input_precision="ieee")
        else:
            out = tl.dot(a, lo, tl.dot(a, hi, acc))
    else:
        out = tl.dot(a.to(tl.float32), hi, acc, input_precision=PREC)
    return out


@triton.jit
def _dot_split_left(hi, lo, b, acc, PREC: tl.constexpr):
    """acc + a b, a from ``_operand``: ``_dot_split`` with the split operand on the left."""
    if PREC == "bf16x2":
        if _INTERPRETED:  # (as in _dot_split)
            b, hi, lo = b.to(tl.float32), hi.to(tl.float32), lo.to(tl.float32)
            out = tl.dot(lo, b, tl.dot(hi, b, acc, input_precision="ieee"), input_precision="ieee")
        else:
            out = tl.dot(lo, b, tl.dot(hi, b, acc))
    else:
        out = tl.dot(hi, b.to(tl.float32), acc, input_precision=PREC)
    return out


@triton.jit
def _rows_operand(base, stride, rq, cols, cmask, qon, PREC: tl.constexpr):
    """The S queries' fp32 rows (w, or g at a token) at a head part's columns, transposed per
    head to (HP, lanes, SP), as ``_operand`` parts: rows ``base + q * stride``."""
    return _operand(tl.load(base + rq[None, None, :] * stride + cols, mask=cmask & qon, other=0.0), PREC)


@triton.jit
def _grad_rows(G, gref, row, rq, n_q, cols, cmask, qon, ALIGN: tl.constexpr, PREC: tl.constexpr,
               EXACT: tl.constexpr):
    """The S queries' upstream gradients at token ``row`` (G: a table of their pointers,
    typed like ``gref``), transposed per head to (HP, lanes, SP), as ``_dot_g``'s operand:
    with EXACT (bf16 rows and PREC "bf16x2") the rows as they are, twice; else
    ``_operand``'s parts of their fp32 values."""
    ptrs = tl.load(G + rq, mask=rq < n_q, other=0)
    ptrs = tl.multiple_of(ptrs.to(tl.pointer_type(gref.dtype.element_ty)), ALIGN)
    g = tl.load(ptrs[None, None, :] + row + cols, mask=cmask & qon, other=0.0)
    if EXACT:
        hi, lo = g, g
    else:
        hi, lo = _operand(g.to(tl.float32), PREC)
    return hi, lo


@triton.jit
def _dot_g(a, hi, lo, acc, PREC: tl.constexpr, EXACT: tl.constexpr):
    """acc + a g for ``_grad_rows``'s operand: one bf16 product when EXACT (a bf16 by bf16
    product is exact in fp32), else ``_dot_split``."""
    if EXACT:
        if _INTERPRETED:  # the interpreter multiplies bf16 tiles wrongly: the same values in fp32
            out = tl.dot(a.to(tl.float32), hi.to(tl.float32), acc, input_precision="ieee")
        else:
            out = tl.dot(a, hi, acc)
    else:
        out = _dot_split(a, hi, lo, acc, PREC)
    return out


@triton.jit
def _dot_tiles(table, k0, rk, n_src, row, ca, cma, cb, cmb, elem: tl.constexpr, ALIGN: tl.constexpr,
               DB: tl.constexpr, T: tl.constexpr = False):
    """Token ``row``'s tiles of sources k0 .. k0 + KS - 1 (zeros past n_src): part A
    (HP, KS, DA), part B (HP, KS, DB; part A again without one), and the sources' mask,
    for columns ``ca``, ``cb`` (``_dot_cols`` AXIS 2). T: the tiles transposed, (HP, DA, KS)
    and (HP, DB, KS), loaded as such (columns from ``_dot_cols`` AXIS 1)."""
    k = k0 + rk
    kmask = k < n_src
    src = tl.multiple_of(tl.load(table + k, mask=kmask, other=0).to(tl.pointer_type(elem)), ALIGN)
    if T:
        sp = src[None, None, :] + row                               # (1, 1, KS)
        km = kmask[None, None, :]
    else:
        sp = src[None, :, None] + row                               # (1, KS, 1)
        km = kmask[None, :, None]
    xa = tl.load(sp + ca, mask=km & cma, other=0.0)
    xb = xa
    if DB > 0:
        xb = tl.load(sp + cb, mask=km & cmb, other=0.0)
    return xa, xb, km


@triton.jit
def _sumsq(x, xt, SS_DOT: tl.constexpr):
    """Each source's sum of squares over a (heads, sources, lanes) tile x: (sources,), fp32.
    SS_DOT: as products, the diagonal of x x^T per head summed over heads, in the
    products' layout (xt: x^T, ``_dot_tiles``'s transposed tile, which the output's product reads
    anyway), where the elementwise sum moves the whole tile into another register layout
    through shared memory first (triton 3.6 at 1024 and 1280 with 8 heads). bf16 products
    are exact in fp32; fp32 tiles (the interpreter's) multiply at full precision."""
    if SS_DOT:
        if x.dtype == tl.bfloat16 and not _INTERPRETED:
            xx = tl.dot(x, xt)                                          # (HP, KS, KS)
        else:
            xx = tl.dot(x.to(tl.float32), xt.to(tl.float32), input_precision="ieee")
        rk = tl.arange(0, x.shape[1])
        diag = (rk[:, None] == rk[None, :])[None, :, :]
        out = tl.sum(tl.sum(tl.where(diag, xx, 0.0), axis=2), axis=0)
    else:
        xf = x.to(tl.float32)
        out = tl.sum(tl.sum(xf * xf, axis=2), axis=0)
    return out


@triton.jit
def _group_sum(t):
    """One head run as lane groups (the product kernels' VH): a (groups, sources, queries)
    tile of per-group sums as the head's sums, the same in every group."""
    return tl.broadcast_to(tl.sum(t, axis=0, keep_dims=True), t.shape)


@triton.jit
def _stat_rows(rq, rh, t, n_tok, H: tl.constexpr, VH: tl.constexpr):
    """Offsets (HP, SP) of query q and head h at token t in the (S, n_tok, heads)
    statistics, and the heads that own them: with VH (one head as lane groups) every group
    has head 0's offset and only group 0 owns it (writes it)."""
    if VH:
        hq = rq[None, :].to(tl.int64) * n_tok + t + rh[:, None] * 0
        own = rh[:, None] == 0
    else:
        hq = rq[None, :].to(tl.int64) * n_tok * H + t * H + rh[:, None]
        own = rh[:, None] < H
    return hq, own


@triton.jit
def _fwd_packed(table, RSTD, OUT_M, OUT_L, OUT_O, pid, rh, wa_hi, wa_lo, wb_hi, wb_lo, cxa, cmxa, cxb, cmxb,
                n_src, n_tok, n_q, n_prog, d: tl.constexpr, H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr,
                DB: tl.constexpr, KS: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr, PREC: tl.constexpr,
                STAGES: tl.constexpr, VH: tl.constexpr, TOK: tl.constexpr, elem: tl.constexpr):
    """``_fwd_dot_kernel``'s loop with SCALES for reads of at most KS / TOK sources: each step
    takes TOK tokens, row r of the KS-row tiles source r % (KS / TOK) at token
    r // (KS / TOK), so that few sources fill the products' rows instead of padding one
    token's (a block of 1 to 8 sources cost what 16 do, session 34). The logits are one
    product as before (the queries' weights are every token's); each token's softmax runs
    over its own rows, and the output is one product of the (TOK SP, KS) block-diagonal
    weights (token j's queries see only token j's rows) by the tile. A token has one block,
    so there is no online softmax."""
    rk = tl.arange(0, KS)
    seg = rk // (KS // TOK)                                             # a row's token in the step
    k = rk % (KS // TOK)                                                # its source
    rj = tl.arange(0, TOK)
    rq = tl.arange(0, SP)
    own = seg[None, None, :, None] == rj[None, :, None, None]           # (1, TOK, KS, 1)
    ri = tl.arange(0, TOK * SP)                                         # the output's rows: (token, query)
    for it in tl.range(0, tl.cdiv(tl.cdiv(n_tok, TOK) - pid, n_prog), num_stages=STAGES):
        t0 = (pid + it * n_prog) * TOK
        tr = t0 + seg
        kmask = (k < n_src) & (tr < n_tok)
        src = tl.multiple_of(tl.load(table + k, mask=kmask, other=0).to(tl.pointer_type(elem)), ALIGN)
        sp = (src + tr.to(tl.int64) * d)[None, :, None]                 # (1, KS, 1)
        km = kmask[None, :, None]
        xa = tl.load(sp + cxa, mask=km & cmxa, other=0.0)               # (HP, KS, DA)
        zr = _dot_split(xa, wa_hi, wa_lo, tl.zeros([HP, KS, SP], tl.float32), PREC)
        xb = xa
        if DB > 0:
            xb = tl.load(sp + cxb, mask=km & cmxb, other=0.0)
            zr = _dot_split(xb, wb_hi, wb_lo, zr, PREC)
        if VH:
            zr = _group_sum(zr)
        rstd = tl.load(RSTD + k.to(tl.int64) * n_tok + tr, mask=kmask, other=1.0)
        on = own & km[:, None]                                          # (1, TOK, KS, 1)
        z = tl.where(on, (zr * rstd[None, :, None])[:, None, :, :], float("-inf"))   # (HP, TOK, KS, SP)
        m = tl.max(z, axis=2)                                           # (HP, TOK, SP)
        m_on = tl.where(m > float("-inf"), m, 0.0)  # a token past n_tok: no rows, no NaN
        p = tl.where(on, tl.exp(z - m_on[:, :, None, :]), 0.0)
        l = tl.sum(p, axis=2)
        pt = tl.reshape(tl.permute(p, (0, 1, 3, 2)), (HP, TOK * SP, KS))  # block-diagonal
        p_hi, p_lo = _operand(pt, PREC)
        # m, l (S, n_tok, heads) as (heads, tokens, queries) tiles; with VH group 0's
        tt = (t0 + rj)[None, :, None]
        qq = rq[None, None, :]
        hh = rh[:, None, None]
        st_on = (qq < n_q) & (tt < n_tok)
        if VH:
            hq = qq.to(tl.int64) * n_tok + tt + hh * 0
            st_on = st_on & (hh == 0)
        else:
            hq = qq.to(tl.int64) * n_tok * H + tt * H + hh
            st_on = st_on & (hh < H)
        tl.store(OUT_M + hq, m, mask=st_on)
        tl.store(OUT_L + hq, l, mask=st_on)
        # o (S, n_tok, d): the output's row i is query i % SP at token t0 + i // SP
        qi = ri % SP
        ti = t0 + ri // SP
        orow = ((qi.to(tl.int64) * n_tok + ti) * d)[None, :, None]
        o_on = ((qi < n_q) & (ti < n_tok))[None, :, None]
        acc_a = _dot_split_left(p_hi, p_lo, xa, tl.zeros([HP, TOK * SP, DA], tl.float32), PREC)
        tl.store(OUT_O + orow + cxa, acc_a.to(OUT_O.dtype.element_ty), mask=cmxa & o_on)
        if DB > 0:
            acc_b = _dot_split_left(p_hi, p_lo, xb, tl.zeros([HP, TOK * SP, DB], tl.float32), PREC)
            tl.store(OUT_O + orow + cxb, acc_b.to(OUT_O.dtype.element_ty), mask=cmxb & o_on)


@triton.jit
def _fwd_dot_kernel(table, ref, W, OUT_M, OUT_L, OUT_O, RSTD, n_src, n_tok, n_q, n_prog, d: tl.constexpr,
                    dh: tl.constexpr, eps, H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr,
                    KS: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr, PREC: tl.constexpr,
                    STAGES: tl.constexpr = 1, SS_DOT: tl.constexpr = True, RS: tl.constexpr = False,
                    SPLIT: tl.constexpr = False, VH: tl.constexpr = False, SCALES: tl.constexpr = False,
                    TOK: tl.constexpr = 1):
    """Phase 1's forward (the S queries' unnormalised reads (m, l, o)) with every query in
    one program, programs persistent over tokens (the queries' weights loaded once per
    program): each source row is read once per token, where ``_fwd_kernel`` runs one
    program per query and reads it S times (from L2 after the first).

    Per token and head it is flash attention over depth: the logits of a block of KS
    sources for the SP queries are a (KS, head lanes) by (head lanes, SP) matrix product,
    and the block's contribution to the output another, (head lanes, KS) by (KS, SP), both
    batched over heads (``tl.dot`` on 3-D tiles; heads first). The key norm's sum of
    squares is a product too (``_sumsq`` with SS_DOT), the online softmax runs per block.
    The output is held transposed, (heads, lanes, SP), so that neither product's rows are
    the few queries. ``PREC``: the products' input precision: "bf16x2" for bf16 sources
    (the sources as they are, the fp32 operand split in two bf16 parts: within about 2^-17
    of fp32); "ieee" for fp32 ones, which only the interpreter runs (op's ``_dot_tile``).
    A head part is at least 16 lanes (a product's inner size), its lanes past the head
    masked (op's ``_head_parts``).
    A program walks its (token, block) pairs in one loop, which triton's pipeliner runs in
    ``STAGES`` stages: each block's tiles are copied into shared memory (cp.async) while
    the block before is reduced, on across tokens (a token has only 1 to 5 blocks at the
    paper's shapes). With every head in a program the tiles are loaded twice, as (KS, lanes)
    for the logits' product and as (lanes, KS) for the output's and the sum of squares'
    (``_dot_tiles`` with T, a second read from L2): the pipeliner copies ahead only loads
    whose every use is a product's operand, and the transpose of one tile in registers is
    not (session 20). ``RS``: each source's key-norm
    scale 1 / rms at each token is written to RSTD (n_src, n_tok), for the COEF pass one
    head per program.
    ``SPLIT``: one head per program (grid (n_prog, H), HP 1), with SCALES: a head sees
    only its lanes of a row. ``SCALES``: the key-norm scales read from RSTD
    (``_key_scales_kernel``), so there is no sum of squares, and the output is held as
    (SP, lanes), a (SP, KS) by (KS, lanes) product of the tile as loaded (the queries as
    the product's rows, padded to 16): no second read (session 22). Also without SPLIT,
    for VH.
    ``VH``: one head of d lanes run as H lane groups of dh (op's "dot_lane_groups"), a group
    where a head would be: the logits are the groups' sums (``_group_sum``), the same in
    every group, so the groups' softmax statistics agree and group 0 writes them for the
    one head; each group's output lanes are the head's at its columns. A head wider than
    128 lanes as one tile compiles to local memory (op's ``_dot_tile``).
    ``TOK`` > 1 (with SCALES; reads of at most KS / TOK sources): TOK tokens per step of a
    program (``_fwd_packed``)."""
    pid = tl.program_id(0)
    elem = ref.dtype.element_ty
    if SPLIT:
        rh = tl.program_id(1) + tl.arange(0, HP)
    else:
        rh = tl.arange(0, HP)
    rk = tl.arange(0, KS)
    rq = tl.arange(0, SP)
    qon = rq[None, None, :] < n_q
    hqmask = (rh[:, None] < H) & (rq[None, :] < n_q)                   # (HP, SP)
    # the queries' weights w = q * g, transposed per head: (HP, lanes, SP), once per program
    cwa, cmwa = _dot_cols(rh, tl.arange(0, DA), dh, H, 0, 1)
    wa_hi, wa_lo = _rows_operand(W, d, rq, cwa, cmwa, qon, PREC)
    cxa, cmxa = _dot_cols(rh, tl.arange(0, DA), dh, H, 0, 2)   # (HP, 1, DA)
    cxb, cmxb, cwb, cmwb = cxa, cmxa, cwa, cmwa  # (unused without part B)
    wb_hi, wb_lo = wa_hi, wa_lo
    if DB > 0:
        cwb, cmwb = _dot_cols(rh, tl.arange(0, DB), dh, H, DA, 1)
        wb_hi, wb_lo = _rows_operand(W, d, rq, cwb, cmwb, qon, PREC)
        cxb, cmxb = _dot_cols(rh, tl.arange(0, DB), dh, H, DA, 2)
    if TOK > 1:
        tl.static_assert(SCALES)
        _fwd_packed(table, RSTD, OUT_M, OUT_L, OUT_O, pid, rh, wa_hi, wa_lo, wb_hi, wb_lo, cxa, cmxa, cxb, cmxb,
                    n_src, n_tok, n_q, n_prog, d, H, HP, DA, DB, KS, SP, ALIGN, PREC, STAGES, VH, TOK, elem)
    else:
        # the output per head: with SCALES (SP, lanes), products of the source tiles as loaded;
        # else (lanes, SP), products of tiles loaded transposed too (see above)
        if SCALES:
            acc_a = tl.zeros([HP, SP, DA], tl.float32)
        else:
            acc_a = tl.zeros([HP, DA, SP], tl.float32)
        acc_b = acc_a  # (unused without part B)
        if DB > 0:
            if SCALES:
                acc_b = tl.zeros([HP, SP, DB], tl.float32)
            else:
                acc_b = tl.zeros([HP, DB, SP], tl.float32)
        m_i = tl.full([HP, SP], float("-inf"), tl.float32)
        l_i = tl.zeros([HP, SP], tl.float32)
        nb = tl.cdiv(n_src, KS)
        # one loop over this program's (token, block) pairs, so that triton's pipeliner copies
        # blocks ahead on across tokens (a token has only 1 to 5 blocks at the paper's shapes)
        for it in tl.range(0, tl.cdiv(n_tok - pid, n_prog) * nb, num_stages=STAGES):
            kb = it % nb
            t = pid + (it // nb) * n_prog
            k0 = kb * KS
            row = tl.cast(t, tl.int64) * d
            xa, xb, km = _dot_tiles(table, k0, rk, n_src, row, cxa, cmxa, cxb, cmxb, elem, ALIGN, DB)
            xat, xbt = xa, xb
            if not SCALES:
                xat, xbt, _ = _dot_tiles(table, k0, rk, n_src, row, cwa, cmwa, cwb, cmwb, elem, ALIGN, DB, True)
            if SCALES:
                rstd = tl.load(RSTD + (k0 + rk).to(tl.int64) * n_tok + t, mask=k0 + rk < n_src, other=1.0)
            else:
                ss = _sumsq(xa, xat, SS_DOT)                                 # (KS,)
            zr = _dot_split(xa, wa_hi, wa_lo, tl.zeros([HP, KS, SP], tl.float32), PREC)
            if DB > 0:
                if not SCALES:
                    ss += _sumsq(xb, xbt, SS_DOT)
                zr = _dot_split(xb, wb_hi, wb_lo, zr, PREC)
            if VH:
                zr = _group_sum(zr)
            if not SCALES:
                rstd = 1.0 / tl.sqrt(ss / d + eps)
            if RS:
                tl.store(RSTD + (k0 + rk).to(tl.int64) * n_tok + t, rstd, mask=k0 + rk < n_src)
            z = tl.where(km, zr * rstd[None, :, None], float("-inf"))
            m_i = tl.where(kb == 0, float("-inf"), m_i)  # a token's first block: its softmax starts afresh
            m_new = tl.maximum(m_i, tl.max(z, axis=1))
            alpha = tl.exp(m_i - m_new)  # 0 at a token's first block, which clears l and the output
            p = tl.exp(z - m_new[:, None, :])                               # (HP, KS, SP)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if SCALES:
                p_hi, p_lo = _operand(tl.permute(p, (0, 2, 1)), PREC)
                acc_a = _dot_split_left(p_hi, p_lo, xa, acc_a * alpha[:, :, None], PREC)
                if DB > 0:
                    acc_b = _dot_split_left(p_hi, p_lo, xb, acc_b * alpha[:, :, None], PREC)
            else:
                p_hi, p_lo = _operand(p, PREC)
                acc_a = _dot_split(xat, p_hi, p_lo, acc_a * alpha[:, None, :], PREC)
                if DB > 0:
                    acc_b = _dot_split(xbt, p_hi, p_lo, acc_b * alpha[:, None, :], PREC)
            m_i = m_new
            if kb == nb - 1:  # the token's last block: m, l (S, n_tok, heads); o (S, n_tok, d)
                hq, own = _stat_rows(rq, rh, t, n_tok, H, VH)                # (HP, SP)
                tl.store(OUT_M + hq, m_i, mask=hqmask & own)
                tl.store(OUT_L + hq, l_i, mask=hqmask & own)
                if SCALES:
                    qrow = rq[None, :, None].to(tl.int64) * n_tok * d + row    # (1, SP, 1)
                    q_on = rq[None, :, None] < n_q
                    tl.store(OUT_O + qrow + cxa, acc_a.to(OUT_O.dtype.element_ty), mask=cmxa & q_on)
                    if DB > 0:
                        tl.store(OUT_O + qrow + cxb, acc_b.to(OUT_O.dtype.element_ty), mask=cmxb & q_on)
                else:
                    qrow = rq[None, None, :].to(tl.int64) * n_tok * d + row    # (1, 1, SP)
                    tl.store(OUT_O + qrow + cwa, acc_a.to(OUT_O.dtype.element_ty), mask=cmwa & qon)
                    if DB > 0:
                        tl.store(OUT_O + qrow + cwb, acc_b.to(OUT_O.dtype.element_ty), mask=cmwb & qon)


@triton.jit
def _key_scales_kernel(table, ref, OUT, n_tok, d: tl.constexpr, eps, BT: tl.constexpr, BD: tl.constexpr,
                       ALIGN: tl.constexpr):
    """Each source's key-norm scale 1 / sqrt(mean(x^2) + eps) at BT tokens (grid: sources
    * token tiles, one axis as ``_fwd_kernel``'s) into OUT (n_src, n_tok), fp32, for the
    product kernels with a head per program, which see only their head's lanes of a row."""
    n_src = tl.num_programs(0) // tl.cdiv(n_tok, BT)
    k = tl.program_id(0) % n_src
    rt = (tl.program_id(0) // n_src) * BT + tl.arange(0, BT)
    src = tl.multiple_of(tl.load(table + k).to(tl.pointer_type(ref.dtype.element_ty)), ALIGN)
    ss = tl.zeros([BT], tl.float32)
    for c0 in range(0, d, BD):
        rc = c0 + tl.arange(0, BD)
        x = tl.load(src + rt[:, None].to(tl.int64) * d + rc[None, :], mask=(rt[:, None] < n_tok) & (rc[None, :] < d),
                    other=0.0).to(tl.float32)
        ss += tl.sum(x * x, axis=1)
    tl.store(OUT + k.to(tl.int64) * n_tok + rt, 1.0 / tl.sqrt(ss / d + eps), mask=rt < n_tok)


@triton.jit
def _coef_packed(table, W, G, gref, STAT, OFF, CA, CB, cc, RSTD, dw_a, dw_b, pid, rh, wa_hi, wa_lo, wb_hi, wb_lo,
                 cxa, cmxa, cxb, cmxb, cwa, cmwa, cwb, cmwb, n_src, n_tok, n_q, n_prog, d: tl.constexpr,
                 H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, KS: tl.constexpr,
                 SP: tl.constexpr, ALIGN: tl.constexpr, PREC: tl.constexpr, STAGES: tl.constexpr,
                 G_EXACT: tl.constexpr, PARTS: tl.constexpr, TOK: tl.constexpr, elem: tl.constexpr):
    """``_coef_dot_kernel``'s loop with SPLIT and SCALES for reads of at most KS / TOK sources:
    each step takes TOK tokens, row r of the KS-row tiles source r % (KS / TOK) at token
    r // (KS / TOK), as ``_fwd_packed``. The logits are one product as before; g.x one
    product against every token's upstream-gradient rows, (KS, lanes) by (lanes, TOK SP),
    of which each row keeps its own token's columns; statistics, offsets and the stored
    coefficients are per row; d(q*g) sums over every row as before. Returns d(q*g)."""
    rk = tl.arange(0, KS)
    seg = rk // (KS // TOK)                                             # a row's token in the step
    k = rk % (KS // TOK)                                                # its source
    rq = tl.arange(0, SP)
    rc = tl.arange(0, TOK * SP)                                         # g's columns: (token, query)
    qc = rc % SP
    ptrs = tl.load(G + qc, mask=qc < n_q, other=0)
    ptrs = tl.multiple_of(ptrs.to(tl.pointer_type(gref.dtype.element_ty)), ALIGN)
    own = seg[None, :, None, None] == tl.arange(0, TOK)[None, None, :, None]      # (1, KS, TOK, 1)
    for it in tl.range(0, tl.cdiv(tl.cdiv(n_tok, TOK) - pid, n_prog), num_stages=STAGES):
        t0 = (pid + it * n_prog) * TOK
        tr = t0 + seg
        kmask = (k < n_src) & (tr < n_tok)
        src = tl.multiple_of(tl.load(table + k, mask=kmask, other=0).to(tl.pointer_type(elem)), ALIGN)
        sp = (src + tr.to(tl.int64) * d)[None, :, None]                 # (1, KS, 1)
        km = kmask[None, :, None]
        xa = tl.load(sp + cxa, mask=km & cmxa, other=0.0)               # (HP, KS, DA)
        # the TOK tokens' upstream gradients, (HP, lanes, TOK SP)
        tc = t0 + rc // SP
        gon = ((qc < n_q) & (tc < n_tok))[None, None, :]
        gp = ptrs[None, None, :] + (tc.to(tl.int64) * d)[None, None, :]
        ga = tl.load(gp + cwa, mask=cmwa & gon, other=0.0)
        if G_EXACT:
            ga_hi, ga_lo = ga, ga
        else:
            ga_hi, ga_lo = _operand(ga.to(tl.float32), PREC)
        zr = _dot_split(xa, wa_hi, wa_lo, tl.zeros([HP, KS, SP], tl.float32), PREC)   # (HP, KS, SP)
        gx = _dot_g(xa, ga_hi, ga_lo, tl.zeros([HP, KS, TOK * SP], tl.float32), PREC, G_EXACT)
        xb = xa
        if DB > 0:
            xb = tl.load(sp + cxb, mask=km & cmxb, other=0.0)
            gb = tl.load(gp + cwb, mask=cmwb & gon, other=0.0)
            if G_EXACT:
                gb_hi, gb_lo = gb, gb
            else:
                gb_hi, gb_lo = _operand(gb.to(tl.float32), PREC)
            zr = _dot_split(xb, wb_hi, wb_lo, zr, PREC)
            gx = _dot_g(xb, gb_hi, gb_lo, gx, PREC, G_EXACT)
        gx = tl.sum(tl.where(own, tl.reshape(gx, (HP, KS, TOK, SP)), 0.0), axis=2)  # each row's own token
        # each row's statistics and offsets, (HP, KS, SP), and key-norm scale (the forward's)
        hq = rq[None, None, :].to(tl.int64) * n_tok * H + tr[None, :, None] * H + rh[:, None, None]
        on = km & (rh[:, None, None] < H) & (rq[None, None, :] < n_q)
        st = tl.load(STAT + hq, mask=on, other=0.0)
        of = tl.load(OFF + hq, mask=on, other=0.0)
        rstd = tl.load(RSTD + k.to(tl.int64) * n_tok + tr, mask=kmask, other=1.0)
        r3 = rstd[None, :, None]
        a = tl.where(on, tl.exp(zr * r3 - st), 0.0)
        dz = a * (gx + of)
        rdz = dz * r3
        c = tl.sum(dz * zr, axis=0) * (rstd * rstd * rstd / d)[:, None]  # (KS, SP)
        # coefficients of source k, query q, head h at token tr (see _coef_dot_kernel)
        crow = (tr.to(tl.int64)[None, :, None] * H + rh[:, None, None]) * n_src + k[None, :, None]  # (HP, KS, 1)
        if PARTS:  # every query of the row, zeros past n_q (a and r dz are zero there)
            c_on = km & (rh[:, None, None] < H)
            _store_coef_parts(CA, crow, rq[None, None, :], a, c_on, SP)
            _store_coef_parts(CB, crow, rq[None, None, :], rdz, c_on, SP)
        else:
            tl.store(CA + crow * n_q + rq[None, None, :], a, mask=on)
            tl.store(CB + crow * n_q + rq[None, None, :], rdz, mask=on)
        kq = (tr.to(tl.int64) * n_src + k)[:, None] * n_q + rq[None, :]   # (KS, SP)
        tl.store(cc + kq, c, mask=kmask[:, None] & (rq[None, :] < n_q))
        r_hi, r_lo = _operand(tl.permute(rdz, (0, 2, 1)), PREC)
        dw_a = _dot_split_left(r_hi, r_lo, xa, dw_a, PREC)
        if DB > 0:
            dw_b = _dot_split_left(r_hi, r_lo, xb, dw_b, PREC)
    return dw_a, dw_b


@triton.jit
def _coef_grads(G, gref, WB, GT, CT, a, rdz, c, k, kmask, t, row, h, cx, cmx, n_acc, n_cacc, n_q, n_tok,
                d: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr, elem: tl.constexpr, C_OUT: tl.constexpr,
                W_LO: tl.constexpr = True):
    """``_coef_dot_kernel``'s GRAD: one head's lanes ``cx`` (HP 1, 1, lanes) of the gradients of
    the KS sources k at token t, formed in the COEF pass itself from the coefficients it
    has just made (the gather's sum without its x term): a g + r dz w per query, one
    product of [a | r dz | r dz | 0] (KS, 4 SP), as two bf16 parts, by the rows
    [g_q(t) ; w_hi_q ; w_lo_q ; 0] (4 SP, lanes): bf16 upstream gradients and w's two bf16
    parts (WB, (2, n_q, d)), as the gather's EXACT. Without W_LO, [a | r dz] (KS, 2 SP) by
    [g_q(t) ; w_hi_q]: w rounded to bf16 (at most 2^-9 of the r dz w term, as much as the
    bf16 sum it is added into rounds), half the right operand that the pipeliner copies
    per token, so that at 1280 eight programs fit an SM's shared memory. Added into the
    first n_acc sources' running sums (GT: the gradients' pointer table). The key norm's x
    term, -(sum c) x, needs every head's c: this head's share (C_OUT, once per part) is added into the
    source's deferred terms instead (CT: a table of (H, n_tok) fp32 buffers, the first
    n_cacc added into, the rest written), which a later read of the source or the sink
    applies (op's ``GradientSink``). The adds are atomic only so that no program waits on a
    load: each element has one program per launch, so the result is reproducible."""
    HP: tl.constexpr = a.shape[0]
    KS: tl.constexpr = a.shape[1]
    if W_LO:
        left = tl.reshape(tl.join(tl.join(a, rdz), tl.join(rdz, tl.zeros(a.shape, tl.float32))), (HP, KS, 4 * SP))
        j = tl.arange(0, 4 * SP)  # a row's query j // 4 and part j % 4
        qj = j // 4
        part = j % 4
        on = (qj < n_q) & (part < 3)
    else:  # [a | r dz] by [g ; w_hi]: w rounded to bf16, half the right operand
        left = tl.reshape(tl.join(a, rdz), (HP, KS, 2 * SP))
        j = tl.arange(0, 2 * SP)  # a row's query j // 2 and part j % 2
        qj = j // 2
        part = j % 2
        on = qj < n_q
    gp = tl.load(G + qj, mask=on & (part == 0), other=0).to(tl.pointer_type(gref.dtype.element_ty))
    # the bases' alignment hint given after the select (triton 3.9 drops one given before
    # it: 2-byte loads), the row offsets added after it as multiples of d, so that the
    # compiler sees their alignment whatever d is (WB is op's fresh (2, n_q, d) tensor)
    base = tl.multiple_of(tl.where(part == 0, gp, WB), ALIGN)
    rows = base + tl.where(part == 0, t, (part - 1) * n_q + qj).to(tl.int64) * d
    right = tl.load(rows[None, :, None] + cx, mask=on[None, :, None] & cmx, other=0.0)      # (HP, 4 SP, lanes)
    dst = tl.multiple_of(tl.load(GT + k, mask=kmask, other=0).to(tl.pointer_type(elem)), ALIGN)
    offs = dst[None, :, None] + row + cx
    mask = kmask[None, :, None] & cmx
    # the running sums enter as a product, I prev, so that triton's pipeliner copies their
    # tiles ahead like the products' other operands (the gather's XDOT)
    prev = tl.load(offs, mask=mask & (k < n_acc)[None, :, None], other=0.0)
    rk = tl.arange(0, KS)
    eye = tl.broadcast_to(tl.where(rk[:, None] == rk[None, :], 1.0, 0.0).to(tl.bfloat16)[None, :, :], (HP, KS, KS))
    dx = _dot_exact_rows(left, right, _dot_bf16(eye, prev, tl.zeros([HP, KS, cx.shape[2]], tl.float32)))
    tl.store(offs, dx.to(elem), mask=mask)
    if C_OUT:  # written by a source's first deferring read, then added into (no load to wait on)
        cp = tl.load(CT + k, mask=kmask, other=0).to(tl.pointer_type(tl.float32)) + (h.to(tl.int64) * n_tok + t)
        cs = tl.sum(c, axis=1)
        summing = k < n_cacc
        tl.store(cp, cs, mask=kmask & ~summing)
        # (one program adds into each element per launch: the sums' order is the launches')
        tl.atomic_add(cp, cs, mask=kmask & summing, sem="relaxed")


@triton.jit
def _coef_dot_kernel(table, ref, W, G, gref, STAT, OFF, DW, CA, CB, CC, RSTD, n_src, n_tok, n_q, n_prog,
                     GT, WB, CT, n_acc, n_cacc, d: tl.constexpr,
                     dh: tl.constexpr, eps, H: tl.constexpr, HP: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr,
                     KS: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr, PREC: tl.constexpr,
                     STAGES: tl.constexpr = 1, SS_DOT: tl.constexpr = True, G_EXACT: tl.constexpr = False,
                     SPLIT: tl.constexpr = False, PARTS: tl.constexpr = False, VH: tl.constexpr = False,
                     SCALES: tl.constexpr = False, TOK: tl.constexpr = 1, GRAD: tl.constexpr = False,
                     GL: tl.constexpr = 64, W_LO: tl.constexpr = True):
    """The COEF pass of phase 1's backward (``_bwd_kernel`` with COEF, see there) with every
    query in one program, as matrix products like ``_fwd_dot_kernel``: programs persistent
    over tokens, each source row read once per token. Per block of KS sources and head,
    the logits zr and g.x are (KS, lanes) by (lanes, SP) products; the coefficients a,
    r dz (per head) and c are stored into CA, CB (n_tok, H, n_src, S) and CC (n_tok, n_src, S) for
    ``_bwd_gather_kernel``; d(q*g) += (lanes, KS) by (KS, SP) products, held transposed
    per program and written to its row of DW (n_prog, S, d). G: a table of the S queries'
    upstream-gradient pointers, typed like ``gref``; with G_EXACT (bf16 ones, PREC "bf16x2")
    they enter g.x as they are, one product (``_grad_rows``).

    SPLIT: one head per program (grid (n_prog, H), HP 1), with SCALES, each head's share
    of c stored apart, CC (H, n_tok, n_src, S), for the gather to sum. SCALES: the
    sources' key-norm scales read from RSTD (n_src, n_tok) as the forward had them (no sum
    of squares over the row), and d(q*g) held as (SP, lanes), (SP, KS) by (KS, lanes)
    products of the tiles as loaded (no transposed second read, as ``_fwd_dot_kernel``'s
    SCALES); also without SPLIT, for VH. The split programs
    run apart; with every head in one program, that program is one 8-warp program per SM
    whose warps meet at each block's reductions over heads and layout conversions.

    ``VH``: one head as lane groups, as ``_fwd_dot_kernel``'s: the logits and g.x are the
    groups' sums (one reduction across the warps for both), from which the head's
    coefficients and c follow as (KS, SP) tiles; every group's d(q*g) lanes take the same
    r dz.
    ``TOK`` > 1 (with SPLIT and SCALES; reads of at most KS / TOK sources): TOK tokens per
    step of a program (``_coef_packed``).

    ``GRAD`` (with SPLIT, SCALES, G_EXACT and TOK 1): no coefficients stored and no gather
    after: each head's program forms its lanes of the sources' gradients from them at
    once (``_coef_grads``; GT, WB, CT, n_acc, n_cacc there), so a phase-1 backward reads
    each source once instead of twice, and the key norm's x term is deferred. ``GL``: the
    lanes of part A per product (a power of two up to DA)."""
    pid = tl.program_id(0)
    elem = ref.dtype.element_ty
    if SPLIT:
        rh = tl.program_id(1) + tl.arange(0, HP)
    else:
        rh = tl.arange(0, HP)
    rk = tl.arange(0, KS)
    rq = tl.arange(0, SP)
    qon = rq[None, None, :] < n_q
    hq_on = (rh[:, None] < H) & (rq[None, :] < n_q)                    # (HP, SP)
    cwa, cmwa = _dot_cols(rh, tl.arange(0, DA), dh, H, 0, 1)            # (HP, DA, 1)
    wa_hi, wa_lo = _rows_operand(W, d, rq, cwa, cmwa, qon, PREC)
    cxa, cmxa = _dot_cols(rh, tl.arange(0, DA), dh, H, 0, 2)            # (HP, 1, DA)
    # d(q*g) per head: with SCALES (SP, lanes) products of the source tiles as loaded; else
    # (lanes, SP) ones of tiles loaded transposed too (the sum of squares' products take them)
    if SCALES:
        dw_a = tl.zeros([HP, SP, DA], tl.float32)
    else:
        dw_a = tl.zeros([HP, DA, SP], tl.float32)
    cxb, cmxb, cwb, cmwb = cxa, cmxa, cwa, cmwa  # (unused without part B)
    wb_hi, wb_lo, dw_b = wa_hi, wa_lo, dw_a
    if DB > 0:
        cwb, cmwb = _dot_cols(rh, tl.arange(0, DB), dh, H, DA, 1)
        wb_hi, wb_lo = _rows_operand(W, d, rq, cwb, cmwb, qon, PREC)
        cxb, cmxb = _dot_cols(rh, tl.arange(0, DB), dh, H, DA, 2)
        if SCALES:
            dw_b = tl.zeros([HP, SP, DB], tl.float32)
        else:
            dw_b = tl.zeros([HP, DB, SP], tl.float32)
    if TOK > 1:
        tl.static_assert(SPLIT and SCALES and not GRAD)
        cc = CC + tl.program_id(1).to(tl.int64) * n_tok * n_src * n_q  # this head's share of c
        dw_a, dw_b = _coef_packed(table, W, G, gref, STAT, OFF, CA, CB, cc, RSTD, dw_a, dw_b, pid, rh, wa_hi, wa_lo,
                                  wb_hi, wb_lo, cxa, cmxa, cxb, cmxb, cwa, cmwa, cwb, cmwb, n_src, n_tok, n_q,
                                  n_prog, d, H, HP, DA, DB, KS, SP, ALIGN, PREC, STAGES, G_EXACT, PARTS, TOK, elem)
    else:
        nb = tl.cdiv(n_src, KS)
        # one loop over this program's (token, block) pairs, as in _fwd_dot_kernel
        for it in tl.range(0, tl.cdiv(n_tok - pid, n_prog) * nb, num_stages=STAGES):
            kb = it % nb
            t = pid + (it // nb) * n_prog
            k0 = kb * KS
            row = tl.cast(t, tl.int64) * d
            xa, xb, km = _dot_tiles(table, k0, rk, n_src, row, cxa, cmxa, cxb, cmxb, elem, ALIGN, DB)
            xat, xbt = xa, xb
            if not SCALES:
                xat, xbt, _ = _dot_tiles(table, k0, rk, n_src, row, cwa, cmwa, cwb, cmwb, elem, ALIGN, DB, True)
            # this token's upstream gradients (transposed like w), statistics and offsets, loaded
            # at every block (L2 hits after the first) so that the pipeliner copies them ahead
            ga_hi, ga_lo = _grad_rows(G, gref, row, rq, n_q, cwa, cmwa, qon, ALIGN, PREC, G_EXACT)
            if DB > 0:
                gb_hi, gb_lo = _grad_rows(G, gref, row, rq, n_q, cwb, cmwb, qon, ALIGN, PREC, G_EXACT)
            if VH:  # the one head's, (SP,)
                qs = rq.to(tl.int64) * n_tok + t
                st = tl.load(STAT + qs, mask=rq < n_q, other=0.0)
                of = tl.load(OFF + qs, mask=rq < n_q, other=0.0)
            else:
                hq = rq[None, :].to(tl.int64) * n_tok * H + t * H + rh[:, None]    # (HP, SP)
                st = tl.load(STAT + hq, mask=hq_on, other=0.0)
                of = tl.load(OFF + hq, mask=hq_on, other=0.0)
            if SCALES:  # the forward's
                rstd = tl.load(RSTD + (k0 + rk).to(tl.int64) * n_tok + t, mask=k0 + rk < n_src, other=1.0)
            else:
                ss = _sumsq(xa, xat, SS_DOT)                                 # (KS,)
            zero = tl.zeros([HP, KS, SP], tl.float32)
            zr = _dot_split(xa, wa_hi, wa_lo, zero, PREC)                    # (HP, KS, SP)
            gx = _dot_g(xa, ga_hi, ga_lo, zero, PREC, G_EXACT)
            if DB > 0:
                if not SCALES:
                    ss += _sumsq(xb, xbt, SS_DOT)
                zr = _dot_split(xb, wb_hi, wb_lo, zr, PREC)
                gx = _dot_g(xb, gb_hi, gb_lo, gx, PREC, G_EXACT)
            if not SCALES:
                rstd = 1.0 / tl.sqrt(ss / d + eps)
            # coefficients of source k, query q, head h at token t: CA, CB at
            # ((t * H + h) * n_src + k) * n_q + q (PARTS: ``_store_coef_parts``), CC at
            # (t * n_src + k) * n_q + q
            k = k0 + rk
            kq = k.to(tl.int64)[:, None] * n_q + rq[None, :]                       # (KS, SP)
            kq_on = (k < n_src)[:, None] & (rq[None, :] < n_q)
            if VH:
                # the one head's logits and g.x: the groups' sums, in one reduction across the
                # program's warps; its coefficients and c from them as (KS, SP), no further
                # reduction over the groups
                zs, gs = tl.split(tl.sum(tl.join(zr, gx), axis=0))             # (KS, SP)
                r2 = rstd[:, None]
                a = tl.where(kq_on, tl.exp(zs * r2 - st[None, :]), 0.0)
                dz = a * (gs + of[None, :])
                rdz = dz * r2
                c = dz * zs * (rstd * rstd * rstd / d)[:, None]               # (KS, SP)
                row1 = tl.cast(t, tl.int64) * n_src + k.to(tl.int64)[:, None]  # (KS, 1): head 0
                if PARTS:  # every query of the row, zeros past n_q (a and r dz are zero there)
                    _store_coef_parts(CA, row1, rq[None, :], a, (k < n_src)[:, None], SP)
                    _store_coef_parts(CB, row1, rq[None, :], rdz, (k < n_src)[:, None], SP)
                else:
                    tl.store(CA + tl.cast(t, tl.int64) * n_src * n_q + kq, a, mask=kq_on)
                    tl.store(CB + tl.cast(t, tl.int64) * n_src * n_q + kq, rdz, mask=kq_on)
                rdz = tl.broadcast_to(rdz[None, :, :], (HP, KS, SP))            # every group's d(q*g)
            else:
                r3 = rstd[None, :, None]
                on = km & hq_on[:, None, :]
                a = tl.where(on, tl.exp(zr * r3 - st[:, None, :]), 0.0)
                dz = a * (gx + of[:, None, :])
                rdz = dz * r3
                c = tl.sum(dz * zr, axis=0) * (rstd * rstd * rstd / d)[:, None]  # (KS, SP)
                t_h = tl.cast(t, tl.int64) * H + rh[:, None, None]
                if GRAD:  # part A in pieces of GL lanes (fewer registers for the product's output)
                    tl.static_assert(SPLIT and SCALES and G_EXACT)
                    for piece in tl.static_range(DA // GL):
                        cg, cmg = _dot_cols(rh, tl.arange(0, GL), dh, H, piece * GL, 2)
                        _coef_grads(G, gref, WB, GT, CT, a, rdz, c, k, k < n_src, t, row, tl.program_id(1), cg, cmg,
                                    n_acc, n_cacc, n_q, n_tok, d, SP, ALIGN, elem, piece == 0, W_LO)
                    if DB > 0:
                        _coef_grads(G, gref, WB, GT, CT, a, rdz, c, k, k < n_src, t, row, tl.program_id(1), cxb,
                                    cmxb, n_acc, n_cacc, n_q, n_tok, d, SP, ALIGN, elem, False, W_LO)
                elif PARTS:  # every query of the row, zeros past n_q (a and r dz are zero there)
                    crow = t_h * n_src + k.to(tl.int64)[None, :, None]
                    c_on = km & (rh[:, None, None] < H)
                    _store_coef_parts(CA, crow, rq[None, None, :], a, c_on, SP)
                    _store_coef_parts(CB, crow, rq[None, None, :], rdz, c_on, SP)
                else:
                    tl.store(CA + t_h * n_src * n_q + kq[None, :, :], a, mask=on)
                    tl.store(CB + t_h * n_src * n_q + kq[None, :, :], rdz, mask=on)
            if not GRAD:
                cc = CC
                if SPLIT:  # this head's share
                    cc += tl.program_id(1).to(tl.int64) * n_tok * n_src * n_q
                tl.store(cc + tl.cast(t, tl.int64) * n_src * n_q + kq, c, mask=kq_on)
            if SCALES:
                r_hi, r_lo = _operand(tl.permute(rdz, (0, 2, 1)), PREC)
                dw_a = _dot_split_left(r_hi, r_lo, xa, dw_a, PREC)
                if DB > 0:
                    dw_b = _dot_split_left(r_hi, r_lo, xb, dw_b, PREC)
            else:
                r_hi, r_lo = _operand(rdz, PREC)
                dw_a = _dot_split(xat, r_hi, r_lo, dw_a, PREC)
                if DB > 0:
                    dw_b = _dot_split(xbt, r_hi, r_lo, dw_b, PREC)
    # this program's d(q*g) rows: DW[pid, q, h * dh + c]
    if SCALES:
        dwrow = (pid.to(tl.int64) * n_q + rq[None, :, None]) * d
        q_on = rq[None, :, None] < n_q
        tl.store(DW + dwrow + cxa, dw_a, mask=cmxa & q_on)
        if DB > 0:
            tl.store(DW + dwrow + cxb, dw_b, mask=cmxb & q_on)
    else:
        dwrow = (pid.to(tl.int64) * n_q + rq[None, None, :]) * d
        tl.store(DW + dwrow + cwa, dw_a, mask=cmwa & qon)
        if DB > 0:
            tl.store(DW + dwrow + cwb, dw_b, mask=cmwb & qon)


@triton.jit
def _finalize_fwd_kernel(O, L, X, n_tok, d: tl.constexpr, dh: tl.constexpr, H: tl.constexpr,
                         BM: tl.constexpr, BD: tl.constexpr):
    """X = O / L per head: O (n_tok, d) fp32 or bf16 and L (n_tok, H) fp32, X (n_tok, d) in its own
    dtype. Program pid: head pid % H (the heads of a token block side by side) of tokens
    (pid // H) * BM ..; the head's dh columns in chunks of BD. Division rounded as torch's
    (div_rn; triton's ``/`` is an approximate one), so that x equals the eager path's."""
    pid = tl.program_id(0)
    h = pid % H
    rm = (pid // H) * BM + tl.arange(0, BM)
    rmask = rm < n_tok
    rm64 = rm.to(tl.int64)
    l = tl.load(L + rm64 * H + h, mask=rmask, other=1.0)
    l = tl.broadcast_to(l[:, None], (BM, BD))  # div_rn does not broadcast
    row = rm64[:, None] * d + h * dh
    for c0 in range(0, dh, BD):
        cols = c0 + tl.arange(0, BD)
        mask = rmask[:, None] & (cols < dh)[None, :]
        o = tl.load(O + row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(X + row + cols[None, :], tl.math.div_rn(o, l).to(X.dtype.element_ty), mask=mask)


@triton.jit
def _finalize_bwd_kernel(G, X, L, GO, GL, n_tok, d: tl.constexpr, dh: tl.constexpr, H: tl.constexpr,
                         BM: tl.constexpr, BD: tl.constexpr, ROWS: tl.constexpr = False):
    """finalize's backward, programs as the forward's: GO = G / L (n_tok, d) and
    GL = -(G . X) / L (n_tok, H) per head, fp32, from G and X (the output, rounded to its
    dtype) in their own dtypes. As the eager path: 1 / L rounded, then products.
    ROWS: only GL = -(G . X), not divided (a phase-1 row in final form; op's ``_RowGrads``)."""
    pid = tl.program_id(0)
    h = pid % H
    rm = (pid // H) * BM + tl.arange(0, BM)
    rmask = rm < n_tok
    rm64 = rm.to(tl.int64)
    l = tl.load(L + rm64 * H + h, mask=rmask, other=1.0)
    inv = tl.math.div_rn(tl.full([BM], 1.0, tl.float32), l)
    row = rm64[:, None] * d + h * dh
    gx = tl.zeros([BM, BD], tl.float32)  # per lane; one reduction after the last chunk
    for c0 in range(0, dh, BD):
        cols = c0 + tl.arange(0, BD)
        mask = rmask[:, None] & (cols < dh)[None, :]
        g = tl.load(G + row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if not ROWS:
            tl.store(GO + row + cols[None, :], g * inv[:, None], mask=mask)
        gx += g * tl.load(X + row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if ROWS:
        tl.store(GL + rm64 * H + h, -tl.sum(gx, axis=1), mask=rmask)
    else:
        tl.store(GL + rm64 * H + h, -tl.sum(gx, axis=1) * inv, mask=rmask)


@triton.jit
def _deferred_norm_kernel(X, T, C, n_tok, d, H, HP: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    """T -= (sum over heads of C) x per token, in place: a source X's deferred key-norm x
    terms (C: (H, n_tok) fp32 shares of c, ``_coef_grads``) into its gradient's sum T,
    computed in fp32. Grid (token blocks of BT, column blocks of BD)."""
    rt = tl.program_id(0) * BT + tl.arange(0, BT)
    rc = tl.program_id(1) * BD + tl.arange(0, BD)
    rh = tl.arange(0, HP)
    tmask = rt < n_tok
    c = tl.sum(tl.load(C + rh[None, :].to(tl.int64) * n_tok + rt[:, None], mask=tmask[:, None] & (rh[None, :] < H),
                       other=0.0), axis=1)
    offs = rt.to(tl.int64)[:, None] * d + rc[None, :]
    mask = tmask[:, None] & (rc[None, :] < d)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    t = tl.load(T + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(T + offs, (t - c[:, None] * x).to(T.dtype.element_ty), mask=mask)
