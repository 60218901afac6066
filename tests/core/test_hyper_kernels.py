"""The hyper-connection glue's Triton kernels (mhar/streams/hyper_kernels.py, the
``triton`` backend of mhar/streams/hyper.py) against the reference contraction and
broadcast ops: forward values and every gradient, for 1-5 streams, sizes that are not a
multiple of the kernels' block, a stride-0 expanded start, fp32 and bf16, a whole
stream under autocast, and bitwise reproducibility. Kernel outputs are filled with NaN
before each call, so an element a kernel never writes fails the comparison.

The cases run on the CPU through Triton's interpreter in a subprocess (this file again,
with TRITON_INTERPRET=1, which triton reads when first imported); in the parent process
they are skipped and ``test_cases_under_interpreter`` reports them. Relative error =
||a - b|| / ||b|| against an fp64 reference: 1e-5 for fp32, 1e-2 for bf16."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
import torch

from interpreter_run import run_interpreter_cases

from mhar.streams import HyperStream
from mhar.streams import hyper as HY

HERE = Path(__file__).resolve()
INNER = os.environ.get("MHAR_HYPER_INTERPRET_CASES") == "1"
interp = pytest.mark.skipif(not INNER, reason="runs inside test_cases_under_interpreter (TRITON_INTERPRET=1)")


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    assert torch.isfinite(a).all(), "non-finite values (an unwritten output?)"
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


@pytest.fixture
def triton_backend(monkeypatch):
    monkeypatch.setattr(HY, "_alloc", lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype,
                                                                            device=device))
    HY.set_backend("triton")
    yield
    HY.set_backend(None)


def _mix_case(n, lead, dtype, expanded, gen):
    alpha = torch.randn(n, n + 1, generator=gen)
    if expanded:  # the stream's start: n copies of the embedding as a stride-0 view
        X = torch.randn(*lead, generator=gen).to(dtype)
    else:
        X = torch.randn(n, *lead, generator=gen).to(dtype)
    gx = torch.randn(*lead, generator=gen).to(dtype)
    gm = torch.randn(n, *lead, generator=gen).to(dtype)
    return alpha, X, gx, gm


def _mix_grads(fn, alpha, X, gx, gm, n, expanded, use_mixed=True):
    alpha = alpha.clone().requires_grad_()
    X = X.clone().requires_grad_()
    streams = X.unsqueeze(0).expand(n, *X.shape) if expanded else X
    x, mixed = fn(alpha, streams)
    loss = (x * gx).sum() + ((mixed * gm).sum() if use_mixed else 0)
    return (x, mixed, *torch.autograd.grad(loss, [alpha, X]))


@interp
@pytest.mark.parametrize("n,lead", [(1, (3, 5)), (2, (7,)), (3, (2, 7, 40)), (4, (5, 123)), (5, (300,)),
                                    (4, (2, 3, 64))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("expanded", [False, True])
def test_interp_mix(n, lead, dtype, expanded, triton_backend):
    gen = torch.Generator().manual_seed(zlib.crc32(repr((n, lead, str(dtype), expanded)).encode()))
    alpha, X, gx, gm = _mix_case(n, lead, dtype, expanded, gen)
    got = _mix_grads(HY._mix, alpha, X, gx, gm, n, expanded)
    want = _mix_grads(HY._mix_reference, alpha.double(), X.double(), gx.double(), gm.double(), n, expanded)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for name, a, b in zip(("x", "mixed", "grad alpha", "grad X"), got, want):
        assert rel(a, b) < tol, (name, rel(a, b))
    assert got[0].dtype == got[1].dtype == dtype and got[3].dtype == dtype


@interp
def test_interp_mix_with_one_output_unused(triton_backend):
    gen = torch.Generator().manual_seed(1)
    alpha, X, gx, gm = _mix_case(4, (3, 50), torch.float32, False, gen)
    got = _mix_grads(HY._mix, alpha, X, gx, gm, 4, False, use_mixed=False)
    want = _mix_grads(HY._mix_reference, alpha.double(), X.double(), gx.double(), gm.double(), 4, False,
                      use_mixed=False)
    for a, b in zip(got[2:], want[2:]):
        assert rel(a, b) < 1e-5


@interp
@pytest.mark.parametrize("n,lead", [(1, (3, 5)), (3, (2, 7, 40)), (4, (5, 123)), (5, (300,))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_interp_update(n, lead, dtype, triton_backend):
    gen = torch.Generator().manual_seed(zlib.crc32(repr((n, lead, str(dtype))).encode()))
    mixed = torch.randn(n, *lead, generator=gen).to(dtype)
    beta = torch.randn(n, generator=gen)
    y = torch.randn(*lead, generator=gen).to(dtype)
    g = torch.randn(n, *lead, generator=gen).to(dtype)

    def run(fn, mixed, beta, y, g):
        mixed, beta, y = (t.clone().requires_grad_() for t in (mixed, beta, y))
        out = fn(mixed, beta, y)
        return (out, *torch.autograd.grad((out * g).sum(), [mixed, beta, y]))

    got = run(HY._update, mixed, beta, y, g)
    want = run(HY._update_reference, mixed.double(), beta.double(), y.double(), g.double())
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for name, a, b in zip(("out", "grad mixed", "grad beta", "grad y"), got, want):
        assert rel(a, b) < tol, (name, rel(a, b))


def _stream_run(stream, emb, outputs, autocast):
    emb = emb.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        state = stream.start(emb)
        reads = []
        for i, y in enumerate(outputs):
            x = state.read(i)
            reads.append(x)
            state.write(i, torch.tanh(x) + y)  # the sublayer: depends on its input
        final = state.final()
    loss = final.float().square().sum() + sum(r.float().sum() for r in reads)
    return (*reads, final, *torch.autograd.grad(loss, [emb, stream.static_alpha, stream.static_beta]))


@interp
@pytest.mark.parametrize("autocast", [False, True])
def test_interp_whole_stream(autocast, triton_backend):
    """Six sublayers, against the fp64 reference. Under bf16 autocast rounding compounds
    over the chain, and Triton's interpreter truncates fp32 to bf16 (a GPU rounds to
    nearest), which doubles the kernels' rounding error here: 2e-2."""
    torch.manual_seed(5)
    stream = HyperStream(48, 6, n=4)
    with torch.no_grad():
        stream.static_alpha.add_(0.3 * torch.randn(stream.static_alpha.shape))
        stream.static_beta.add_(0.3 * torch.randn(stream.static_beta.shape))
    emb, outputs = torch.randn(2, 9, 48), [torch.randn(2, 9, 48) for _ in range(6)]
    got = _stream_run(stream, emb, outputs, autocast)
    HY.set_backend("reference")
    ref = _stream_run(stream, emb, outputs, autocast)
    exact = _stream_run(stream.double(), emb.double(), [y.double() for y in outputs], False)
    for i, (a, r, e) in enumerate(zip(got, ref, exact)):
        assert a.dtype == r.dtype, i
        tol = 2e-2 if autocast else 1e-5
        assert rel(a, e) < tol and rel(r, e) < tol, (i, rel(a, e), rel(r, e))


@interp
def test_interp_decoder(triton_backend):
    """A whole hyper-connection decoder (embedding, sublayers, the stream's start as a
    stride-0 expand, its final mean), loss and every parameter's gradient."""
    from mhar.model import Decoder, ModelConfig, method_stream

    cfg = ModelConfig(vocab_size=61, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=16,
                      stream=method_stream("hyper", 4, 32))
    torch.manual_seed(7)
    model = Decoder(cfg)
    with torch.no_grad():
        model.residual.static_alpha.add_(0.3 * torch.randn_like(model.residual.static_alpha))
    ids = torch.randint(0, 61, (2, 11))
    runs = []
    for backend in ("triton", "reference"):
        HY.set_backend(backend)
        model.zero_grad(set_to_none=True)
        loss = model(ids).float().logsumexp(-1).mean()
        loss.backward()
        runs.append([loss.detach()] + [p.grad.clone() for p in model.parameters()])
    for i, (a, b) in enumerate(zip(*runs)):
        assert rel(a, b) < 1e-5, (i, rel(a, b))


def _saved_bytes(fn) -> int:
    """Bytes of the storages autograd saves while ``fn`` runs (each storage once)."""
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


def _recompute_stream(k: int, n: int, sublayers: int) -> HyperStream:
    torch.manual_seed(8)
    stream = HyperStream(40, sublayers, n=n, recompute=k)
    with torch.no_grad():
        stream.static_alpha.add_(0.3 * torch.randn(stream.static_alpha.shape))
        stream.static_beta.add_(0.3 * torch.randn(stream.static_beta.shape))
    return stream


@interp
@pytest.mark.parametrize("k", [1, 2, 3, 4, 9])
@pytest.mark.parametrize("n,autocast", [(4, False), (3, True)])
def test_interp_recompute_equals_keeping_the_streams(k, n, autocast, triton_backend):
    """Streams recomputed in backward in segments that halve down to k (seven sublayers:
    segments of 3, 2, 1, 1 for k = 1; 3, 2, 2 for k = 2 and 3; 3, 4 for k = 4; one for
    k = 9, past the depth) give every value and gradient of
    the run that keeps them, bit for bit; autograd saves fewer bytes; and a second
    backward (retain_graph) recomputes again."""
    emb, outputs = torch.randn(2, 5, 40), [torch.randn(2, 5, 40) for _ in range(7)]
    keep = _stream_run(_recompute_stream(0, n, 7), emb, outputs, autocast)
    stream = _recompute_stream(k, n, 7)
    got = _stream_run(stream, emb, outputs, autocast)
    for i, (a, b) in enumerate(zip(got, keep)):
        assert torch.equal(a, b), i
    if k > 1:
        kept = _saved_bytes(lambda: _stream_run(_recompute_stream(0, n, 7), emb, outputs, autocast))
        fewer = _saved_bytes(lambda: _stream_run(stream, emb, outputs, autocast))
        assert fewer < kept, (fewer, kept)

    e = emb.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        state = stream.start(e)
        for i, y in enumerate(outputs):
            state.write(i, torch.tanh(state.read(i)) + y)
        loss = state.final().float().square().sum()
    first = torch.autograd.grad(loss, [e, stream.static_alpha], retain_graph=True)
    second = torch.autograd.grad(loss, [e, stream.static_alpha])
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_recompute_starts_halve_down_to_the_last_segment():
    """Each segment covers half of the sublayers left, until the rest fit in one of at
    most ``last``: the paper presets' depths with the default (6), and the edges."""
    assert HY.recompute_starts(24, 6) == [0, 12, 18]  # 100M: segments 12, 6, 6
    assert HY.recompute_starts(48, 6) == [0, 24, 36, 42]  # 350M
    assert HY.recompute_starts(72, 6) == [0, 36, 54, 63, 67]  # 1B: 36, 18, 9, 4, 5
    assert HY.recompute_starts(7, 1) == [0, 3, 5, 6]
    assert HY.recompute_starts(7, 7) == HY.recompute_starts(7, 9) == [0]
    for total in range(1, 80):
        for last in (1, 2, 5, 8):
            starts = HY.recompute_starts(total, last)
            lengths = [b - a for a, b in zip(starts, starts[1:] + [total])]
            assert starts[0] == 0 and lengths[-1] <= last, (total, last, lengths)
            # each earlier segment: half of the sublayers left where it starts (rounded down),
            # with more than last of them left
            assert all(n == (total - a) // 2 and total - a > last for a, n in zip(starts, lengths[:-1])), lengths
    with pytest.raises(ValueError, match="at least one"):
        HY.recompute_starts(24, 0)


@interp
def test_interp_recompute_releases_the_step(triton_backend):
    """After backward nothing of the step may stay alive: a segment (which its autograd
    nodes reference) that held a tensor with a grad_fn closed a reference cycle through
    the graph, which Python's collector cannot see into, so every step's graph leaked;
    under CUDA graph capture the previous iteration's AccumulateGrad nodes then broke
    the capture (session 9, run 3)."""
    import weakref

    stream = _recompute_stream(4, 4, 7)
    emb, outputs = torch.randn(2, 5, 40), [torch.randn(2, 5, 40) for _ in range(7)]
    written = []
    e = emb.clone().requires_grad_()
    state = stream.start(e)
    for i, y in enumerate(outputs):
        out = torch.tanh(state.read(i)) + y
        written.append(weakref.ref(out))
        state.write(i, out)
    state.final().float().square().sum().backward()
    del state, out
    assert all(w() is None for w in written), "a sublayer output outlived its step"


@interp
def test_interp_deterministic(triton_backend):
    gen = torch.Generator().manual_seed(2)
    alpha, X, gx, gm = _mix_case(4, (3, 700), torch.bfloat16, False, gen)
    a = _mix_grads(HY._mix, alpha, X, gx, gm, 4, False)
    b = _mix_grads(HY._mix, alpha, X, gx, gm, 4, False)
    assert all(torch.equal(u, v) for u, v in zip(a, b))


@interp
@pytest.mark.parametrize("recompute", [0, 2])
def test_interp_second_order_is_an_error(recompute, triton_backend):
    # the kernels' backward passes are not differentiable: a gradient penalty through them
    # took their first-order gradients as constants, silently missing the mixing's terms
    stream = HyperStream(8, 4, n=2, recompute=recompute)
    x = torch.randn(2, 3, 8, requires_grad=True)
    state = stream.start(x)
    for i in range(4):
        state.write(i, torch.tanh(state.read(i)))
    loss = state.final().square().sum() + x.pow(3).sum()  # x's own path keeps the penalty differentiable
    gx, = torch.autograd.grad(loss, x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gx.square().sum().backward()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.cuda
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("recompute", [0, 4, 8])
def test_cuda_whole_stream(autocast, recompute, triton_backend):
    """The compiled kernels on a GPU, a wider stream (several programs per stream), with
    the streams kept or recomputed in backward."""
    torch.manual_seed(6)
    stream = HyperStream(256, 6, n=4, recompute=recompute).cuda()
    with torch.no_grad():
        stream.static_alpha.add_(0.3 * torch.randn_like(stream.static_alpha))
        stream.static_beta.add_(0.3 * torch.randn_like(stream.static_beta))
    emb, outputs = torch.randn(2, 65, 256, device="cuda"), [torch.randn(2, 65, 256, device="cuda") for _ in range(6)]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        got = _stream_run(stream, emb, outputs, False)
    exact = _stream_run(stream.double(), emb.double(), [y.double() for y in outputs], False)
    for i, (a, e) in enumerate(zip(got, exact)):
        assert rel(a, e) < (2e-2 if autocast else 1e-5), (i, rel(a, e))


# ------------------------------------------------------------------ parent process


def test_cases_under_interpreter():
    if INNER:
        pytest.skip("already inside the interpreter run")
    run_interpreter_cases(HERE, "MHAR_HYPER_INTERPRET_CASES")


def test_backend_default_is_triton_on_cuda_only(monkeypatch):
    monkeypatch.delenv("MHAR_HYPER_BACKEND", raising=False)
    HY.set_backend(None)
    assert HY._BACKEND.use_triton(True, torch.bfloat16) == HY._BACKEND.triton_available()
    assert not HY._BACKEND.use_triton(False, torch.float32)
    monkeypatch.setenv("MHAR_HYPER_BACKEND", "reference")
    assert not HY._BACKEND.use_triton(True, torch.bfloat16)
    monkeypatch.setenv("MHAR_HYPER_BACKEND", "nope")
    with pytest.raises(ValueError, match="MHAR_HYPER_BACKEND"):
        HY._BACKEND.get()
