"""Shared checks for the fused routing kernels (CPU interpreter and CUDA)."""

from __future__ import annotations

import math

import torch

from mhar import routing
from mhar.routing import reference as R


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    assert torch.isfinite(a).all(), "non-finite values (unwritten or poisoned output?)"
    # relative error; a reference that is zero by symmetry (e.g. the query gradient
    # with one source) is compared against a tiny absolute floor instead
    floor = 1e-2 * math.sqrt(b.numel())
    return ((a - b).norm() / b.norm().clamp_min(floor)).item()


def make_inputs(n, lead, d, dtype, device, S=None, gen=None):
    """Fresh random inputs with logits of order one (queries ~ N(0, 4/d))."""
    srcs = [torch.randn(*lead, d, generator=gen, device="cpu").to(device=device, dtype=dtype).requires_grad_()
            for _ in range(n)]
    shape = (d,) if S is None else (S, d)
    q = (torch.randn(*shape, generator=gen) * (2 / math.sqrt(d))).to(device).requires_grad_()
    g = (1 + 0.2 * torch.randn(*shape, generator=gen)).to(device).requires_grad_()
    return srcs, q, g


def _f64(ts):
    return [t.detach().cpu().double().requires_grad_() for t in ts]


def check_route(n, lead, d, heads, dtype=torch.float32, device="cpu", tol=1e-5, gen=None, stacked=False):
    srcs, q, g = make_inputs(n, lead, d, dtype, device, gen=gen)
    arg = torch.stack([s.detach() for s in srcs]).requires_grad_() if stacked else srcs
    y = routing.route(arg, q, g, heads)
    assert y.shape == srcs[0].shape and y.dtype == dtype
    s64, (q64, g64) = _f64(srcs), _f64([q, g])
    y64 = R.route(s64, q64, g64, heads)
    assert rel(y, y64) <= tol, ("forward", rel(y, y64))
    gy = torch.randn(y64.shape, generator=gen, dtype=torch.float64)
    wrt = [arg, q, g] if stacked else [*srcs, q, g]
    grads = torch.autograd.grad(y, wrt, gy.to(device=device, dtype=dtype))
    ref = torch.autograd.grad(y64, [*s64, q64, g64], gy)
    if stacked:
        ref = [torch.stack(ref[:n]), *ref[n:]]
    names = ["sources"] * (len(ref) - 2) + ["query", "norm_weight"]
    for name, a, b in zip(names, grads, ref):
        assert a.shape == b.shape
        assert rel(a, b) <= tol, (name, rel(a, b))
    return grads


def check_partial(n, lead, d, heads, S, dtype=torch.float32, device="cpu", tol=1e-5, gen=None):
    srcs, q, g = make_inputs(n, lead, d, dtype, device, S=S, gen=gen)
    p = routing.route_partial(srcs, q, g, heads)
    s64, (q64, g64) = _f64(srcs), _f64([q, g])
    p64 = R.route_partial(s64, q64, g64, heads)
    for name, a, b in zip("mlo", p, p64):
        assert a.shape == b.shape and a.dtype == torch.float32
        assert rel(a, b) <= tol, (name, rel(a, b))
    gl = torch.randn(p64.l.shape, generator=gen, dtype=torch.float64)
    go = torch.randn(p64.o.shape, generator=gen, dtype=torch.float64)
    loss = (p.l * gl.to(device, torch.float32)).sum() + (p.o * go.to(device, torch.float32)).sum()
    grads = torch.autograd.grad(loss, [*srcs, q, g])
    ref = torch.autograd.grad((p64.l * gl).sum() + (p64.o * go).sum(), [*s64, q64, g64])
    for a, b in zip(grads, ref):
        assert rel(a, b) <= tol, rel(a, b)


def check_key_scales_chain(n, lead, d, heads, S, dtype=torch.float32, device="cpu", tol=1e-5, gen=None):
    """Phase-1 reads of a growing source list (a stream's chunks) sharing one
    ``KeyScales``, each against fp64: values, and the gradients of a random projection.
    The scales are computed once per source: the calls after the first add the new ones."""
    srcs, q, g = make_inputs(n, lead, d, dtype, device, S=S, gen=gen)
    s64, (q64, g64) = _f64(srcs), _f64([q, g])
    scales = routing.KeyScales()
    for cut in sorted({max(1, n // 3), max(1, 2 * n // 3), n}):
        p = routing.route_partial(srcs[:cut], q, g, heads, scales=scales)
        p64 = R.route_partial(s64[:cut], q64, g64, heads)
        _check_reads([p.l, p.o], [p64.l, p64.o], [*srcs[:cut], q, g], [*s64[:cut], q64, g64], device,
                     torch.float32, tol, gen)
        assert len(scales._rows) == cut
        ref = 1 / torch.sqrt(torch.stack([x.detach().float().pow(2).mean(-1).flatten() for x in srcs[:cut]]) + R.KEY_NORM_EPS)
        assert torch.allclose(scales.table(srcs[:cut], R.KEY_NORM_EPS), ref, rtol=1e-5, atol=0), "key scales"


def _check_reads(outs, full, inputs, inputs64, device, dtype, tol, gen):
    """Reads ``outs`` against their fp64 references ``full``: values, and the gradients
    of a random projection of all of them with respect to ``inputs`` (``inputs64``)."""
    for a, b in zip(outs, full):
        assert rel(a, b) <= tol
    gys = [torch.randn(b.shape, generator=gen, dtype=torch.float64) for b in full]
    grads = torch.autograd.grad(sum((a * gy.to(device, dtype)).sum() for a, gy in zip(outs, gys)), inputs)
    ref = torch.autograd.grad(sum((b * gy).sum() for b, gy in zip(full, gys)), inputs64)
    for a, b in zip(grads, ref):
        assert rel(a, b) <= tol, rel(a, b)


def check_two_phase(n_old, n_new, lead, d, heads, S, dtype=torch.float32, device="cpu", tol=1e-5, gen=None,
                    fused=False):
    """Phase 1 over old sources for S queries, phase 2 over new ones, merge, finalize
    (or, fused, ``route_merge``): equals the one-pass read, values and gradients."""
    srcs, q, g = make_inputs(n_old + n_new, lead, d, dtype, device, S=S, gen=gen)
    old, new = srcs[:n_old], srcs[n_old:]
    p1 = routing.route_partial(old, q, g, heads)
    outs = []
    for s in range(S):
        one = routing.Partial(p1.m[s:s + 1], p1.l[s:s + 1], p1.o[s:s + 1])
        if fused:
            outs.append(routing.route_merge(one, new, q[s], g[s], heads))
            continue
        p2 = routing.route_partial(new, q[s:s + 1], g[s:s + 1], heads)
        outs.append(routing.finalize(routing.merge_partials(one, p2), srcs[0].shape, dtype)[0])
    s64, (q64, g64) = _f64(srcs), _f64([q, g])
    full = [R.route(s64, q64[s], g64[s], heads) for s in range(S)]
    _check_reads(outs, full, [*srcs, q, g], [*s64, q64, g64], device, dtype, tol, gen)


def check_phase_one_rows(n_old, n_new, lead, d, heads, S, dtype=torch.float32, device="cpu", tol=1e-5, gen=None):
    """``route_partial_rows`` as the routed stream takes it: row 0 normalised alone
    (``finalize``, the read of the old sources), rows 1 .. S - 2 merged with the new
    sources (``route_merge``), the last row not read (its gradient is zero). Values and
    gradients equal the fp64 reference read."""
    srcs, q, g = make_inputs(n_old + n_new, lead, d, dtype, device, S=S, gen=gen)
    old, new = srcs[:n_old], srcs[n_old:]
    rows = routing.route_partial_rows(old, q, g, heads)
    used = range(S - 1 if S > 2 else S)
    outs = [routing.finalize(rows[0], srcs[0].shape, dtype)[0]]
    outs += [routing.route_merge(rows[s], new, q[s], g[s], heads) for s in used if s]
    s64, (q64, g64) = _f64(srcs), _f64([q, g])
    full = [R.route(s64[:n_old] if s == 0 else s64, q64[s], g64[s], heads) for s in used]
    _check_reads(outs, full, [*srcs, q, g], [*s64, q64, g64], device, dtype, tol, gen)
    return rows


def check_rows_read_twice(n_old, n_new, lead, d, heads, S, dtype=torch.float32, device="cpu", tol=1e-5, gen=None):
    """Each row of ``route_partial_rows`` read by two sites (``finalize`` and
    ``route_merge``, each with its own new sources): every read's gradient reaches the
    phase-1 read's inputs, as it does through the rows as autograd views."""
    srcs, q, g = make_inputs(n_old + 2 * n_new, lead, d, dtype, device, S=S, gen=gen)
    rows = routing.route_partial_rows(srcs[:n_old], q, g, heads)
    outs, reads = [], []
    for s in range(S):
        for k, first in enumerate((n_old, n_old + n_new)):
            if (s + k) % 3 == 2:  # some reads normalise the row alone
                outs.append(routing.finalize(rows[s], srcs[0].shape, dtype)[0])
                reads.append((s, []))
            else:
                outs.append(routing.route_merge(rows[s], srcs[first:first + n_new], q[s], g[s], heads))
                reads.append((s, list(range(first, first + n_new))))
    s64, (q64, g64) = _f64(srcs), _f64([q, g])
    full = [R.route(s64[:n_old] + [s64[i] for i in idx], q64[s], g64[s], heads) for s, idx in reads]
    _check_reads(outs, full, [*srcs, q, g], [*s64, q64, g64], device, dtype, tol, gen)
    return rows


def check_deterministic(n, lead, d, heads, S=1, device="cpu", dtype=torch.float32, gen=None):
    srcs, q, g = make_inputs(n, lead, d, dtype, device, S=None if S == 1 else S, gen=gen)

    def run():
        if S == 1:
            out = routing.route(srcs, q, g, heads)
        else:
            out = routing.route_partial(srcs, q, g, heads).o
        gy = torch.ones_like(out) + torch.arange(out.numel(), device=device).view(out.shape).to(out.dtype) * 1e-3
        return [out, *torch.autograd.grad(out, [*srcs, q, g], gy)]

    a, b = run(), run()
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def _chain(emb, leaves, q, g, heads, extra, chunk, sink, block=0):
    """The miniature stream of :func:`check_sink_chain`; sink None: plain autograd (and
    the reference read when the inputs are fp64)."""
    fp64 = emb.dtype == torch.float64
    add = sink.register if sink is not None else (lambda t: t)
    span = sink.span if sink is not None else (lambda start, count: None)

    def read(srcs, k, sp):
        if fp64:
            return R.route(srcs, q[k], g[k], heads)
        return routing.route(srcs, q[k], g[k], heads, sink=sp)

    if block:
        return _block_chain(emb, leaves, q, g, heads, chunk, sink, block, read)
    sources = [add(emb * 1)]
    start, rows = 0, None
    scales = routing.KeyScales()  # one per forward, as the routed stream keeps
    for k in range(len(leaves)):
        side = [leaves[k - 1] * 0.5] if extra and k else []
        if chunk and k % chunk == 0:
            start = len(sources)
            rows = routing.route_partial_rows(sources, q[k:k + chunk], g[k:k + chunk], heads, sink=span(0, start),
                                              scales=scales)
        if chunk:
            row = rows[k % chunk]  # as the routed stream takes it
            new = sources[start:] + side
            sp = span(start, len(new) - len(side))
            # (the stream's newest sources hand their key-norm scales on; a side tensor is not one)
            y = routing.route_merge(row, new, q[k], g[k], heads, sink=sp, scales=None if side else scales) if new else \
                routing.finalize(row, emb.shape, emb.dtype)[0]
        else:
            y = read(sources + side, k, span(0, len(sources)))
        sources.append(add(y * leaves[k]))
    return read(sources, len(leaves), span(0, len(sources)))


def _block_chain(emb, leaves, q, g, heads, two_phase, sink, block, read):
    """Block routing in miniature: the sources are the embedding and the block summaries,
    and a block's later sites also read its running sum. With a sink the sum is built by
    ``running_sum``, read through the summary's reserved entry, and with ``two_phase``
    each block's sites take phase-1 rows, then the running sum's fused merge. Without a
    sink: plain sums and one-pass reads (the reference)."""
    register = sink.register if sink is not None else (lambda t, entry=None: t)
    span = sink.span if sink is not None else (lambda start, count: None)
    sources, total, entry, rows = [register(emb * 1)], None, None, None
    for k in range(len(leaves)):
        j = k % block
        if j == 0 and sink is not None:
            entry = sink.reserve()
            if two_phase:
                rows = routing.route_partial_rows(sources, q[k:k + block], g[k:k + block], heads,
                                                  sink=span(0, len(sources)))
        if rows is not None:
            y = routing.route_merge(rows[j], [total], q[k], g[k], heads, sink=span(entry, 1)) if j else \
                routing.finalize(rows[j], emb.shape, emb.dtype)[0]
        else:
            srcs = sources + ([total] if j else [])
            y = read(srcs, k, span(0, len(srcs)))
        y = y * leaves[k]
        if sink is not None:
            total = sink.running_sum(total if j else None, y, entry)
        else:
            total = total + y if j else y
        if j == block - 1 or k == len(leaves) - 1:
            sources.append(register(total, entry))
    return read(sources, len(leaves), span(0, len(sources)))


def check_sink_chain(n_sites, lead, d, heads, dtype=torch.float32, device="cpu", tol=1e-5, gen=None,
                     extra=False, chunk=0, block=0):
    """A stream in miniature with its sources registered in a GradientSink: site k reads
    every source so far (plus, with ``extra``, an unregistered tensor, as block routing's
    running sum was read until session 34), and its output (read x a leaf) becomes a new source; a final
    read covers them all. With ``chunk``, reads go through phase 1 (every ``chunk`` sites)
    and the fused phase 2, with spans over the registered sources. With ``block``, block
    routing instead (``_block_chain``; ``chunk`` then only turns two-phase on). Values and
    the leaves' gradients equal an fp64 reference through plain autograd, which sums each
    source's per-site gradients itself."""
    (emb,), q, g = make_inputs(1, lead, d, dtype, device, S=n_sites + 1, gen=gen)
    leaves = [torch.randn(*lead, d, generator=gen).to(device, dtype).requires_grad_() for _ in range(n_sites)]
    sink = routing.GradientSink()
    out = _chain(emb, leaves, q, g, heads, extra, chunk, sink, block)
    e64, q64, g64, *l64 = _f64([emb, q, g, *leaves])
    ref = _chain(e64, l64, q64, g64, heads, extra, 0, None, block)
    assert rel(out, ref) <= tol, ("forward", rel(out, ref))
    gy = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(out, [emb, q, g, *leaves], gy.to(device, dtype))
    want = torch.autograd.grad(ref, [e64, q64, g64, *l64], gy)
    assert all(b is None for b in sink.buffers), "the sink must hand over and drop every sum"
    for name, a, b in zip(["embedding", "queries", "norm_weights"] + ["leaf"] * n_sites, got, want):
        assert a.shape == b.shape
        assert rel(a, b) <= tol, (name, rel(a, b))


def check_coef_grads(n_sites, lead, d, heads, device="cpu", tol=1.5e-2, gen=None, chunk=4):
    """Config "coef_grads": a bf16 chain through a sink in chunks, its phase-1 backward
    passes forming the sources' gradients in the COEF pass with the key norm's x terms
    deferred, gives the gradients of the two passes (COEF pass, then gather) on the same
    inputs, within bf16 rounding; once with phase 2 claiming the deferred terms (the
    stream's way) and once with the sink applying them all. The pass must have run with
    GRAD, and every deferred term must have been applied and dropped."""
    from mhar.routing import op as rop

    state = gen.get_state()

    def grads(coef_grads):
        gen.set_state(state)
        (emb,), q, g = make_inputs(1, lead, d, torch.bfloat16, device, S=n_sites + 1, gen=gen)
        leaves = [torch.randn(*lead, d, generator=gen).to(device, torch.bfloat16).requires_grad_()
                  for _ in range(n_sites)]
        sink = routing.GradientSink()
        rop.TUNE = {**(rop.TUNE or {}), "coef_grads": coef_grads}
        out = _chain(emb, leaves, q, g, heads, False, chunk, sink)
        gy = torch.randn(out.shape, generator=gen).to(device, torch.bfloat16)
        got = torch.autograd.grad(out, [emb, q, g, *leaves], gy)
        assert all(b is None for b in sink.buffers) and all(t is None for t in sink.deferred)
        return got

    launched = []
    real = rop._launch_dot

    def spy(kernel, grid, args, consts, warps, device, maxnreg=None, launch=None):
        launched.append(bool(consts.get("GRAD")))
        return real(kernel, grid, args, consts, warps, device, maxnreg, launch)

    tune, claim = rop.TUNE, rop.SinkSpan.claim_last
    rop._launch_dot = spy
    try:
        want = grads(False)
        assert not any(launched)
        for claiming in (True, False):
            if not claiming:  # every deferred term left to the sink
                rop.SinkSpan.claim_last = lambda self, heads: None
            launched.clear()
            got = grads(True)
            assert any(launched), "the COEF pass did not form the gradients"
            for name, a, b in zip(["embedding", "queries", "norm_weights"] + ["leaf"] * n_sites, got, want):
                assert rel(a.float(), b.float()) <= tol, (name, claiming, rel(a.float(), b.float()))
    finally:
        rop._launch_dot, rop.TUNE, rop.SinkSpan.claim_last = real, tune, claim


def _finalize_case(lead, d, heads, S, dtype, device, gen):
    """``finalize`` of a random partial read (S rows; l >= 1, as a read's is, and
    x = o / l of order one), then of rows 0 and S - 1 as rows of a phase-1 read taken
    directly. Returns [x, grad_l, grad_o] of each, and the fp64 reference's."""
    from mhar.routing import op as rop

    n_tok, dh = math.prod(lead), d // heads
    l = 1 + 3 * torch.rand(S, n_tok, heads, generator=gen, dtype=torch.float64)
    o = (torch.randn(S, n_tok, heads, dh, generator=gen, dtype=torch.float64) * l[..., None]).view(S, n_tok, d)
    gy = torch.randn(S, *lead, d, generator=gen, dtype=torch.float64)
    m = torch.zeros_like(l, device=device, dtype=torch.float32)  # finalize does not read it
    l32, o32 = (t.to(device, torch.float32).requires_grad_() for t in (l, o))
    l64, o64 = (t.to(device).requires_grad_() for t in (l, o))
    x64 = R.finalize(R.Partial(m.double(), l64, o64), (*lead, d), torch.float64)
    want = [x64, *torch.autograd.grad(x64, [l64, o64], gy.to(device))]
    x = routing.finalize(routing.Partial(m, l32, o32), (*lead, d), dtype)
    assert x.shape == x64.shape and x.dtype == dtype
    got = [x, *torch.autograd.grad(x, [l32, o32], gy.to(device, dtype))]
    for i in (0, S - 1):
        rows = routing.PhaseOneRows(routing.Partial(m, l32, o32), rop._RowGrads(l.shape, device))
        x = routing.finalize(rows[i], (*lead, d), dtype)
        x.backward(gy[i:i + 1].to(device, dtype))
        assert l32.grad is None and o32.grad is None, "a direct row goes to the read's backward"
        # the row in final form (g, lse, -(g . x)), as gradients of l and o
        grad_l, grad_o = rop._RowGrads.as_partial(m, *rows.grads.take())
        got += [x, grad_l[i], grad_o[i]]
        want += [x64[i:i + 1], want[1][i], want[2][i]]
    return got, want


def check_finalize(lead, d, heads, S=3, dtype=torch.float32, device="cpu", tol=1e-5, gen=None, eager=True):
    """``finalize`` of a partial read and of rows of a phase-1 read (their gradients written
    into its buffers): x and the gradients of l and o equal the fp64 reference's. With
    ``eager``, also the eager path's on the same inputs: x exactly for an fp32 output (and
    on a GPU for any: the interpreter truncates to 16 bits, torch rounds), grad_o exactly
    (g times the rounded 1 / l either way), grad_l up to the sums' order."""
    from mhar.routing import op as rop

    state = gen.get_state()
    got, want = _finalize_case(lead, d, heads, S, dtype, device, gen)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape and rel(a, b) <= tol, (["x", "grad_l", "grad_o"][k % 3], k // 3, rel(a, b))
    if not eager:
        return
    real = rop._finalize_on_triton
    rop._finalize_on_triton = lambda *args: False
    try:
        ref, _ = _finalize_case(lead, d, heads, S, dtype, device, torch.Generator().set_state(state))
    finally:
        rop._finalize_on_triton = real
    exact_x = dtype == torch.float32 or device != "cpu"
    for k, (a, b) in enumerate(zip(got, ref)):
        what = ["x", "grad_l", "grad_o"][k % 3]
        if what == "grad_o" or (what == "x" and exact_x):
            assert torch.equal(a, b), (what, k // 3)
        else:
            assert rel(a, b) <= (tol if dtype != torch.float32 else 1e-6), (what, k // 3, rel(a, b))


def check_finalized_rows(n, lead, d, heads, S, dtype=torch.float32, device="cpu", tol=1e-5, gen=None):
    """``route_partial_rows`` with every row normalised by ``finalize`` (its gradients into
    the phase-1 read's buffer): the reads and every input's gradients equal the fp64
    reference's."""
    srcs, q, g = make_inputs(n, lead, d, dtype, device, S=S, gen=gen)
    rows = routing.route_partial_rows(srcs, q, g, heads)
    outs = [routing.finalize(rows[s], srcs[0].shape, dtype)[0] for s in range(S)]
    s64, (q64, g64) = _f64(srcs), _f64([q, g])
    full = [R.route(s64, q64[s], g64[s], heads) for s in range(S)]
    _check_reads(outs, full, [*srcs, q, g], [*s64, q64, g64], device, dtype, tol, gen)
    return rows


def check_final_read_sums(device, d, batch, gen, monkeypatch, tol=1e-4):
    """Full routing, two-phase (chunks of 4 of 8 sublayers): the final read is a merge with
    a phase-1 read of its own, made when the last chunk began. So the model's backward
    starts the gradient sums of that chunk's 4 new sources first, and the other 5 sources'
    sums only in that phase 1's backward, after the chunk's sublayers have run theirs. A
    one-pass final read would start all 9 at once, every activation still held (session
    45: 6.1 GB of a 1B step's peak). Loss and gradients equal one-pass's."""
    from mhar.model import Decoder, ModelConfig
    from mhar.model.config import method_stream
    from mhar.streams import base

    live = []  # sums alive after each change to a sink's sums

    class Tracked(list):
        def __setitem__(self, i, v):
            super().__setitem__(i, v)
            live.append(sum(b is not None for b in self))

    class TrackingSink(routing.GradientSink):
        def __init__(self):
            super().__init__()
            self.buffers = Tracked()

    def build(schedule):
        stream = method_stream("mhar", 8, d, heads=8, schedule=schedule, chunk=4)
        torch.manual_seed(0)
        return Decoder(ModelConfig(vocab_size=64, d_model=d, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=2 * d,
                                   max_seq_len=64, stream=stream)).to(device)

    two, one = build("two-phase"), build("one-pass")
    with torch.no_grad():  # reads away from uniform means
        two.residual.queries.copy_(torch.randn(two.residual.queries.shape, generator=gen) * 0.5)
    one.load_state_dict(two.state_dict())
    ids = torch.randint(0, 64, (batch, 33), generator=gen).to(device)
    with monkeypatch.context() as m:
        m.setattr(base.routing, "GradientSink", TrackingSink)
        loss = two.loss(ids[:, :-1], ids[:, 1:])
        loss.backward()
    assert live and max(live) == 5, live  # the last chunk's 4 new sources, then the 5 its phase 1 read
    want = one.loss(ids[:, :-1], ids[:, 1:])
    want.backward()
    assert rel(loss, want) <= tol, (loss, want)
    for (name, a), b in zip(two.named_parameters(), one.parameters()):
        assert rel(a.grad, b.grad) <= tol, name
