"""The fused LM-head + cross-entropy (Triton kernel in mhar/model/ce_kernel.py, the
``triton`` backend of mhar/model/loss.py) against the plain PyTorch path.

The kernel cases run on the CPU through Triton's interpreter in a subprocess (this
file again, with TRITON_INTERPRET=1: triton reads it when first imported, which a
shared pytest process cannot promise); in the parent process they are skipped and
``test_cases_under_interpreter`` reports them. The CUDA case runs on a GPU only.

Relative error = ||a - b|| / ||b||; fp32 inputs must match the fp64 plain path to
1e-5, bf16 to 1e-2."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from interpreter_run import run_interpreter_cases

from mhar.model import loss as L

HERE = Path(__file__).resolve()
INNER = os.environ.get("MHAR_CE_INTERPRET_CASES") == "1"
interp = pytest.mark.skipif(not INNER, reason="runs inside test_cases_under_interpreter (TRITON_INTERPRET=1)")


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    assert torch.isfinite(a).all(), "non-finite values"
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def make(n, d, V, dtype=torch.float32, ignore=(), seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).to(dtype)
    w = (torch.randn(V, d, generator=g) * scale / math.sqrt(d))
    t = torch.randint(0, V, (n,), generator=g)
    for i in ignore:
        t[i] = -100
    return h, w, t


def loss_and_grads(h, w, t, chunk, z_loss, upstream=1.7, backend="reference", autocast=None):
    h = h.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    L.set_backend(backend)
    try:
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            out = L.linear_cross_entropy(h, w, t, chunk_size=chunk, z_loss=z_loss)
        gh, gw = torch.autograd.grad(out * upstream, (h, w))
    finally:
        L.set_backend(None)
    return out.detach(), gh, gw


# ------------------------------------------------------------------ parent process


def test_cases_under_interpreter():
    if INNER:
        pytest.skip("already inside the interpreter run")
    run_interpreter_cases(HERE, "MHAR_CE_INTERPRET_CASES")


def test_backend_selection(monkeypatch):
    h, w, t = make(4, 8, 16)
    monkeypatch.delenv("MHAR_LOSS_BACKEND", raising=False)
    assert not L._use_fused(h, w)  # auto on CPU: reference
    monkeypatch.setenv("MHAR_LOSS_BACKEND", "nope")
    with pytest.raises(ValueError, match="MHAR_LOSS_BACKEND"):
        L.get_backend()
    with pytest.raises(ValueError, match="loss backend"):
        L.set_backend("fast")
    monkeypatch.setenv("MHAR_LOSS_BACKEND", "reference")
    assert not L._use_fused(h, w)
    if not INNER and L._triton_available():
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        monkeypatch.setenv("MHAR_LOSS_BACKEND", "triton")
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
            L._use_fused(h, w)


def test_loss_bench_cpu_smoke(tmp_path):
    """bench/loss_bench.py end to end at tiny shapes on the CPU (kernel under the
    interpreter), so the GPU run does not die of a typo."""
    pytest.importorskip("triton")
    if INNER:
        pytest.skip("run by the parent process")
    import json
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = str(HERE.parents[2] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    out = tmp_path / "loss.json"
    r = subprocess.run([sys.executable, str(HERE.parents[2] / "bench" / "loss_bench.py"), "--device", "cpu",
                        "--tiny", "--out", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    # the bench records a failing launch as an entry with "error" (so one bad config on the
    # GPU does not end the run); here every entry must have been timed, and there must be one
    sweep = res["kernel_sweep"]
    assert sweep and all("ms" in s for s in sweep), sweep
    assert any(row["method"].startswith("fused") for row in res["results"]), res["results"]
    for row in res["results"]:
        assert "ms" in row or row["method"] == "liger", row
        if "loss" in row:
            assert abs(row["loss_diff_vs_reference"]) < 1e-4, row
    assert "| preset | d | method |" in r.stdout


# ------------------------------------------------- interpreter cases (subprocess)


def _logits_chunk(rows: int, V: int):
    """Random logits and targets: rows 2 and 7 ignored, row 0's target in the last tile."""
    g = torch.Generator().manual_seed(V)
    x = torch.randn(rows, V, generator=g) * 4
    t = torch.randint(0, V, (rows,), generator=g)
    t[[2, 7]] = -100
    t[0] = V - 1  # target in the masked last tile
    return x, t


def _want_ce(x: torch.Tensor, t: torch.Tensor, z_loss: float, count: float):
    """fp64 loss, lse and gradient of ``loss.sum() / count`` for a logits chunk."""
    x64 = x.double()
    v = t != -100
    want_lse = torch.logsumexp(x64, -1)
    st = torch.where(v, t, 0)
    want_loss = (want_lse - x64.gather(1, st[:, None]).squeeze(1) + z_loss * want_lse ** 2) * v
    want_g = torch.softmax(x64, -1) * (1 + 2 * z_loss * want_lse)[:, None]
    want_g[torch.arange(x.shape[0]), st] -= 1
    want_g *= (v / count)[:, None]
    return want_loss, want_lse, want_g


@interp
@pytest.mark.parametrize("V,block,z_loss,programs,reverse", [
    (300, 64, 0.0, 0, False), (300, 64, 1e-2, 0, False), (97, 32, 1e-3, 0, False), (256, 64, 0.0, 0, False),
    (300, 64, 1e-2, 4, False),   # 4 programs looping over the 9 rows (uneven)
    (300, 64, 1e-2, 0, True),    # the second pass from each row's end
    (97, 32, 1e-3, 2, True),
])
def test_interp_kernel(V, block, z_loss, programs, reverse):
    """The two-pass kernel alone against fp64 torch: loss, lse and the in-place gradient,
    with a masked last tile (V not a multiple of block) and ignored rows; one program
    per row or a few looping over the rows, the second pass forward or reversed."""
    from mhar.model.ce_kernel import cross_entropy_grad_
    x, t = _logits_chunk(9, V)
    inv_count = torch.tensor([1 / 11.0])  # count of the whole batch, not this chunk
    xx = x.clone()
    loss, lse = cross_entropy_grad_(xx, t, inv_count, z_loss, -100, block=block, programs=programs, reverse=reverse)
    want_loss, want_lse, want_g = _want_ce(x, t, z_loss, 11.0)
    v = t != -100
    assert rel(lse, want_lse) <= 1e-6
    assert rel(loss, want_loss) <= 1e-6
    assert rel(xx, want_g) <= 1e-5
    assert (loss[~v] == 0).all() and (xx[~v] == 0).all()


@interp
@pytest.mark.parametrize("V,block,z_loss", [(300, 64, 0.0), (300, 64, 1e-2), (97, 32, 1e-3), (256, 64, 0.0)])
def test_interp_one_pass_kernel(V, block, z_loss):
    """The one-pass kernel against fp64 torch: loss, lse, and the chunk it leaves, which
    times the row scale is the gradient. Rows whose max lies far past their first tile's
    (once, twice, and at the masked last tile) take the rescaling branch; one row's
    logits are large (around 5000, no overflow); ignored rows get a zero row scale."""
    from mhar.model.ce_kernel import HEADROOM, cross_entropy_scaled_grad_
    rows = 10
    x, t = _logits_chunk(rows, V)
    x[3, block + 5] = x[3, :block].max() + HEADROOM + 3  # one rescale, at the second tile
    x[4, block + 1] = x[4, :block].max() + HEADROOM + 1  # two rescales
    x[4, 2 * block + 7] = x[4, block + 1] + HEADROOM + 2
    t[4] = 3
    x[5, V - 1] = x[5, :block].max() + 2 * HEADROOM  # at the masked last tile
    x[6] += 5000.0
    x[8, t[8]] = x[8].max() + 5  # a confident row: p - 1 at the target is about -0.02
    inv_count = torch.tensor([1 / 13.0])  # count of the whole batch, not this chunk
    xx = x.clone()
    loss, lse, row_scale = cross_entropy_scaled_grad_(xx, t, inv_count, z_loss, -100, block=block)
    want_loss, want_lse, want_g = _want_ce(x, t, z_loss, 13.0)
    got_g = xx.double() * row_scale.double()[:, None]
    assert rel(lse, want_lse) <= 1e-6
    assert rel(loss, want_loss) <= 1e-6
    assert rel(got_g, want_g) <= 1e-5
    for r in (3, 4, 5, 6, 8):  # row by row, so a wrong rare branch cannot hide in the total
        assert rel(got_g[r], want_g[r]) <= 1e-5, r
    # element by element off the targets: a tile left at its old reference would be off by
    # e^20 or more, however small its share of the row's norm
    off = want_g.abs() > 1e-30
    off[torch.arange(rows), torch.where(t != -100, t, 0)] = False
    assert (got_g[off] / want_g[off] - 1).abs().max() <= 1e-4
    v = t != -100
    assert (loss[~v] == 0).all() and (row_scale[~v] == 0).all() and torch.isfinite(xx).all()
    # without the gradient: the same statistics, the chunk untouched
    x2 = x.clone()
    loss2, lse2, _ = cross_entropy_scaled_grad_(x2, t, inv_count, z_loss, -100, block=block, write_grad=False)
    assert torch.equal(x2, x) and rel(lse2, want_lse) <= 1e-6 and rel(loss2, want_loss) <= 1e-6


@interp
@pytest.mark.parametrize("n,d,V,chunk,z_loss", [
    (37, 24, 203, 8, 0.0),     # chunk does not divide n; V not a multiple of the tile
    (37, 24, 203, 16, 1e-2),
    (50, 16, 130, 64, 1e-3),   # one chunk larger than n
    (33, 8, 64, 11, 0.0),      # V a multiple of the tile
])
@pytest.mark.parametrize("one_pass", [True, False])
def test_interp_fused_matches_plain(n, d, V, chunk, z_loss, one_pass, monkeypatch):
    from mhar.model import ce_kernel
    monkeypatch.setattr(ce_kernel, "BLOCK", 64)  # several tiles, the last one masked
    monkeypatch.setattr(ce_kernel, "ONE_PASS", one_pass)
    h, w, t = make(n, d, V, ignore=(1, 5, n - 1), seed=n + V)
    want = loss_and_grads(h.double(), w.double(), t, 0, z_loss)
    got = loss_and_grads(h, w, t, chunk, z_loss, backend="triton")
    ref = loss_and_grads(h, w, t, chunk, z_loss, backend="reference")
    for a, r, b, name in zip(got, ref, want, ("loss", "grad_hidden", "grad_weight")):
        assert a.dtype == r.dtype, name
        assert rel(a, b) <= 1e-5, (name, rel(a, b))
    # the tolerance discriminates: a wrong z_loss, or ignoring the ignore_index, fails it
    off = loss_and_grads(h, w, t, chunk, z_loss + 1e-3, backend="triton")
    assert all(rel(a, b) > 1e-5 for a, b in zip(off, want))
    t2 = t.clone()
    t2[1] = 0
    off = loss_and_grads(h, w, t2, chunk, z_loss, backend="triton")
    assert all(rel(a, b) > 1e-5 for a, b in zip(off, want))


@interp
def test_interp_edge_cases(monkeypatch):
    from mhar.model import ce_kernel
    monkeypatch.setattr(ce_kernel, "BLOCK", 32)
    h, w, t = make(12, 8, 45, seed=4)
    # every target ignored: loss 0, gradients 0 (count clamps to 1)
    loss, gh, gw = loss_and_grads(h, w, torch.full_like(t, -100), 5, 1e-2, backend="triton")
    assert loss.item() == 0 and (gh == 0).all() and (gw == 0).all()
    # only one input needs a gradient; no gradient at all (eval)
    L.set_backend("triton")
    try:
        want = L.linear_cross_entropy(h.double(), w.double(), t, chunk_size=0)
        hr = h.clone().requires_grad_(True)
        out = L.linear_cross_entropy(hr, w, t, chunk_size=5)
        (gh,) = torch.autograd.grad(out, (hr,))
        wr = w.clone().requires_grad_(True)
        out2 = L.linear_cross_entropy(h, wr, t, chunk_size=5)
        (gw,) = torch.autograd.grad(out2, (wr,))
        with torch.no_grad():
            out3 = L.linear_cross_entropy(h, w, t, chunk_size=5)
    finally:
        L.set_backend(None)
    _, gh_ref, gw_ref = loss_and_grads(h.double(), w.double(), t, 0, 0.0, upstream=1.0)
    for o in (out, out2, out3):
        assert rel(o, want) <= 1e-5
    assert rel(gh, gh_ref) <= 1e-5 and rel(gw, gw_ref) <= 1e-5


@interp
def test_interp_under_torch_compile(monkeypatch):
    """The trainer may torch.compile the loss module: the fused call runs eagerly inside
    the compiled function (torch.compiler.disable) and still matches."""
    from mhar.model import ce_kernel
    monkeypatch.setattr(ce_kernel, "BLOCK", 32)
    calls = []
    real = ce_kernel.cross_entropy_scaled_grad_
    monkeypatch.setattr(ce_kernel, "cross_entropy_scaled_grad_", lambda *a, **k: calls.append(1) or real(*a, **k))
    h, w, t = make(21, 8, 70, ignore=(3,), seed=2)
    want = loss_and_grads(h.double(), w.double(), t, 0, 1e-3)
    hr, wr = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
    L.set_backend("triton")
    try:
        f = torch.compile(lambda a, b: L.linear_cross_entropy(a, b, t, chunk_size=8, z_loss=1e-3) * 1.7,
                          backend="aot_eager")
        out = f(hr, wr)
    finally:
        L.set_backend(None)
    got = (out.detach() / 1.7, *torch.autograd.grad(out, (hr, wr)))
    assert len(calls) == 3  # three chunks through the kernel
    for a, b in zip(got, want):
        assert rel(a, b) <= 1e-5


@interp
def test_interp_bf16_autocast(monkeypatch):
    """bf16 hidden, fp32 master weight, CPU autocast: the compute dtype is bf16 (weight
    cast once), grad_hidden stays bf16, grad_weight fp32 (weight's dtype)."""
    from mhar.model import ce_kernel
    monkeypatch.setattr(ce_kernel, "BLOCK", 64)
    h, w, t = make(40, 32, 150, ignore=(3,), seed=9)
    h = h.bfloat16()
    want = loss_and_grads(h.double(), w.to(torch.bfloat16).double(), t, 0, 1e-3)
    got = loss_and_grads(h, w, t, 16, 1e-3, backend="triton", autocast=torch.bfloat16)
    assert got[1].dtype == torch.bfloat16 and got[2].dtype == torch.float32
    for a, b, name in zip(got, want, ("loss", "grad_hidden", "grad_weight")):
        assert rel(a, b) <= 1e-2, (name, rel(a, b))


def _check_scale_unless_one(dtype: torch.dtype, device: str, exact_bf16: bool) -> None:
    """scale_unless_one_ against torch's x * s.to(x.dtype) for several s, 1 included (skipped
    on the device). Triton's interpreter rounds fp32 to bf16 toward zero (the GPU to nearest),
    both s and the product, so there a bf16 result may be two units in the last place off."""
    from mhar.model import ce_kernel
    x = torch.randn(7, 45, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    for s in (1.0, 2.5, 0.0, -0.3, 1.0 + 2 ** -20):  # the last rounds to 1 in bf16
        scale = torch.tensor([s], device=device)
        got = ce_kernel.scale_unless_one_(x.clone(), scale)
        want = x * scale.reshape(()).to(dtype)
        if dtype == torch.float32 or exact_bf16:
            assert torch.equal(got, want), s
        else:
            torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=0, msg=str(s))
    nearly_one = torch.tensor(1.0 + 2 ** -20, device=device)
    changed = not torch.equal(ce_kernel.scale_unless_one_(x.clone(), nearly_one), x)
    assert changed == (dtype == torch.float32)  # fp32 keeps the scale, bf16 rounds it to 1
    t = x.clone().t()  # not contiguous: torch's own product
    assert torch.equal(ce_kernel.scale_unless_one_(t, torch.tensor(2.5, device=device)), x.t() * 2.5)
    with pytest.raises(ValueError, match="one element"):
        ce_kernel.scale_unless_one_(x.clone(), torch.ones(2, device=device))


@interp
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_interp_scale_unless_one(dtype, monkeypatch):
    """The backward's upstream scale, in place; several programs, the last one masked."""
    from mhar.model import ce_kernel
    monkeypatch.setattr(ce_kernel, "SCALE_BLOCK", 64)
    _check_scale_unless_one(dtype, "cpu", exact_bf16=False)


@interp
@pytest.mark.parametrize("hand_over", [True, False])
@pytest.mark.parametrize("upstream", [1.0, 0.5])
def test_interp_tied_decoder_on_the_fused_loss(upstream, hand_over, monkeypatch):
    """A tied decoder's every gradient with the fused loss against the reference backend's:
    upstream 1 (skipped with hand_over) and 0.5, over two accumulated micro-batches. With
    hand_over its backward scales the gradients it formed in place and hands them over, and
    the tied embedding adds its rows into the head's."""
    from mhar.model import Decoder, ModelConfig, StreamConfig, ce_kernel
    monkeypatch.setattr(ce_kernel, "BLOCK", 32)
    monkeypatch.setattr(L, "HAND_OVER", hand_over)
    torch.manual_seed(4)
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=32,
                      stream=StreamConfig(method="routed", heads=4))
    model = Decoder(cfg)
    x = torch.randint(0, 64, (2, 17))

    def grads(backend):
        L.set_backend(backend)
        try:
            model.zero_grad(set_to_none=True)
            for _ in range(2):
                (model.loss(x[:, :-1], x[:, 1:], chunk_size=5, z_loss=1e-3) * upstream).backward()
        finally:
            L.set_backend(None)
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    got, want = grads("triton"), grads("reference")
    for name in want:
        torch.testing.assert_close(got[name], want[name], msg=name)


@interp
def test_interp_second_backward_through_the_fused_loss_is_an_error(monkeypatch):
    """With MHAR_CE_HAND_OVER=1 its first backward hands over the gradients it formed,
    scaled in place: a second one (retain_graph) is refused, and leaves the first's results
    as they were. The reference backend backpropagates twice as autograd does."""
    from mhar.model import ce_kernel
    monkeypatch.setattr(ce_kernel, "BLOCK", 32)
    monkeypatch.setattr(L, "HAND_OVER", True)
    h, w, t = make(12, 8, 45, seed=6)
    for backend in ("triton", "reference"):
        hr, wr = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
        L.set_backend(backend)
        try:
            out = L.linear_cross_entropy(hr, wr, t, chunk_size=5) * 0.5
            first = torch.autograd.grad(out, (hr, wr), retain_graph=True)
            kept = [g.clone() for g in first]
            if backend == "triton":
                with pytest.raises(RuntimeError, match="second backward through the fused"):
                    torch.autograd.grad(out, (hr, wr))
            else:
                for a, b in zip(torch.autograd.grad(out, (hr, wr)), kept):
                    assert torch.equal(a, b)
        finally:
            L.set_backend(None)
        for a, b in zip(first, kept):
            assert torch.equal(a, b)
        _, gh, gw = loss_and_grads(h.double(), w.double(), t, 0, 0.0, upstream=0.5)
        assert rel(first[0], gh) <= 1e-5 and rel(first[1], gw) <= 1e-5


def test_second_order_through_the_chunked_loss_is_an_error():
    # its gradients are formed in the forward, so a gradient penalty through it took them
    # as constants, silently; the plain loss (chunk 0) differentiates twice as autograd does
    h, w, t = make(12, 8, 45, seed=5)
    h.requires_grad_(True)
    penalty = {}
    for chunk in (0, 5):
        loss = L.linear_cross_entropy(h, w, t, chunk_size=chunk)
        if chunk:
            with pytest.raises(RuntimeError, match="differentiate twice"):
                torch.autograd.grad(loss, h, create_graph=True)
        else:
            gh, = torch.autograd.grad(loss, h, create_graph=True)
            penalty[chunk], = torch.autograd.grad(gh.square().sum(), h)
    assert penalty[0].abs().sum() > 0
    loss = L.linear_cross_entropy(h, w, t, chunk_size=5)  # a first order is as before
    assert torch.allclose(torch.autograd.grad(loss, h)[0], torch.autograd.grad(
        L.linear_cross_entropy(h, w, t, chunk_size=0), h)[0], atol=1e-6)


def _accumulator_writes_first(dev: str, dtype: torch.dtype) -> None:
    # the fused path's fp32 head gradient starts as torch.empty: the first chunk's product
    # must overwrite it, NaNs included, and the later ones add
    g = torch.Generator().manual_seed(3)
    a = [torch.randn(8, 16, generator=g).to(dev, dtype) for _ in range(3)]
    b = [torch.randn(8, 12, generator=g).to(dev, dtype) for _ in range(3)]
    acc = torch.full((16, 12), float("nan"), device=dev)
    accumulator = L._Accumulator(acc, dtype)
    for x, y in zip(a, b):
        accumulator.add(x, y)
    want = sum(x.double().t() @ y.double() for x, y in zip(a, b))
    assert rel(acc, want) <= (1e-6 if dtype == torch.float32 else 1e-2), (accumulator.mode, rel(acc, want))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_accumulator_first_chunk_writes(dtype):
    _accumulator_writes_first("cpu", dtype)


# ------------------------------------------------------------------------- CUDA


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_accumulator_first_chunk_writes():
    """In the mode probed on this GPU (addmm with out_dtype and beta=0 where torch has it)."""
    _accumulator_writes_first("cuda", torch.bfloat16)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_scale_unless_one(dtype):
    """On the GPU the kernel rounds as torch does: bf16 results equal too."""
    pytest.importorskip("triton")
    _check_scale_unless_one(dtype, "cuda", exact_bf16=True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("z_loss", [0.0, 1e-4])
def test_cuda_fused_bf16_matches_fp32(z_loss):
    """The paper's shapes: V = 151,936, bf16 hidden, fp32 weight, bf16 autocast like the
    trainer; against the fp32 plain path on the same (bf16-rounded) inputs."""
    pytest.importorskip("triton")
    dev = "cuda"
    n, d, V, chunk = 4100, 512, 151936, 2048
    g = torch.Generator(device=dev).manual_seed(0)
    h = torch.randn(n, d, device=dev, generator=g).bfloat16()
    w = torch.randn(V, d, device=dev, generator=g) * (3 / math.sqrt(d))
    t = torch.randint(0, V, (n,), device=dev, generator=g)
    t[::97] = -100
    t[1] = V - 1
    L.set_backend("auto")
    try:
        hr, wr = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
        with torch.autocast(dev, dtype=torch.bfloat16):
            out = L.linear_cross_entropy(hr, wr, t, chunk_size=chunk, z_loss=z_loss)
        gh, gw = torch.autograd.grad(out * 2.0, (hr, wr))
    finally:
        L.set_backend(None)
    assert out.dtype == torch.float32 and gh.dtype == torch.bfloat16 and gw.dtype == torch.float32
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        hf = h.float().requires_grad_(True)
        wf = w.bfloat16().float().requires_grad_(True)
        ref = L.linear_cross_entropy(hf, wf, t, chunk_size=0, z_loss=z_loss)
        rgh, rgw = torch.autograd.grad(ref * 2.0, (hf, wf))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    print(f"accumulation mode: {L._accum_mode(torch.device(dev), torch.bfloat16)}")
    for a, b, name in ((out, ref, "loss"), (gh, rgh, "grad_hidden"), (gw, rgw, "grad_weight")):
        e = rel(a, b)
        print(f"{name}: rel err {e:.2e}")
        assert e <= 1e-2, (name, e)
