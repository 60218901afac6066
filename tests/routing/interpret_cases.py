"""Cases for the fused routing kernels on the CPU through Triton's interpreter.

Run by test_triton_interpret.py in a subprocess with TRITON_INTERPRET=1 (triton reads it
when it is first imported, so it cannot be switched on inside a shared pytest process).

Every case draws fresh random inputs, poisons the kernels' outputs with NaN before
each call (MHAR_ROUTING_POISON=1) and compares forward and every gradient with the
reference run in fp64 (relative error <= 1e-5 for fp32 inputs, <= 1e-2 for bf16)."""

from __future__ import annotations

import os
import sys
import weakref
import zlib

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

sys.path.insert(0, os.path.dirname(__file__))

import triton.language as tl  # noqa: E402

from mhar import routing  # noqa: E402
from mhar.routing import op as rop  # noqa: E402
from mhar.routing import triton_kernels as tk  # noqa: E402
from mhar.routing import reference as R  # noqa: E402
from routing_checks import (check_coef_grads, check_deterministic, check_final_read_sums, check_finalize,  # noqa: E402
                            check_finalized_rows, check_key_scales_chain, check_partial, check_phase_one_rows,
                            check_rows_read_twice,
                            check_route, check_sink_chain, check_two_phase, make_inputs, rel)


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpret.py (sets TRITON_INTERPRET=1)"
    rop.POISON = True
    routing.set_backend("triton")
    yield
    routing.set_backend(None)


@pytest.fixture
def gen(request):
    # fresh inputs per case (a different seed for every test id)
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def small_tiles():
    # force several token tiles (and several persistent backward programs) per call
    rop.TUNE = dict(fwd_elems=32, bwd_elems=32)
    yield
    rop.TUNE = None


SHAPES = [  # (N, leading shape, d, H)
    (1, (3,), 1, 1),
    (2, (5,), 123, 1),
    (3, (2, 3), 16, 2),
    (4, (7,), 32, 4),
    (5, (3,), 64, 8),
    (3, (3,), 48, 16),  # head width 3: not a power of two
    (73, (2,), 16, 16),
    (6, (5,), 40, 8),  # head width 5
    (3, (4,), 80, 1),  # 64 + 16 lanes, like 1280 = 1024 + 256
    (2, (3,), 160, 8),  # head width 20 = 16 + 4, like 160 = 128 + 32
]


# A stream in miniature through two-phase reads with bf16 sources (check_sink_chain with
# chunks): 12 sites whose outputs become sources, each phase-1 row rounded to bf16 once more
# (rows_bf16), and every bf16 rounding in the interpreter a truncation (a GPU rounds to
# nearest): the largest error, the leaves' gradients, measured 2.3-2.9% off fp64 (seeds 0
# and 1, three configs), against 2.2-2.3% with fp32 rows (session 32).
CHAIN_BF16_TOL = 3e-2


@pytest.mark.parametrize("n,lead,d,heads", SHAPES)
def test_route_fp32(n, lead, d, heads, gen):
    check_route(n, lead, d, heads, gen=gen)


@pytest.mark.parametrize("n,lead,d,heads", [(4, (9,), 16, 1), (3, (11,), 24, 4), (2, (13,), 123, 1)])
def test_route_many_tiles(n, lead, d, heads, gen, small_tiles):
    check_route(n, lead, d, heads, gen=gen)


@pytest.mark.parametrize("tune", [dict(gather_sources=8), dict(gather_cols=24)])
def test_gather_config_must_fit_a_matrix_product(tune, gen):
    srcs, q, g = make_inputs(3, (5,), 32, torch.float32, "cpu", S=2, gen=gen)
    p = routing.route_partial(srcs, q, g, 4)
    rop.TUNE = tune
    try:
        with pytest.raises(ValueError, match="power of two >= 16"):
            p.o.sum().backward()
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("n,lead,d,heads,S", [(1, (3,), 1, 1, 2), (3, (5,), 123, 1, 3), (4, (2, 3), 32, 8, 4),
                                              (73, (2,), 16, 4, 2), (5, (3,), 48, 16, 1)])
def test_partial_fp32(n, lead, d, heads, S, gen):
    check_partial(n, lead, d, heads, S, gen=gen)


@pytest.mark.parametrize("pf", [1, 2])
def test_prefetch_depths(pf, gen, small_tiles):
    rop.TUNE.update(fwd_pf=pf, bwd_pf=pf, bwd_progs_per_sm=2)
    for n in (1, 2, 3, 5):
        check_route(n, (9,), 24, 4, gen=gen)
        check_partial(n, (7,), 16, 2, 3, gen=gen)


def check_every_path(n, lead, d, heads, gen):
    """One-pass read, phase-1 read, a gradient sink's chain and the fused two-phase read."""
    check_route(n, lead, d, heads, gen=gen)
    check_partial(n, lead, d, heads, 3, gen=gen)
    check_sink_chain(n + 2, lead, d, heads, gen=gen, chunk=2, extra=False)
    check_two_phase(n, 2, lead, d, heads, 3, gen=gen, fused=True)


@pytest.mark.parametrize("n,lead,d,heads", [(3, (4,), 80, 1), (2, (3,), 160, 8), (6, (5,), 40, 8), (2, (5,), 123, 1)])
def test_padded_heads(n, lead, d, heads, gen):
    # pad_heads: a head width that is not a power of two as one padded part, every path
    rop.TUNE = dict(pad_heads=True)
    try:
        check_every_path(n, lead, d, heads, gen)
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("n,lead,d,heads", [(3, (4,), 80, 1), (2, (3,), 160, 8), (6, (5,), 40, 8), (3, (3,), 48, 16)])
def test_other_tile_axis_order(n, lead, d, heads, gen):
    # the per-query kernels' tiles with the axis order the installed triton does not use
    # (op._chunks_first: chunks before heads from triton 3.7, heads first before), every path
    order = rop._chunks_first()
    rop._CHUNKS_FIRST[:] = [not order]
    try:
        check_every_path(n, lead, d, heads, gen)
    finally:
        rop._CHUNKS_FIRST[:] = [order]


@pytest.mark.parametrize("n,lead,d,heads", [(18, (3,), 160, 8), (6, (5,), 40, 8), (3, (5,), 48, 3)])
def test_phase_one_one_program_per_query(n, lead, d, heads, gen):
    # several heads take phase 1's forward and COEF pass as products by default (fwd_dot,
    # coef_dot): the kernels with one program per query, kept for wider heads and fp32
    # sources on a GPU, with several heads too
    rop.TUNE = dict(fwd_dot=False, coef_dot=False)
    try:
        check_partial(n, lead, d, heads, 3, gen=gen)
        check_two_phase(n, 2, lead, d, heads, 3, gen=gen, fused=True)
    finally:
        rop.TUNE = None


def test_partial_many_tiles(gen, small_tiles):
    check_partial(3, (9,), 24, 2, 3, gen=gen)


@pytest.mark.parametrize("heads", [1, 4])
def test_two_phase_merge(heads, gen):
    check_two_phase(4, 3, (5,), 32, heads, 3, gen=gen)


@pytest.mark.parametrize("n_old,n_new,lead,d,heads", [(4, 3, (5,), 32, 1), (3, 1, (2, 3), 40, 8), (2, 2, (7,), 80, 1),
                                                      (5, 2, (3,), 123, 1)])
def test_fused_phase_two(n_old, n_new, lead, d, heads, gen):
    check_two_phase(n_old, n_new, lead, d, heads, 3, gen=gen, fused=True)


def test_fused_phase_two_bf16(gen):
    check_two_phase(3, 2, (5,), 64, 8, 2, dtype=torch.bfloat16, tol=1e-2, gen=gen, fused=True)


@pytest.mark.parametrize("n_old,n_new,lead,d,heads,S", [(4, 3, (5,), 32, 1, 4), (3, 1, (2, 3), 40, 8, 3),
                                                        (5, 2, (3,), 123, 1, 2), (6, 2, (7,), 160, 8, 8)])
def test_phase_one_rows(n_old, n_new, lead, d, heads, S, gen):
    # route_partial_rows: the sites' row gradients written into one buffer that phase 1's
    # backward reads (no stacking by autograd); the rows no site read get zeros
    rows = check_phase_one_rows(n_old, n_new, lead, d, heads, S, gen=gen)
    assert rows.direct and rows.grads.stat is None and not rows.grads.grads  # taken by phase 1's backward
    # nothing keeps the phase-1 block alive once its rows are dropped (no reference cycle
    # through an autograd context, which Python's collector cannot see)
    block = weakref.ref(rows.partial.o)
    del rows
    assert block() is None
    # bf16 rows (rows_bf16): o rounded once more than the sites' reads, so twice the tolerance
    rows = check_phase_one_rows(n_old, n_new, lead, d, heads, S, dtype=torch.bfloat16, tol=2e-2, gen=gen)
    assert rows.partial.o.dtype == torch.bfloat16


@pytest.mark.parametrize("d,heads,S", [(64, 8, 3), (123, 1, 2), (160, 8, 8)])
def test_rows_bf16_are_the_fp32_rows_rounded(d, heads, S, gen):
    # rows_bf16 changes only the store of o: the same m and l, and o the fp32 rows' o
    # rounded to bf16 (within one bf16 unit: the interpreter's casts truncate, a GPU's round
    # to nearest); off, the rows' reads stay within the sites' own tolerance
    srcs, q, g = make_inputs(7, (5,), d, torch.bfloat16, "cpu", S=S, gen=gen)
    rows = routing.route_partial_rows(srcs, q, g, heads)
    rop.TUNE = dict(rows_bf16=False)
    try:
        fp32 = routing.route_partial_rows(srcs, q, g, heads)
        check_phase_one_rows(5, 2, (3,), d, heads, S, dtype=torch.bfloat16, tol=1e-2, gen=gen)
    finally:
        rop.TUNE = None
    assert rows.direct and fp32.direct
    assert rows.partial.o.dtype == torch.bfloat16 and fp32.partial.o.dtype == torch.float32
    assert torch.equal(rows.partial.m, fp32.partial.m) and torch.equal(rows.partial.l, fp32.partial.l)
    want = fp32.partial.o.detach()
    assert ((rows.partial.o.detach().float() - want).abs() <= want.abs() * 2 ** -7).all()


class _Counting:
    """A kernel that counts its launches."""

    def __init__(self, kernel):
        self.kernel, self.calls = kernel, 0

    def __getitem__(self, grid):
        self.calls += 1
        return self.kernel[grid]


FINALIZE_SHAPES = [((5,), 123, 1), ((5,), 123, 3), ((37,), 1, 1), ((5,), 1280, 8), ((37,), 1280, 8),
                   ((2, 3), 1280, 1), ((37,), 160, 8), ((5,), 48, 16)]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("lead,d,heads", FINALIZE_SHAPES)
@pytest.mark.parametrize("tiles", ["default", "small"])
def test_finalize_kernels(lead, d, heads, dtype, tol, tiles, gen, monkeypatch):
    # finalize's kernels (x = o / l per head, and its backward), three rows of tokens not a
    # multiple of any block, heads of 123, 41, 1, 160 (chunks of 32), 1280 (chunks of 256),
    # 20 (one padded chunk) and 3 lanes, with the default tile and with blocks of one to a
    # few tokens; a partial read and direct rows of a phase-1 read, against fp64 and the
    # eager path
    fwd, bwd = _Counting(tk._finalize_fwd_kernel), _Counting(tk._finalize_bwd_kernel)
    monkeypatch.setattr(tk, "_finalize_fwd_kernel", fwd)
    monkeypatch.setattr(tk, "_finalize_bwd_kernel", bwd)
    if tiles == "small":
        monkeypatch.setattr(rop, "TUNE", dict(finalize_elems=64))
    check_finalize(lead, d, heads, dtype=dtype, tol=tol, gen=gen)
    assert (fwd.calls, bwd.calls) == (3, 3)  # the partial read, then two rows


@pytest.mark.parametrize("n,lead,d,heads,S", [(3, (5,), 123, 3, 3), (2, (37,), 1, 1, 2), (3, (5,), 1280, 8, 2),
                                              (2, (7,), 123, 1, 4)])
def test_finalized_rows(n, lead, d, heads, S, gen):
    # route_partial_rows with every row normalised by finalize: each row's gradients
    # written into phase 1's buffer at its offset
    assert check_finalized_rows(n, lead, d, heads, S, gen=gen).direct
    if d > 1:  # at d = 1 bf16 the query gradients (S numbers, sums that cancel) are 1-10% off fp64 either way
        # (bf16 rows: o rounded once more, twice the tolerance)
        check_finalized_rows(n, lead, d, heads, S, dtype=torch.bfloat16, tol=2e-2, gen=gen)


@pytest.mark.parametrize("n_old,n_new,lead,d,heads,S", [(3, 2, (5,), 32, 4, 3), (2, 1, (3,), 40, 8, 2),
                                                        (4, 1, (7,), 20, 1, 1)])
def test_phase_one_rows_read_twice(n_old, n_new, lead, d, heads, S, gen):
    # a row read by two sites (finalize and route_merge, in any pairing): both reads'
    # gradients reach the phase-1 read (a second read of a direct row used to replace the
    # first's gradient: the old sources', queries' and norm weights' gradients 40-110% off)
    assert check_rows_read_twice(n_old, n_new, lead, d, heads, S, gen=gen).direct
    check_rows_read_twice(n_old, n_new, lead, d, heads, S, dtype=torch.bfloat16, tol=2e-2, gen=gen)


def test_phase_one_rows_off_the_kernels(gen):
    # the reference backend (and torch.compile) take the rows as autograd views
    routing.set_backend("reference")
    try:
        rows = check_phase_one_rows(4, 3, (5,), 32, 4, 4, gen=gen)
    finally:
        routing.set_backend(None)
    assert not rows.direct
    rop.TUNE = dict(direct_rows=False)  # and the kernels with the rows as views (for timing)
    try:
        assert not check_phase_one_rows(4, 3, (5,), 32, 4, 4, gen=gen).direct
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("n,lead,d,heads", [(3, (5,), 64, 1), (4, (3,), 64, 8), (2, (5,), 123, 1)])
def test_route_bf16(n, lead, d, heads, gen):
    check_route(n, lead, d, heads, dtype=torch.bfloat16, tol=1e-2, gen=gen)


def test_partial_bf16(gen):
    check_partial(4, (5,), 32, 4, 2, dtype=torch.bfloat16, tol=1e-2, gen=gen)


def test_stacked_sources(gen):
    check_route(4, (5,), 32, 4, gen=gen, stacked=True)


@pytest.mark.parametrize("S", [1, 3])
def test_deterministic(S, gen, small_tiles):
    check_deterministic(5, (9,), 24, 4, S=S, gen=gen)


def test_forced_reference_inside_op(gen):
    routing.set_backend("reference")
    try:
        check_route(3, (4,), 16, 4, gen=gen)
        check_partial(3, (4,), 16, 4, 2, gen=gen)
    finally:
        routing.set_backend("triton")


def test_opcheck(gen):
    srcs, q, g = make_inputs(3, (4,), 16, torch.float32, "cpu", gen=gen)
    torch.library.opcheck(rop.route_op, ([s.detach().requires_grad_() for s in srcs], q, g, 4, 1e-6))
    srcs, q, g = make_inputs(3, (4,), 16, torch.float32, "cpu", S=2, gen=gen)
    torch.library.opcheck(rop.route_partial_op, (srcs, q, g, 2, 1e-6))


def test_compile_fullgraph(gen):
    srcs, q, g = make_inputs(4, (5,), 32, torch.float32, "cpu", gen=gen)
    qs, gs = (torch.stack([q.detach(), -q.detach()]).requires_grad_(), torch.stack([g.detach(), g.detach()]).requires_grad_())

    def f(srcs, q, g, qs, gs):
        y = routing.route(srcs, q, g, 4)
        p = routing.route_partial(srcs[:2], qs, gs, 4)
        p2 = routing.route_partial(srcs[2:], qs, gs, 4)
        x = routing.finalize(routing.merge_partials(p, p2), srcs[0].shape, srcs[0].dtype)
        return (y * y).sum() + (x * x).sum()

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    out = cf(srcs, q, g, qs, gs)
    grads = torch.autograd.grad(out, [*srcs, q, g, qs, gs])
    routing.set_backend("reference")
    try:
        ref_out = f(srcs, q, g, qs, gs)
        ref = torch.autograd.grad(ref_out, [*srcs, q, g, qs, gs])
    finally:
        routing.set_backend("triton")
    assert rel(out, ref_out) <= 1e-5
    for a, b in zip(grads, ref):
        assert rel(a, b) <= 1e-5


def test_checkpoint(gen):
    from torch.utils.checkpoint import checkpoint

    srcs, q, g = make_inputs(3, (5,), 16, torch.float32, "cpu", gen=gen)

    def f(*srcs):
        return routing.route(list(srcs), q, g, 2).square().sum()

    out = checkpoint(f, *srcs, use_reentrant=False)
    grads = torch.autograd.grad(out, [*srcs, q, g])
    ref = torch.autograd.grad(f(*srcs), [*srcs, q, g])
    for a, b in zip(grads, ref):
        assert torch.equal(a, b)


def test_non_contiguous_sources(gen):
    base = [torch.randn(16, 6, generator=gen) for _ in range(3)]
    srcs = [b.t().requires_grad_() for b in base]  # (6, 16) views with strides (1, 6)
    q = (torch.randn(16, generator=gen) * 0.5).requires_grad_()
    g = (1 + 0.1 * torch.randn(16, generator=gen)).requires_grad_()
    y = routing.route(srcs, q, g, 4)
    s64 = [s.detach().double().requires_grad_() for s in srcs]
    q64, g64 = q.detach().double().requires_grad_(), g.detach().double().requires_grad_()
    y64 = R.route(s64, q64, g64, 4)
    assert rel(y, y64) <= 1e-5
    gy = torch.randn(y64.shape, generator=gen, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(y, [*srcs, q, g], gy.float()),
                    torch.autograd.grad(y64, [*s64, q64, g64], gy)):
        assert a.shape == b.shape and rel(a, b) <= 1e-5


def test_merge_checks_the_partial_against_its_sources(gen):
    # the fused phase 2 reads the partial row at its new sources' tokens: a partial (or a
    # phase-1 read's row) over other tokens, width or heads must be refused, not read past
    # its end (it used to return a read of the row's first tokens, or of memory past it)
    srcs, q, g = make_inputs(3, (5,), 12, torch.float32, "cpu", S=2, gen=gen)
    p = routing.route_partial(srcs[:2], q, g, 3)
    one = routing.Partial(p.m[:1], p.l[:1], p.o[:1])
    rows = routing.route_partial_rows(srcs[:2], q, g, 3)
    assert rows.direct
    for part in (one, rows[1]):
        for new, heads in (([torch.randn(6, 12, generator=gen)], 3), ([torch.randn(4, 12, generator=gen)], 3),
                           (srcs[2:], 1)):
            with pytest.raises(ValueError, match="does not match"):
                routing.route_merge(part, new, q[1], g[1], heads)
        # the same tokens under another leading shape are the same read
        y = routing.route_merge(part, [srcs[2].view(1, 5, 12)], q[1], g[1], 3)
        assert y.shape == (1, 5, 12)


def test_no_tokens(gen):
    srcs = [torch.randn(0, 8, requires_grad=True) for _ in range(3)]
    q, g = torch.randn(8, requires_grad=True), torch.ones(8, requires_grad=True)
    y = routing.route(srcs, q, g, 2)
    assert y.shape == (0, 8)
    grads = torch.autograd.grad(y.sum() + (q * 0).sum(), [*srcs, q, g], allow_unused=True)
    assert torch.equal(grads[-2], torch.zeros(8))


def test_source_gradients_own_their_storage(gen):
    # autograd sums a source's gradients from every site in place only into a tensor that
    # owns its storage; slices of one buffer would cost a transient copy of every gradient
    srcs, q, g = make_inputs(4, (5,), 32, torch.float32, "cpu", gen=gen)
    srcs = [s.detach().requires_grad_() for s in srcs]
    y = routing.route(srcs, q, g, 4)
    grads = torch.autograd.grad(y, srcs, torch.randn_like(y))
    assert all(t._base is None for t in grads)
    assert len({t.untyped_storage().data_ptr() for t in grads}) == len(grads)


@pytest.mark.parametrize("overrides", [dict(chunk=3), dict(chunk=4), dict(block_size=3)])
def test_model_two_phase_equals_one_pass(overrides, gen):
    # the routed stream's two-phase schedule (phase-1 reads, fused phase-2 merges) through
    # the kernels, full routing in chunks of 3 (the last chunk partial) and of 4 (whole; the
    # final read two-phase either way) and block routing with blocks of 3: the same loss
    # and gradients as one-pass
    from mhar.model import Decoder, ModelConfig
    from mhar.model.config import method_stream

    def build(schedule):
        stream = method_stream("mhar", 8, 32, heads=4, schedule=schedule, **overrides)
        cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=16,
                          stream=stream)
        torch.manual_seed(0)
        return Decoder(cfg)

    a, b = build("one-pass"), build("two-phase")
    with torch.no_grad():  # queries away from zero, so the reads are not uniform means
        a.residual.queries.normal_(0, 0.5, generator=gen)
    b.load_state_dict(a.state_dict())
    ids = torch.randint(0, 64, (2, 9), generator=gen)
    la, lb = a.loss(ids[:, :-1], ids[:, 1:]), b.loss(ids[:, :-1], ids[:, 1:])
    assert rel(lb, la) <= 1e-5, (la, lb)
    la.backward()
    lb.backward()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert rel(pb.grad, pa.grad) <= 1e-4, name


@pytest.mark.parametrize("overrides", [dict(chunk=3), dict(block_size=3)])
def test_model_two_phase_frees_phase1_blocks(overrides, gen, monkeypatch):
    # nothing saved for backward may keep a phase-1 (S, M, d) fp32 block alive: the
    # fused merges save no row of it and finalize saves l and its output, not o
    from mhar.model import Decoder, ModelConfig
    from mhar.model.config import method_stream
    from mhar.streams import routed

    blocks = []  # kept alive, so that no other tensor can reuse a block's address
    real = routed.routing.route_partial_rows

    def recording(*args, **kwargs):
        rows = real(*args, **kwargs)
        assert rows.direct
        blocks.append(rows.partial.o)
        return rows

    monkeypatch.setattr(routed.routing, "route_partial_rows", recording)
    stream = method_stream("mhar", 8, 32, heads=4, schedule="two-phase", **overrides)
    model = Decoder(ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=64,
                                max_seq_len=16, stream=stream))
    saved = set()

    def pack(t):
        saved.add(t.untyped_storage().data_ptr())
        return t

    ids = torch.randint(0, 64, (2, 9), generator=gen)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model.loss(ids[:, :-1], ids[:, 1:])
    assert blocks, "the stream made no phase-1 read"
    assert not {o.untyped_storage().data_ptr() for o in blocks} & saved, "a phase-1 block is saved for backward"
    loss.backward()


def test_model_two_phase_final_read_starts_few_sums(gen, monkeypatch):
    check_final_read_sums("cpu", 32, 2, gen, monkeypatch)


@pytest.mark.parametrize("n_sites,lead,d,heads,extra,chunk", [
    (4, (5,), 32, 1, False, 0), (5, (2, 3), 40, 8, False, 0), (4, (7,), 80, 1, True, 0),
    (5, (5,), 32, 4, False, 2), (4, (3,), 24, 1, True, 3)])
def test_gradient_sink(n_sites, lead, d, heads, extra, chunk, gen):
    # sources' gradients summed in the backward kernel (full and block-like streams,
    # one-pass and two-phase spans) equal autograd's own sums over the fp64 reference
    check_sink_chain(n_sites, lead, d, heads, gen=gen, extra=extra, chunk=chunk)


def test_gradient_sink_bf16(gen):
    check_sink_chain(5, (6,), 64, 8, dtype=torch.bfloat16, tol=2e-2, gen=gen, extra=True)


@pytest.mark.parametrize("n_sites,d,heads,block,two_phase", [(7, 32, 4, 3, False), (7, 32, 4, 3, True),
                                                             (5, 24, 1, 2, True), (4, 40, 8, 4, False)])
def test_gradient_sink_block_running_sums(n_sites, d, heads, block, two_phase, gen):
    # block routing's running sums read through their summary's sink entry: every read's
    # gradient of a running sum added into one tensor in the backward kernel
    check_sink_chain(n_sites, (5,), d, heads, gen=gen, chunk=int(two_phase), block=block)


@pytest.mark.parametrize("method,overrides", [("mhar", {}), ("mhar", dict(block_size=3)),
                                              ("mhar", dict(block_size=3, schedule="two-phase")),
                                              # the first block one-pass, the later ones two-phase
                                              ("mhar", dict(block_size=3, schedule="two-phase",
                                                            phase1_min_sources=2)),
                                              ("mhar", dict(schedule="two-phase", chunk=3)),
                                              ("mhar", dict(schedule="two-phase", chunk=4)),
                                              ("delta", dict(block_size=2))])
def test_model_gradient_sink(method, overrides, gen, monkeypatch):
    # a model's gradients with its sources' gradients (and block routing's running sums')
    # summed in the backward kernel equal those with autograd summing them (no sink)
    from mhar.model import Decoder, ModelConfig
    from mhar.model.config import method_stream
    from mhar.streams import base

    stream = method_stream(method, 8, 32, heads=4, **overrides)
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=16,
                      stream=stream)
    torch.manual_seed(0)
    model = Decoder(cfg)
    with torch.no_grad():  # reads away from uniform means, gates open
        for name, p in model.residual.named_parameters():
            if name in ("queries", "gates", "null_source"):
                p.normal_(0, 0.5, generator=gen)
    ids = torch.randint(0, 64, (2, 9), generator=gen)

    def grads():
        model.zero_grad(set_to_none=True)
        model.loss(ids[:, :-1], ids[:, 1:]).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    registered = []

    class CountingSink(routing.GradientSink):
        def register(self, source, index=None):
            registered.append(source)
            return super().register(source, index)

    monkeypatch.setattr(base.routing, "GradientSink", CountingSink)
    with_sink = grads()
    assert registered, "the stream did not use the sink"
    if method == "mhar":  # every source of the routed stream is registered once
        assert len(registered) == model.residual.num_sources
    monkeypatch.setattr(base.routing, "GradientSink", lambda: None)  # no sink: autograd sums every gradient
    without = grads()
    for name, g in without.items():
        assert rel(with_sink[name], g) <= 1e-5, name


@pytest.fixture(params=["s-loop", "blocks-of-32", "chunks-of-16"])
def other_phase1_backward(request):
    # phase 1's backward other than the default (two passes, the gather over blocks of 16
    # sources, head parts in chunks of up to 128 columns): _bwd_kernel's loop over the S
    # queries per source, the gather over blocks of 32 sources, in chunks of 16 columns
    # (several chunks per head part at the widths below)
    rop.TUNE = {"s-loop": dict(bwd_twopass=False), "blocks-of-32": dict(gather_sources=32),
                "chunks-of-16": dict(gather_cols=16)}[request.param]
    yield
    rop.TUNE = None


@pytest.mark.parametrize("n,lead,d,heads,S", [(1, (3,), 1, 1, 2), (3, (5,), 123, 1, 3), (4, (2, 3), 32, 8, 4),
                                              (6, (7,), 80, 4, 5), (73, (2,), 16, 4, 2)])
def test_partial_other_backward(n, lead, d, heads, S, gen, other_phase1_backward):
    check_partial(n, lead, d, heads, S, gen=gen)


def test_partial_other_backward_bf16(gen, other_phase1_backward):
    check_partial(4, (6,), 64, 8, 3, dtype=torch.bfloat16, tol=1e-2, gen=gen)


def test_other_backward_deterministic_and_summing(gen, other_phase1_backward):
    check_deterministic(4, (5,), 24, 2, S=3, gen=gen)
    check_sink_chain(5, (5,), 32, 4, gen=gen, chunk=2, extra=False)
    check_two_phase(3, 2, (5,), 40, 8, 3, gen=gen, fused=True)


@pytest.mark.parametrize("n,lead,d,heads,S", [(18, (4,), 80, 1, 3), (2, (3,), 160, 8, 3), (6, (5,), 40, 8, 2),
                                              (2, (5,), 123, 1, 3), (3, (5,), 48, 3, 1), (20, (3,), 16, 16, 9),
                                              (1, (2,), 1, 1, 2), (17, (4,), 64, 2, 8)])
def test_phase_one_forward_as_products(n, lead, d, heads, S, gen):
    # fwd_dot: phase 1's forward with every query in a program (matrix products per head),
    # programs persistent over tokens (3 to 5 tokens over 3 programs): heads of 80, 20, 5,
    # 123, 16, 1 and 32 lanes, S from 1 to 9 (SP 16), more sources than one block (17, 18,
    # 19, 20), and the merged two-phase read
    # odd S: one pipeline stage (the interpreter runs both alike); odd n: the sum of squares
    # elementwise
    stages = 1 if S % 2 else 3  # (one head's forward has its own stages: fwd_dot_stages)
    rop.TUNE = dict(fwd_dot=True, fwd_dot_min_queries=1, dot_stages=stages, fwd_dot_stages=stages,
                    dot_sumsq_products=n % 2 == 0)
    try:
        check_partial(n, lead, d, heads, S, gen=gen)
        check_two_phase(n, 2, lead, d, heads, S, gen=gen, fused=True)
    finally:
        rop.TUNE = None


def _check_partial_bf16(d, heads, gen):
    """bf16 sources: phase 1's fp32 outputs within 1e-4 of an fp64 read of the same bf16
    values (bf16x2 splits the fp32 operand in two bf16 parts), gradients at bf16's 1e-2."""
    srcs, q, g = make_inputs(19, (5,), d, torch.bfloat16, "cpu", S=8, gen=gen)
    p = routing.route_partial(srcs, q, g, heads)
    p64 = R.route_partial([s.double() for s in srcs], q.double(), g.double(), heads)
    for name, a, b in zip("mlo", p, p64):
        assert rel(a, b) <= 1e-4, (name, rel(a, b))
    check_partial(19, (5,), d, heads, 8, dtype=torch.bfloat16, tol=1e-2, gen=gen)


@pytest.mark.parametrize("stages", [1, 3])
def test_phase_one_forward_as_products_bf16(stages, gen):
    rop.TUNE = dict(fwd_dot=True, dot_stages=stages, fwd_dot_stages=stages)
    try:
        _check_partial_bf16(160, 8, gen)
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("n,lead,d,heads,S", [(18, (4,), 80, 1, 3), (2, (3,), 160, 8, 3), (6, (5,), 40, 8, 2),
                                              (2, (5,), 123, 1, 3), (20, (3,), 16, 16, 9), (1, (2,), 1, 1, 2),
                                              (17, (7,), 64, 2, 8)])
def test_phase_one_coef_pass_as_products(n, lead, d, heads, S, gen):
    # coef_dot: the backward's COEF pass with every query in a program (matrix products per
    # head, programs persistent over tokens: 7 tokens over 3 programs), in one pipeline stage
    # and three, the sum of squares as products and elementwise (odd n), then the gather;
    # also through the two-phase read and a gradient sink
    rop.TUNE = dict(coef_dot=True, dot_stages=1 if S % 2 else 3, dot_sumsq_products=n % 2 == 0)
    try:
        check_partial(n, lead, d, heads, S, gen=gen)
        check_two_phase(n, 2, lead, d, heads, S, gen=gen, fused=True)
    finally:
        rop.TUNE = None


def test_phase_one_coef_pass_as_products_bf16(gen):
    rop.TUNE = dict(coef_dot=True)
    try:
        check_partial(19, (5,), 160, 8, 8, dtype=torch.bfloat16, tol=1e-2, gen=gen)
        check_sink_chain(12, (5,), 160, 8, dtype=torch.bfloat16, tol=CHAIN_BF16_TOL, gen=gen, chunk=4, extra=False)
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("n,lead,d,heads,S", [(2, (3,), 160, 8, 3), (6, (5,), 40, 8, 2), (3, (5,), 48, 3, 4),
                                              (20, (3,), 16, 16, 9), (17, (7,), 64, 2, 8)])
def test_phase_one_coef_pass_one_head_per_program(n, lead, d, heads, S, gen):
    # coef_split: the COEF pass with a head per program, taking the key-norm scales the
    # forward (fwd_dot) wrote and leaving c per head for the gather to sum; programs
    # persistent over tokens, in one pipeline stage and three; through the two-phase read
    rop.TUNE = dict(fwd_dot=True, coef_dot=True, coef_split=True, dot_stages=1 if S % 2 else 3)
    try:
        check_partial(n, lead, d, heads, S, gen=gen)
        check_two_phase(n, 2, lead, d, heads, S, gen=gen, fused=True)
    finally:
        rop.TUNE = None


def test_phase_one_coef_pass_one_head_per_program_bf16(gen):
    # (the chain's embedding gradient is 0.018-0.0205 from fp64 at bf16 on these seeds, the
    # same to four digits with the COEF pass per program of all heads)
    rop.TUNE = dict(fwd_dot=True, coef_dot=True, coef_split=True)
    try:
        check_partial(19, (5,), 160, 8, 8, dtype=torch.bfloat16, tol=1e-2, gen=gen)
        check_sink_chain(12, (5,), 160, 8, dtype=torch.bfloat16, tol=CHAIN_BF16_TOL, gen=gen, chunk=4, extra=False)
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("d,heads,w_lo", [(160, 8, False), (64, 4, False), (160, 8, True)])
def test_coef_grads(d, heads, w_lo, gen):
    # coef_grads: the split COEF pass forms the sources' gradients (a head's lanes each, part
    # B at 160), the key norm's x term deferred to phase 2's claim or the sink: the two
    # passes' gradients within bf16 rounding (0.6% at 160 / 8 on seed 0; 17% with the x
    # term dropped), and the chain against fp64 as before; w in the gradient product as
    # one bf16 part (the default) or two
    rop.TUNE = dict(fwd_dot=True, coef_dot=True, coef_split=True, coef_grads_w_lo=w_lo)
    try:
        check_coef_grads(12, (5,), d, heads, gen=gen)
        check_sink_chain(12, (5,), d, heads, dtype=torch.bfloat16, tol=CHAIN_BF16_TOL, gen=gen, chunk=4, extra=False)
    finally:
        rop.TUNE = None


@pytest.fixture
def dot_launches(monkeypatch):
    """The product kernels' launches as (kernel name, grid, SPLIT, RS, VH, TOK), in order."""
    seen = []
    real = rop._launch_dot

    def spy(kernel, grid, args, consts, warps, device, maxnreg=None, launch=None):
        seen.append((kernel.fn.__name__, grid, consts.get("SPLIT"), consts.get("RS"), consts.get("VH"),
                     consts.get("TOK", 1)))
        return real(kernel, grid, args, consts, warps, device, maxnreg, launch)

    monkeypatch.setattr(rop, "_launch_dot", spy)
    return seen


def test_coef_pass_one_head_per_program_runs(gen, dot_launches):
    # the split pass is what runs (grid over heads, c in parts) when the forward wrote the
    # scales, and not without them (the per-query forward)
    seen = dot_launches
    srcs, q, g = make_inputs(5, (4,), 40, torch.float32, "cpu", S=3, gen=gen)
    for fwd_dot in (True, False):
        seen.clear()
        rop.TUNE = dict(fwd_dot=fwd_dot, coef_dot=True, coef_split=True)
        try:
            m, l, o = routing.route_partial([s.requires_grad_() for s in srcs], q.requires_grad_(), g, 4)
            (o.sum() + l.sum()).backward()
        finally:
            rop.TUNE = None
        coef = [x for x in seen if x[0] == tk._coef_dot_kernel.fn.__name__]
        assert coef and coef[0][2] == fwd_dot and coef[0][1][1] == (4 if fwd_dot else 1), seen
        if fwd_dot:
            assert [x[3] for x in seen if x[0] == tk._fwd_dot_kernel.fn.__name__] == [True]


@pytest.mark.parametrize("n,lead,d,heads,S", [(9, (5,), 160, 8, 3), (7, (4,), 40, 8, 2), (20, (3,), 16, 16, 9),
                                              (6, (5,), 64, 2, 8)])
def test_phase_one_forward_one_head_per_program(n, lead, d, heads, S, gen):
    # fwd_split: phase 1's forward with a head per program, the key-norm scales from a
    # KeyScales shared by calls over a growing source list (and the COEF pass split too)
    rop.TUNE = dict(fwd_dot=True, coef_dot=True, coef_split=True, fwd_split=True, dot_stages=1 if S % 2 else 3)
    try:
        check_key_scales_chain(n, lead, d, heads, S, gen=gen)
    finally:
        rop.TUNE = None


def test_phase_one_forward_one_head_per_program_bf16(gen):
    rop.TUNE = dict(fwd_dot=True, coef_dot=True, coef_split=True, fwd_split=True)
    try:
        check_key_scales_chain(19, (5,), 160, 8, 8, dtype=torch.bfloat16, tol=1e-2, gen=gen)
    finally:
        rop.TUNE = None


@pytest.fixture
def key_scales_computed(monkeypatch):
    """How many sources each computation of key-norm scales (op._key_scales) took, in order."""
    computed = []
    real = rop._key_scales

    def spy(srcs, eps):
        computed.append(len(srcs))
        return real(srcs, eps)

    monkeypatch.setattr(rop, "_key_scales", spy)
    return computed


@pytest.mark.parametrize("d,heads,tune", [(64, 4, dict(fwd_dot=True, coef_dot=True, coef_split=True, fwd_split=True)),
                                           (256, 1, None)])
def test_merge_hands_key_scales_on(d, heads, tune, gen, key_scales_computed):
    # merge_scales: phase 2 writes its newest source's key-norm scales into the stream's
    # KeyScales; the next chunk's phase 1 then computes only the sources phase 2 did not
    # read (the embedding, and each chunk's last output). Several heads a head per
    # program, one head as lane groups (both read the scales); the chain still equals fp64
    computed = key_scales_computed
    for merge_scales, want in ((False, [1, 4, 4]), (True, [1, 1, 1])):
        computed.clear()
        rop.TUNE = {**(tune or {}), "merge_scales": merge_scales}
        try:
            check_sink_chain(9, (5,), d, heads, gen=gen, chunk=4, extra=False)
        finally:
            rop.TUNE = None
        assert computed == want, (merge_scales, computed)


def test_key_scales_put_out_of_place_is_recomputed(gen):
    # KeyScales.put holds a source's scales after the held ones; where that is not the
    # source's place in the next list, table() finds it out of place and recomputes
    srcs, _, _ = make_inputs(4, (5,), 40, torch.float32, "cpu", gen=gen)
    eps = R.KEY_NORM_EPS
    want = 1 / torch.sqrt(torch.stack([x.pow(2).mean(-1) for x in srcs]) + eps)
    scales = routing.KeyScales()
    scales.table(srcs[:1], eps)
    scales.put(srcs[2], torch.full_like(want[0], 7.0), eps)  # skips srcs[1]: out of place
    assert torch.allclose(scales.table(srcs, eps), want, rtol=1e-5, atol=0)
    scales.put(srcs[1], torch.full_like(want[0], 7.0), eps)  # already held: ignored
    assert torch.allclose(scales.table(srcs, eps), want, rtol=1e-5, atol=0)


def test_key_scales_recomputed_where_sources_differ(gen, key_scales_computed):
    # a KeyScales keeps the scales of the sources it saw, in order and by identity: a list
    # that differs from the k-th source on (or another eps) is recomputed from there
    computed = key_scales_computed
    srcs, _, _ = make_inputs(6, (5,), 40, torch.float32, "cpu", gen=gen)

    def want(xs, eps):
        return 1 / torch.sqrt(torch.stack([x.detach().pow(2).mean(-1) for x in xs]) + eps)

    scales = routing.KeyScales()
    eps = R.KEY_NORM_EPS
    for xs in (srcs[:3], srcs, srcs[:2] + [srcs[2] * 2] + srcs[3:], srcs[:4]):
        assert torch.allclose(scales.table(xs, eps), want(xs, eps), rtol=1e-5, atol=0)
    # the first 3; the next 3; from the replaced third on; from the original third on again
    assert computed == [3, 3, 4, 2], computed
    for xs in (srcs[:3], srcs[:4]):  # a prefix of the held sources: nothing new, nothing dropped
        assert torch.allclose(scales.table(xs, eps), want(xs, eps), rtol=1e-5, atol=0)
    assert computed == [3, 3, 4, 2], computed
    assert torch.allclose(scales.table(srcs[:2], 1e-2), want(srcs[:2], 1e-2), rtol=1e-5, atol=0)
    assert computed == [3, 3, 4, 2, 2], computed  # another eps: all again


def test_forward_one_head_per_program_runs(gen, dot_launches):
    # with scales the forward runs a head per program and reads them (no RS); without, it
    # runs every head and writes them for the split COEF pass
    seen = dot_launches
    srcs, q, g = make_inputs(5, (4,), 40, torch.float32, "cpu", S=3, gen=gen)
    rop.TUNE = dict(fwd_dot=True, coef_dot=True, coef_split=True, fwd_split=True)
    try:
        for scales in (routing.KeyScales(), None):
            seen.clear()
            routing.route_partial(srcs, q, g, 4, scales=scales)
            split = scales is not None
            # (the split forward takes two tokens at a time, 5 sources in 16 rows: 2 programs for 4 tokens)
            assert [x[:4] for x in seen] == [(tk._fwd_dot_kernel.fn.__name__, (2, 4) if split else (3, 1),
                                              split or None, None if split else True)], seen
    finally:
        rop.TUNE = None


def test_one_query_forward_per_query(gen, dot_launches):
    # a chunk of one site has no read to share: its forward takes the per-query kernel
    # (fwd_dot_min_queries 2), the same values as the products
    seen = dot_launches
    srcs, q, g = make_inputs(5, (4,), 40, torch.float32, "cpu", S=1, gen=gen)
    outs = {}
    for least in (2, 1):
        seen.clear()
        rop.TUNE = dict(fwd_dot=True, fwd_split=True, fwd_dot_min_queries=least)
        try:
            outs[least] = routing.route_partial(srcs, q, g, 4, scales=routing.KeyScales())
        finally:
            rop.TUNE = None
        assert [x[0] for x in seen] == ([] if least == 2 else [tk._fwd_dot_kernel.fn.__name__]), seen
    for a, b in zip(outs[2], outs[1]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_products_that_do_not_fit_fall_back(gen, monkeypatch):
    # a product kernel that needs more shared memory than the GPU has (triton raises at
    # launch, before it runs): phase 1 takes the per-query kernels, warns once, and does not
    # try that launch again
    from types import SimpleNamespace

    from triton.runtime.errors import OutOfResources

    from mhar.routing import triton_kernels as tk

    tries = []

    class TooBig:
        def __init__(self, name):
            self.fn = SimpleNamespace(__name__=name)

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                tries.append(self.fn.__name__)
                raise OutOfResources(233728, 232448, "shared memory")
            return launch

    monkeypatch.setattr(tk, "_fwd_dot_kernel", TooBig("_fwd_dot_kernel"))
    monkeypatch.setattr(tk, "_coef_dot_kernel", TooBig("_coef_dot_kernel"))
    monkeypatch.setattr(rop, "_DOT_UNFIT", set())
    with pytest.warns(UserWarning, match="does not fit"):
        check_partial(18, (3,), 160, 8, 8, gen=gen)
    # each kernel tried in its pipeline stages, then in one
    assert sorted(tries) == ["_coef_dot_kernel"] * 2 + ["_fwd_dot_kernel"] * 2
    check_two_phase(18, 2, (3,), 160, 8, 8, gen=gen, fused=True)
    assert len(tries) == 4


def test_pipelined_products_that_do_not_fit_run_in_one_stage(gen, monkeypatch):
    # a product kernel whose pipeline stages need more shared memory than the GPU has runs
    # in one stage, warns once, and is not tried in its stages again
    from triton.runtime.errors import OutOfResources

    from mhar.routing import triton_kernels as tk

    launches = []

    class OneStageOnly:
        def __init__(self, kernel):
            self.kernel, self.fn = kernel, kernel.fn

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append((self.fn.__name__, kwargs["STAGES"]))
                if kwargs["STAGES"] > 1:
                    raise OutOfResources(233728, 232448, "shared memory")
                return self.kernel[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(tk, "_fwd_dot_kernel", OneStageOnly(tk._fwd_dot_kernel))
    monkeypatch.setattr(tk, "_coef_dot_kernel", OneStageOnly(tk._coef_dot_kernel))
    monkeypatch.setattr(rop, "_DOT_UNFIT", set())
    rop.TUNE = dict(dot_stages=3)
    try:
        with pytest.warns(UserWarning, match="it runs in one stage"):
            check_partial(18, (3,), 160, 8, 8, gen=gen)
        assert sorted(launches) == [("_coef_dot_kernel", 1), ("_coef_dot_kernel", 3), ("_fwd_dot_kernel", 1),
                                    ("_fwd_dot_kernel", 3)]
        check_partial(18, (3,), 160, 8, 8, gen=gen)  # (the values checked against the reference each time)
        assert len(launches) > 4 and all(stages == 1 for _, stages in launches[4:])
    finally:
        rop.TUNE = None



@triton.jit
def _product_kernel(A, B, C, PREC: tl.constexpr):
    r16, r32 = tl.arange(0, 16), tl.arange(0, 32)
    a = tl.load(A + r16[:, None] * 16 + r16[None, :])
    b = tl.load(B + r16[:, None] * 32 + r32[None, :])
    tl.store(C + r16[:, None] * 32 + r32[None, :], tk._dot_fp32(a, b, PREC))


def test_fp32_products_as_three_bf16_products(gen):
    # the gather's "bf16x3" products (triton_kernels._dot_fp32): fp32 operands as two bf16
    # parts each, three products: errors of a few 2^-16 of the terms' size, where one bf16
    # product errs by about 2^-8
    # magnitudes from 2^-6 to 2^6, both signs
    a = torch.randn(16, 16, generator=gen) * torch.exp2(torch.randint(-6, 7, (16, 16), generator=gen).float())
    b = torch.randn(16, 32, generator=gen) * torch.exp2(torch.randint(-6, 7, (16, 32), generator=gen).float())
    exact = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()  # the size of the terms, so cancellation does not count
    for prec, bound in (("bf16x3", 2.0 ** -13), ("ieee", 1e-6)):
        c = torch.full((16, 32), float("nan"))
        _product_kernel[(1,)](a, b, c, PREC=prec)
        assert ((c.double() - exact).abs() / scale).max() <= bound, prec
    one = (a.bfloat16().double() @ b.bfloat16().double() - exact).abs() / scale
    assert one.max() > 2.0 ** -10  # one bf16 product would fail the bound above


@pytest.mark.parametrize("precision", ["tf32x3", "bf16x3"])
def test_phase_one_gather_precisions(precision, gen):
    # bf16 sources: the gather's products as three bf16 products (the default) or tf32x3
    rop.TUNE = dict(gather_precision=precision)
    try:
        check_partial(19, (5,), 160, 8, 8, dtype=torch.bfloat16, tol=1e-2, gen=gen)
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("coef_dot,heads,d", [(True, 8, 160), (False, 8, 160), (False, 1, 48)])
def test_coefficients_as_parts(coef_dot, heads, d, gen):
    # bf16 gradient rows: the COEF pass stores each coefficient as its two bf16 parts and
    # the gather takes them as they are (coef_parts), or stores fp32 and the gather splits
    # them: the same products, the same gradients to the bit; both COEF passes (products,
    # per query); heads of 20 lanes (two per chunk of the gather's walk) and one of 48
    srcs, q, g = make_inputs(19, (5,), d, torch.bfloat16, "cpu", S=6, gen=gen)
    gys = [torch.randn(srcs[0].shape, generator=gen).bfloat16() for _ in range(6)]
    grads = {}
    for parts in (True, False):
        rop.TUNE = dict(coef_dot=coef_dot, fwd_dot=coef_dot, coef_parts=parts)
        try:
            xs = [s.detach().requires_grad_() for s in srcs]
            rows = routing.route_partial_rows(xs, q, g, heads)
            outs = [routing.finalize(rows[i], xs[0].shape, torch.bfloat16)[0] for i in range(6)]
            loss = sum((o.float() * gy.float()).sum() for o, gy in zip(outs, gys))
            grads[parts] = torch.autograd.grad(loss, [*xs, q, g])
        finally:
            rop.TUNE = None
    for a, b in zip(grads[True], grads[False]):
        assert torch.equal(a, b)
    # against fp64, and (products) through running sums as a stream's reads
    rop.TUNE = dict(coef_dot=coef_dot, fwd_dot=coef_dot, coef_parts=True)
    try:
        check_finalized_rows(19, (5,), d, heads, 6, dtype=torch.bfloat16, tol=1e-2, gen=gen)
        if coef_dot:
            check_sink_chain(12, (5,), d, heads, dtype=torch.bfloat16, tol=CHAIN_BF16_TOL, gen=gen, chunk=4, extra=False)
    finally:
        rop.TUNE = None


@pytest.fixture
def gather_tokens(monkeypatch):
    """TOK of every launch of phase 1's gather, in order."""
    seen = []
    real = tk._bwd_gather_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                seen.append(kw["TOK"])
                return real[grid](*args, **kw)
            return launch

    monkeypatch.setattr(tk, "_bwd_gather_kernel", Spy())
    return seen


@pytest.mark.parametrize("n,lead,d,heads,S,dtype", [(1, (7,), 48, 4, 3, torch.float32),
                                                    (3, (5,), 160, 8, 6, torch.bfloat16),
                                                    (5, (2, 3), 32, 2, 4, torch.float32),
                                                    (8, (9,), 48, 1, 2, torch.bfloat16),
                                                    (9, (3,), 32, 4, 3, torch.float32)])
def test_gather_tokens_per_program(n, lead, d, heads, S, dtype, gen, gather_tokens):
    # phase 1's gather with several tokens per program (gather_tokens): a read of few
    # sources fills the products' 16 rows with several tokens' sources; token counts that
    # are not a multiple of TOK (the last program's tokens partly off); bf16 (exact rows,
    # coefficients as parts) and fp32; the same gradients as one token per program
    # (within fp32's rounding: only zeros are added), and fp64's
    srcs, q, g = make_inputs(n, lead, d, dtype, "cpu", S=S, gen=gen)
    go, grads = None, {}
    for cap in (1, 2, 4, 8):
        rop.TUNE = dict(gather_tokens=cap)
        try:
            gather_tokens.clear()
            xs = [s.detach().requires_grad_() for s in srcs]
            p = routing.route_partial(xs, q, g, heads)
            go = torch.randn(p.o.shape, generator=gen) if go is None else go
            grads[cap] = torch.autograd.grad((p.o * go).sum() + p.l.sum(), [*xs, q, g])
        finally:
            rop.TUNE = None
        assert gather_tokens == [1 if n > 8 else min(cap, 16 // rop._pow2(n))]
    for cap in (2, 4, 8):
        for a, b in zip(grads[cap], grads[1]):
            assert rel(a, b) <= (1e-6 if dtype == torch.float32 else 1e-2), (cap, rel(a, b))
    rop.TUNE = dict(gather_tokens=8)
    try:
        check_partial(n, lead, d, heads, S, dtype=dtype, tol=1e-5 if dtype == torch.float32 else 1e-2, gen=gen)
    finally:
        rop.TUNE = None
    with pytest.raises(ValueError, match="gather_tokens"):
        rop.TUNE = dict(gather_tokens=3)
        try:
            routing.route_partial([s.detach().requires_grad_() for s in srcs], q, g, heads).o.sum().backward()
        finally:
            rop.TUNE = None


@pytest.mark.parametrize("n,lead,d,heads,S,stages", [(1, (7,), 48, 4, 3, 3), (3, (5,), 160, 8, 6, 1),
                                                     (5, (2, 3), 32, 2, 4, 3), (8, (9,), 256, 1, 2, 3),
                                                     (9, (3,), 32, 4, 3, 1)])
def test_products_tokens_per_step(n, lead, d, heads, S, stages, gen, dot_launches):
    # phase 1's forward as products with the key-norm scales read (a head per program, or
    # one head's lane groups: dot_group_tokens) and its COEF pass with a head per program
    # take several tokens at a time for a read of few sources (dot_tokens, coef_tokens):
    # each token's softmax over its own rows, the output one block-diagonal product; g.x against every
    # token's gradient rows, each row keeping its own token's; token counts not a multiple
    # of TOK; the same reads and gradients as a token at a time (within fp32's rounding),
    # and fp64's; and the defaults' token counts.
    srcs, q, g = make_inputs(n, lead, d, torch.float32, "cpu", S=S, gen=gen)
    s64, (q64, g64) = [s.detach().double().requires_grad_() for s in srcs], [q.detach().double(), g.detach().double()]
    ref = R.route_partial(s64, q64.requires_grad_(), g64.requires_grad_(), heads)
    go = torch.randn(ref.o.shape, generator=gen, dtype=torch.float64)
    ref_grads = torch.autograd.grad((ref.o * go).sum() + ref.l.sum(), [*s64, q64, g64])
    outs = {}
    for cap in (1, 2, 4, 8):
        rop.TUNE = dict(dot_tokens=cap, dot_group_tokens=cap, coef_tokens=cap, dot_stages=stages,
                        fwd_dot_stages=stages)
        dot_launches.clear()
        try:
            xs = [s.detach().requires_grad_() for s in srcs]
            p = routing.route_partial(xs, q, g, heads, scales=routing.KeyScales())
            grads = torch.autograd.grad((p.o * go.float()).sum() + p.l.sum(), [*xs, q, g])
        finally:
            rop.TUNE = None
        tok = 1 if n > 8 else min(cap, 16 // rop._pow2(n))
        assert [x[5] for x in dot_launches] == [tok, tok if heads > 1 else 1], dot_launches  # forward, COEF
        outs[cap] = (*p, *grads)
        for name, a, b in zip("mlo", p, ref):
            assert rel(a, b) <= 1e-5, (cap, name, rel(a, b))
        for a, b in zip(grads, ref_grads):
            assert rel(a, b) <= 1e-5, (cap, rel(a, b))
    for cap in (2, 4, 8):
        for a, b in zip(outs[cap], outs[1]):
            assert rel(a, b) <= 1e-6, (cap, rel(a, b))
    dot_launches.clear()
    routing.route_partial(srcs, q, g, heads, scales=routing.KeyScales())
    cfg = rop._cfg(rop.padded_width(d, heads), heads > 1)
    want = 1 if n > 8 else min(cfg["dot_tokens" if heads > 1 else "dot_group_tokens"], 16 // rop._pow2(n))
    assert [x[5] for x in dot_launches] == [want], dot_launches  # the defaults


@pytest.mark.parametrize("n,lead,d,S,stages", [(18, (4,), 160, 3, 1), (5, (3,), 256, 8, 3), (17, (5,), 128, 2, 3)])
def test_one_head_as_lane_groups(n, lead, d, S, stages, gen, dot_launches):
    # dot_lane_groups: one head of d lanes takes phase 1's forward and COEF pass as products
    # in eight lane groups (of 20 lanes as parts of 16 and 16 with masks, 32, 16), the logits
    # summed over the groups; more sources than one block (17, 18), programs persistent over
    # tokens; the partial read and the merged two-phase read, values and gradients against
    # fp64; the programs reading the key-norm scales (the COEF pass the forward's, which it
    # wrote) and summing squares themselves (odd n)
    rop.TUNE = dict(dot_stages=stages, fwd_dot_stages=stages, dot_group_scales=n % 2 == 0)
    try:
        check_partial(n, lead, d, 1, S, gen=gen)
        check_two_phase(n, 2, lead, d, 1, S, gen=gen, fused=True)
    finally:
        rop.TUNE = None
    names = {x[0] for x in dot_launches if x[4]}
    assert names == {tk._fwd_dot_kernel.fn.__name__, tk._coef_dot_kernel.fn.__name__}, dot_launches
    assert all(x[4] and x[1][1] == 1 and not x[2] for x in dot_launches), dot_launches  # every group in a program
    # off, and where the groups would be under 16 lanes or d does not divide: the per-query kernels
    for tune, width in ((dict(dot_lane_groups=0), d), (None, 120), (None, 123)):
        dot_launches.clear()
        rop.TUNE = tune
        try:
            check_partial(3, (2,), width, 1, 2, gen=gen)
        finally:
            rop.TUNE = None
        assert not dot_launches


def test_one_head_as_lane_groups_bf16(gen, dot_launches):
    # bf16 sources (_check_partial_bf16); and a stream in miniature in chunks through a
    # gradient sink (fp32: in bf16 its gradients are 2-7% from fp64 on these shapes with the
    # per-query kernels and with the groups alike)
    _check_partial_bf16(256, 1, gen)
    check_sink_chain(12, (5,), 256, 1, gen=gen, chunk=4, extra=False)
    assert {x[4] for x in dot_launches} == {True}, dot_launches
    # the chain's forwards read the stream's KeyScales, the partial reads' wrote them
    assert {x[3] for x in dot_launches if x[0] == tk._fwd_dot_kernel.fn.__name__} == {True, None}, dot_launches
