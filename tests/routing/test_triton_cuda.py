"""Fused routing kernels on a CUDA GPU (skipped without one): compiled Triton, larger
and odd shapes, bf16, determinism, torch.compile (inductor, fullgraph), checkpointing.
Outputs are poisoned with NaN before every kernel call."""

from __future__ import annotations

import os
import sys

import pytest
import torch

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

sys.path.insert(0, os.path.dirname(__file__))

from mhar import routing  # noqa: E402
from mhar.routing import op as rop  # noqa: E402
from mhar.routing import reference as R  # noqa: E402
from routing_checks import (check_coef_grads, check_deterministic, check_final_read_sums, check_finalize,  # noqa: E402
                            check_finalized_rows, check_key_scales_chain, check_partial, check_phase_one_rows,
                            check_route, check_sink_chain, check_two_phase, make_inputs, rel)

DEV = "cuda"


@pytest.fixture(scope="module", autouse=True)
def poison():
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("compiled-kernel tests; unset TRITON_INTERPRET")
    old = rop.POISON
    rop.POISON = True
    routing.set_backend("auto")
    yield
    routing.set_backend(None)
    rop.POISON = old


@pytest.fixture
def gen(request):
    import zlib
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


SHAPES = [(1, (7,), 1, 1), (2, (333,), 123, 1), (73, (2, 65), 64, 16), (25, (1000,), 512, 8),
          (25, (513,), 512, 1), (49, (129,), 1024, 16), (73, (100,), 1280, 8), (9, (300,), 1280, 1),
          (5, (77,), 48, 16), (6, (50,), 40, 8), (4, (1,), 4096, 4)]


@pytest.mark.parametrize("n,lead,d,heads", SHAPES)
def test_route_fp32(n, lead, d, heads, gen):
    check_route(n, lead, d, heads, device=DEV, gen=gen)


@pytest.mark.parametrize("n,lead,d,heads", [(25, (400,), 512, 1), (73, (64,), 1280, 8), (5, (99,), 123, 1)])
def test_route_bf16(n, lead, d, heads, gen):
    check_route(n, lead, d, heads, dtype=torch.bfloat16, device=DEV, tol=1e-2, gen=gen)


@pytest.mark.parametrize("n,lead,d,heads,S", [(1, (3,), 1, 1, 2), (24, (300,), 512, 8, 4), (17, (77,), 123, 1, 3),
                                              (73, (40,), 1280, 16, 8)])
def test_partial_fp32(n, lead, d, heads, S, gen):
    check_partial(n, lead, d, heads, S, device=DEV, gen=gen)


def test_partial_bf16(gen):
    check_partial(24, (300,), 1024, 8, 4, dtype=torch.bfloat16, device=DEV, tol=1e-2, gen=gen)


@pytest.mark.parametrize("d,heads,lead", [(1024, 8, (2, 32_771)), (512, 1, (4, 32_771))])
def test_more_tokens_than_a_grid_axis_holds(d, heads, lead, gen, monkeypatch):
    """More token tiles than a grid's second axis holds (65,535; a 100M micro-batch of 64 x
    2048 has 131,072 tokens, 65,536 tiles of two): one-pass reads, phase 1 as products and
    phase 2, the sources' key-norm scales, and partial reads by ``_fwd_kernel`` (products off)."""
    n_tok = lead[0] * lead[1]
    assert -(-n_tok // rop._geometry(d, heads, n_tok, "fwd", 16)[2]["BM"]) > 65_535, "too few tiles to test"
    check_route(3, lead, d, heads, device=DEV, gen=gen)
    check_two_phase(3, 2, lead, d, heads, 2, device=DEV, gen=gen, fused=True)
    srcs = [torch.randn(lead + (d,), generator=gen).to(DEV) for _ in range(3)]
    ref = 1 / torch.sqrt(torch.stack([x.pow(2).mean(-1).flatten() for x in srcs]) + R.KEY_NORM_EPS)
    assert torch.allclose(rop._key_scales(srcs, R.KEY_NORM_EPS), ref, rtol=1e-5, atol=0)
    monkeypatch.setattr(rop, "TUNE", {"fwd_dot_min_queries": 99})
    check_partial(3, lead, d, heads, 2, device=DEV, gen=gen)


@pytest.mark.parametrize("heads", [1, 8])
def test_two_phase(heads, gen):
    check_two_phase(12, 4, (257,), 512, heads, 4, device=DEV, gen=gen)


@pytest.mark.parametrize("d,heads", [(512, 1), (1280, 8)])
def test_fused_phase_two(d, heads, gen):
    check_two_phase(12, 4, (257,), d, heads, 4, device=DEV, gen=gen, fused=True)
    check_two_phase(9, 3, (300,), d, heads, 2, dtype=torch.bfloat16, device=DEV, tol=1e-2, gen=gen, fused=True)


@pytest.mark.parametrize("d,heads", [(512, 1), (1280, 8), (1024, 8)])
def test_phase_one_rows(d, heads, gen):
    # route_partial_rows: the sites' row gradients written into phase 1's buffer (the
    # routed stream's two-phase path); an unread row's gradient is zero
    assert check_phase_one_rows(12, 4, (257,), d, heads, 4, device=DEV, gen=gen).direct
    check_phase_one_rows(21, 3, (300,), d, heads, 8, dtype=torch.bfloat16, device=DEV, tol=1e-2, gen=gen)


@pytest.mark.parametrize("d,heads", [(1280, 8), (1024, 1), (1280, 1), (512, 8), (123, 3)])
def test_finalize_kernels(d, heads, gen):
    # finalize's kernels at a training step's 16384 tokens (bf16 output; the eager path's
    # x and grad_o exactly, as the cast rounds to nearest on a GPU) and at a token count
    # that no block divides (fp32), a partial read and direct rows; then every row of a
    # phase-1 read normalised by finalize
    check_finalize((16384,), d, heads, S=2, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen)
    check_finalize((3, 2999), d, heads, S=2, device=DEV, gen=gen)
    assert check_finalized_rows(9, (300,), d, heads, 4, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen).direct


@pytest.mark.parametrize("S", [1, 4])
def test_deterministic(S, gen):
    check_deterministic(25, (2049,), 512, 8, S=S, device=DEV, gen=gen)
    check_deterministic(9, (1001,), 1280, 1, S=S, device=DEV, dtype=torch.bfloat16, gen=gen)


def test_compile_inductor_fullgraph(gen):
    srcs, q, g = make_inputs(6, (2, 100), 256, torch.bfloat16, DEV, gen=gen)
    qs = torch.stack([q.detach(), 0.5 * q.detach()]).requires_grad_()
    gs = torch.stack([g.detach(), g.detach()]).requires_grad_()

    def f(srcs, q, g, qs, gs):
        y = routing.route(srcs, q, g, 8)
        p = routing.route_partial(srcs[:4], qs, gs, 8)
        p2 = routing.route_partial(srcs[4:], qs, gs, 8)
        x = routing.finalize(routing.merge_partials(p, p2), srcs[0].shape, srcs[0].dtype)
        return (y.float() ** 2).sum() + (x.float() ** 2).sum()

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True)
    out = cf(srcs, q, g, qs, gs)
    grads = torch.autograd.grad(out, [*srcs, q, g, qs, gs])
    eager = f(srcs, q, g, qs, gs)
    ref = torch.autograd.grad(eager, [*srcs, q, g, qs, gs])
    assert rel(out, eager) <= 1e-3
    for a, b in zip(grads, ref):
        assert rel(a, b) <= 1e-2


def test_model_two_phase_final_read(gen, monkeypatch):
    # the final read's own phase 1 through the compiled kernels (fp32: one-pass's exact read)
    check_final_read_sums(DEV, 256, 4, gen, monkeypatch)


def test_checkpoint(gen):
    from torch.utils.checkpoint import checkpoint

    srcs, q, g = make_inputs(8, (300,), 512, torch.bfloat16, DEV, gen=gen)

    def f(*srcs):
        return routing.route(list(srcs), q, g, 8).float().square().sum()

    out = checkpoint(f, *srcs, use_reentrant=False)
    grads = torch.autograd.grad(out, [*srcs, q, g])
    ref = torch.autograd.grad(f(*srcs), [*srcs, q, g])
    for a, b in zip(grads, ref):
        assert torch.equal(a, b)


def test_no_source_copies(gen):
    """Peak memory of fwd+bwd: the gradients (one copy of the sources) plus small
    per-token statistics, never a stacked copy of the history."""
    srcs, q, g = make_inputs(16, (4096,), 1024, torch.bfloat16, DEV, gen=gen)
    src_bytes = sum(s.numel() * s.element_size() for s in srcs)
    y = routing.route(srcs, q, g, 8)
    gy = torch.randn_like(y)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    y = routing.route(srcs, q, g, 8)
    grads = torch.autograd.grad(y, [*srcs, q, g], gy)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    del grads
    assert extra < 1.25 * src_bytes, (extra, src_bytes)


def test_cuda_matches_interpreter_free_reference_backend(gen):
    """Forcing the reference backend on CUDA gives the same read."""
    srcs, q, g = make_inputs(5, (100,), 64, torch.float32, DEV, gen=gen)
    y = routing.route(srcs, q, g, 4)
    routing.set_backend("reference")
    try:
        y2 = routing.route(srcs, q, g, 4)
    finally:
        routing.set_backend("auto")
    assert rel(y, y2) <= 1e-5
    assert rop.get_backend() == "auto"


@pytest.mark.parametrize("cfg", [{"fwd_pf": 1, "bwd_pf": 1}, {"fwd_pf": 2, "bwd_pf": 2, "fwd_elems": 4096,
                                                               "bwd_elems": 4096, "fwd_warps": 8, "bwd_warps": 8}])
def test_other_tile_configs(cfg, gen):
    rop.TUNE = cfg
    try:
        check_route(73, (100,), 1280, 8, device=DEV, gen=gen)
        check_route(3, (333,), 512, 1, device=DEV, gen=gen)
        check_partial(24, (300,), 512, 8, 4, device=DEV, gen=gen)
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("d,heads", [(1280, 8), (1024, 8)])
def test_phase_one_one_program_per_query(d, heads, gen):
    # several heads take phase 1's forward and COEF pass as products by default (fwd_dot,
    # coef_dot) for bf16 sources: the kernels with one program per query, kept for wider
    # heads and fp32 sources, with bf16 sources and several heads too
    rop.TUNE = dict(fwd_dot=False, coef_dot=False)
    try:
        check_partial(17, (300,), d, heads, 6, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen)
        check_two_phase(5, 3, (200,), d, heads, 3, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen, fused=True)
        _check_bf16_accuracy(d, heads, gen)
    finally:
        rop.TUNE = None


def _check_bf16_accuracy(d, heads, gen, tol=1e-4):
    """bf16 sources: phase 1's fp32 outputs and the fp32 query and norm-weight gradients
    within ``tol`` of fp64 on the same bf16 values (the source gradients are bf16)."""
    srcs, q, g = make_inputs(37, (256,), d, torch.bfloat16, DEV, S=8, gen=gen)
    p = routing.route_partial(srcs, q, g, heads)
    q64, g64 = (t.double().detach().requires_grad_() for t in (q, g))
    p64 = R.route_partial([s.double().detach() for s in srcs], q64, g64, heads)
    for name, a, b in zip("mlo", p, p64):
        assert rel(a, b) <= tol, (name, rel(a, b))
    go = torch.randn(p64.o.shape, generator=gen, dtype=torch.float64).to(DEV)
    got = torch.autograd.grad((p.o.double() * go).sum(), [q, g])
    want = torch.autograd.grad((p64.o * go).sum(), [q64, g64])
    for name, a, b in zip(("queries", "norm weights"), got, want):
        assert rel(a, b) <= 10 * tol, (name, rel(a, b))


@pytest.mark.parametrize("d,heads", [(1280, 8), (1024, 8), (512, 8), (1024, 16), (123, 1), (1280, 1)])
def test_phase_one_forward_as_products(d, heads, gen):
    # fwd_dot: phase 1's forward with one program per token and every query (matrix
    # products per head; one head of 1024 or more lanes as eight lane groups), bf16 sources
    # (fp32 ones keep the per-query kernels on a GPU); pipelined in one stage and three
    for stages in (1, 3):
        rop.TUNE = dict(fwd_dot=True, dot_stages=stages, fwd_dot_stages=stages)
        try:
            check_partial(37, (300,), d, heads, 8, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen)
            check_two_phase(21, 3, (200,), d, heads, 8, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen,
                            fused=True)
            _check_bf16_accuracy(d, heads, gen)
        finally:
            rop.TUNE = None


@pytest.mark.parametrize("d,heads", [(1280, 8), (1024, 8), (512, 8), (1024, 16), (123, 1)])
def test_phase_one_coef_pass_as_products(d, heads, gen):
    # coef_dot: the COEF pass of phase 1's backward with every query in a program (matrix
    # products per head, programs persistent over tokens), then the gather, bf16 sources;
    # also through a gradient sink (at d = 123 a bf16 chain of 20 sites is 2-4% from fp64
    # with either COEF pass, measured in the interpreter)
    for stages, per_sm in ((1, 1), (3, 2)):
        rop.TUNE = dict(coef_dot=True, dot_stages=stages, coef_dot_progs_per_sm=per_sm)
        try:
            check_partial(37, (300,), d, heads, 8, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen)
            check_two_phase(21, 3, (200,), d, heads, 8, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen,
                            fused=True)
            check_sink_chain(20, (256,), d, heads, dtype=torch.bfloat16, device=DEV, gen=gen, chunk=8,
                             tol=6e-2 if d == 123 else 2e-2)
            _check_bf16_accuracy(d, heads, gen)
        finally:
            rop.TUNE = None


@pytest.mark.parametrize("d", [1280, 1024, 512])
def test_one_head_as_lane_groups(d, gen, monkeypatch):
    # dot_lane_groups: one head takes phase 1's forward and COEF pass as products in eight
    # lane groups (of 160, 128, 64 lanes), every group in a program, in one pipeline stage
    # and three; bf16 sources, through the two-phase read and a stream's chain in chunks
    # (a launch that does not fit would warn and fall back: an error here)
    import warnings

    seen = []
    real = rop._launch_dot

    def spy(kernel, grid, args, consts, warps, device, maxnreg=None, launch=None):
        seen.append((kernel.fn.__name__, consts.get("VH")))
        return real(kernel, grid, args, consts, warps, device, maxnreg, launch)

    monkeypatch.setattr(rop, "_launch_dot", spy)
    for stages in (1, 3):
        rop.TUNE = dict(dot_stages=stages, fwd_dot_stages=stages)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("error", message="mhar routing")
                check_partial(37, (300,), d, 1, 8, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen)
                check_two_phase(21, 3, (200,), d, 1, 8, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen,
                                fused=True)
                # (in bf16 one head's chain gradients are 2-7% from fp64 with the per-query
                # kernels and with the groups alike, in the interpreter at d = 256)
                check_sink_chain(20, (256,), d, 1, dtype=torch.bfloat16, device=DEV, gen=gen, chunk=8, tol=8e-2)
                _check_bf16_accuracy(d, 1, gen)
        finally:
            rop.TUNE = None
    assert {name for name, vh in seen if vh} == {"_fwd_dot_kernel", "_coef_dot_kernel"}, seen
    assert all(vh for _, vh in seen), seen


@pytest.mark.parametrize("d,heads", [(1280, 8), (1024, 8), (1280, 1), (1024, 1)])
def test_merge_hands_key_scales_on(d, heads, gen, monkeypatch):
    # merge_scales: phase 2 writes its newest source's key-norm scales into the stream's
    # KeyScales, so phase 1 computes only the ones phase 2 did not read (a chunk's last
    # output, and the embedding); the chain still matches fp64
    computed = []
    real = rop._key_scales
    monkeypatch.setattr(rop, "_key_scales", lambda srcs, eps: computed.append(len(srcs)) or real(srcs, eps))
    rop.TUNE = dict(merge_scales=True)
    try:
        check_sink_chain(20, (256,), d, heads, dtype=torch.bfloat16, device=DEV, gen=gen, chunk=8,
                         tol=2e-2 if heads > 1 else 8e-2)
    finally:
        rop.TUNE = None
    assert computed == [1, 1, 1], computed


@pytest.mark.parametrize("split", ["coef", "fwd"])
@pytest.mark.parametrize("d,heads", [(1280, 8), (1024, 8), (512, 8), (1024, 16)])
def test_phase_one_one_head_per_program(split, d, heads, gen):
    # coef_split: the COEF pass with a head per program and the forward's key-norm scales;
    # fwd_split: the forward too, with a KeyScales shared by the calls of a growing source
    # list. 1 and 2 warps (a launch that does not fit would warn and fall back: an error
    # here); then a stream's chain through a sink
    import warnings

    for warps in (1, 2):
        rop.TUNE = dict(fwd_dot=True, coef_dot=True, coef_split=True, fwd_split=split == "fwd",
                        **{f"{split}_split_warps": warps, f"{split}_split_progs_per_sm": 8 // warps})
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("error", message="mhar routing")
                if split == "fwd":
                    check_key_scales_chain(37, (300,), d, heads, 8, dtype=torch.bfloat16, tol=1e-2, device=DEV,
                                           gen=gen)
                else:
                    check_partial(37, (300,), d, heads, 8, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen)
            check_sink_chain(20, (256,), d, heads, dtype=torch.bfloat16, device=DEV, gen=gen, chunk=8, tol=2e-2)
            if split == "coef":
                _check_bf16_accuracy(d, heads, gen)
        finally:
            rop.TUNE = None


_CAPPED = {"coef_grads_maxnreg": 168, "coef_grads_progs_per_sm": 12, "coef_grads_stages": 1}


@pytest.mark.parametrize("d,heads,tune", [(1280, 8, {}), (1024, 8, {}), (512, 8, {}),
                                          (1280, 8, {"coef_grads_w_lo": True}), (1024, 8, {"coef_grads_w_lo": True}),
                                          (1024, 8, {**_CAPPED, "coef_grads_lanes": 16}),
                                          (1024, 8, {**_CAPPED, "coef_grads_progs_per_sm": 11, "coef_grads_stages": 2})],
                         ids=["1280", "1024", "512", "1280-w_lo", "1024-w_lo", "1024-capped-1stage", "1024-capped"])
def test_coef_grads(d, heads, tune, gen):
    # coef_grads (the default at 512, 1024 and 1280): the split COEF pass forms the sources'
    # gradients, the key norm's x term deferred to phase 2 or the sink; the two passes'
    # gradients within bf16 rounding, and the chain against fp64; w in the gradient
    # product rounded to bf16 (the default) or as two parts; the pass capped at 168
    # registers, 11 or 12 programs per SM (its residency settings)
    rop.TUNE = tune
    try:
        check_coef_grads(20, (256,), d, heads, device=DEV, gen=gen, chunk=8)
        check_sink_chain(20, (256,), d, heads, dtype=torch.bfloat16, device=DEV, gen=gen, chunk=8, tol=2e-2)
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("n_sites,d,heads,extra,chunk", [(12, 512, 8, False, 0), (6, 1280, 1, True, 0),
                                                         (9, 1024, 16, False, 4)])
def test_gradient_sink(n_sites, d, heads, extra, chunk, gen):
    check_sink_chain(n_sites, (300,), d, heads, device=DEV, gen=gen, extra=extra, chunk=chunk)
    check_sink_chain(n_sites, (256,), d, heads, dtype=torch.bfloat16, device=DEV, tol=2e-2, gen=gen,
                     extra=extra, chunk=chunk)


@pytest.mark.parametrize("n_sites,d,heads,block,two_phase", [(9, 1024, 8, 4, False), (9, 1024, 8, 4, True),
                                                             (7, 1280, 1, 3, True)])
def test_gradient_sink_block_running_sums(n_sites, d, heads, block, two_phase, gen):
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        check_sink_chain(n_sites, (256,), d, heads, dtype=dtype, device=DEV, tol=tol, gen=gen, chunk=int(two_phase),
                         block=block)


@pytest.mark.parametrize("n,d,heads", [(3, 1024, 8), (5, 1280, 8), (8, 1024, 8), (1, 512, 8), (4, 1280, 1)])
def test_tokens_per_step(n, d, heads, gen):
    # phase 1's forward (with the key-norm scales read) and gather with several tokens at a
    # time (dot_tokens, coef_tokens, gather_tokens) for reads of at most 8 sources, bf16 (exact rows,
    # coefficients as parts) and fp32, a token count not a multiple of 8; against fp64,
    # and through running sums as a block's reads (8 at a time: the interpreter's tests)
    for cap in (2, 4):
        rop.TUNE = dict(gather_tokens=cap, dot_tokens=cap, dot_group_tokens=cap, coef_tokens=cap)
        try:
            check_key_scales_chain(n, (301,), d, heads, 6, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen)
            check_partial(n, (301,), d, heads, 6, dtype=torch.bfloat16, tol=1e-2, device=DEV, gen=gen)
            check_partial(n, (301,), d, heads, 6, device=DEV, gen=gen)
            check_sink_chain(9, (203,), d, heads, dtype=torch.bfloat16, device=DEV, tol=2e-2, gen=gen, chunk=1,
                             block=4)
        finally:
            rop.TUNE = None


@pytest.mark.parametrize("tune", [dict(bwd_twopass=False), dict(gather_sources=32, gather_cols=64),
                                  dict(gather_sources=64, gather_cols=128, gather_warps=8),
                                  dict(gather_precision="tf32"), dict(gather_precision="tf32x3")],
                         ids=["s-loop", "blocks-of-32", "blocks-of-64", "tf32", "tf32x3"])
@pytest.mark.parametrize("n,d,heads,S", [(25, 512, 8, 8), (49, 1024, 1, 8), (17, 1280, 8, 6), (9, 1280, 1, 3)])
def test_partial_other_backward(n, d, heads, S, tune, gen):
    # phase 1's backward other than the default (op._PHASE1_BACKWARD): the loop over the
    # S queries per source, or the two-pass gather over blocks of 32 or 64 sources (in
    # chunks of 64 or 128 columns), or with tl.dot's single tf32 or tf32x3 products instead
    # of three bf16 ones
    rop.TUNE = tune
    try:
        check_partial(n, (300,), d, heads, S, device=DEV, gen=gen)
        check_partial(n, (256,), d, heads, S, dtype=torch.bfloat16, device=DEV, tol=1e-2, gen=gen)
        check_sink_chain(9, (200,), d, heads, device=DEV, gen=gen, chunk=S)
    finally:
        rop.TUNE = None


@pytest.mark.parametrize("d", [512, 1024])
def test_persistent_grids_run_whole_waves(d, monkeypatch):
    """The op notes what an SM holds of each persistent launch's compiled kernel at its
    first launch, and sizes later launches of it in whole waves (``occupancy``). Every
    launch of a two-phase MHAR model's step tells its registers (a fit above 0), and the
    second step's gradients, on grids sized from that, match the first's. On an H100 /
    H200 with triton 3.6 (the settings' stack) no launch is resized: each config already
    asks for whole waves there (offline: ``bench/compile_sm90.py --kernels residency``)."""
    import triton

    from mhar.model import Decoder, ModelConfig, method_stream
    from mhar.routing import occupancy

    monkeypatch.setattr(rop, "_FIT", {})
    asked = {}
    n_programs = rop._n_programs

    def sizing(device, n_tiles, per_sm, share=1, launch=None):
        asked[launch] = per_sm
        return n_programs(device, n_tiles, per_sm, share, launch)

    monkeypatch.setattr(rop, "_n_programs", sizing)
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=256, d_model=d, n_layers=4, n_heads=8, n_kv_heads=8, d_ff=2 * d, max_seq_len=1024,
                      stream=method_stream("mhar", 8, d, schedule="two-phase", chunk=4))
    model = Decoder(cfg).to(DEV)
    x = torch.randint(0, 256, (4, 1025), device=DEV)

    def step_grads():
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.bfloat16):
            model.loss(x[:, :-1], x[:, 1:]).backward()
        return [p.grad.clone() for p in model.parameters()]

    first = step_grads()  # the configured grids; every launch notes its kernel
    fits = {key: rop._FIT.get(key, 0) for key in asked}
    second = step_grads()  # whole waves of what was noted
    launched = {key: occupancy.whole_waves(per_sm, fits[key]) for key, per_sm in asked.items()}
    table = [(key[0], asked[key], fits[key], launched[key]) for key in asked]
    print("\n(kernel, asked per SM, held, launched per SM):", *sorted(set(table)), sep="\n")
    assert asked and None not in asked and all(fits.values()), table
    assert all(n <= fits[k] or n % fits[k] == 0 for k, n in launched.items()), table
    for a, b in zip(first, second):
        assert rel(a, b) < 1e-2
    if torch.cuda.get_device_capability() == (9, 0) and triton.__version__.startswith("3.6."):
        assert launched == asked, table
