"""The decoder: causality, learning, configuration errors, parameter counts."""

import pytest
import torch

from mhar.model import Decoder, ModelConfig, StreamConfig, apply_overrides, count_parameters, get_preset
from mhar.model.config import PRESETS
from mhar.model.layers import rope_cos_sin

METHODS = {
    "standard": StreamConfig(method="standard"),
    "hyper": StreamConfig(method="hyper", hyper_n=4),
    "attnres": StreamConfig(method="routed", heads=1),
    "mhar": StreamConfig(method="routed", heads=4),
    "mhar-block": StreamConfig(method="routed", heads=4, block_size=2, schedule="two-phase"),
    "mhar-chunked": StreamConfig(method="routed", heads=4, schedule="two-phase", chunk=3),
    "delta": StreamConfig(method="delta", heads=4, block_size=2),
}


def tiny(stream: StreamConfig) -> ModelConfig:
    return ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=32,
                       stream=stream)


@pytest.mark.parametrize("name", list(METHODS))
def test_causality(name):
    torch.manual_seed(0)
    model = Decoder(tiny(METHODS[name]))
    with torch.no_grad():  # routing away from uniform, gates open
        for p in model.residual.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    x = torch.randint(0, 64, (2, 16))
    y = x.clone()
    t = 9
    y[:, t + 1:] = torch.randint(0, 64, (2, 16 - t - 1))
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :t + 1], b[:, :t + 1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_learns_a_fixed_batch(name):
    torch.manual_seed(1)
    model = Decoder(tiny(METHODS[name]))
    x = torch.randint(0, 64, (2, 17))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(50):
        loss = model.loss(x[:, :-1], x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    routing = [p for p in model.residual.parameters()]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in routing)


def test_chunked_loss_equals_full_loss():
    torch.manual_seed(2)
    model = Decoder(tiny(METHODS["mhar"]))
    x = torch.randint(0, 64, (2, 17))
    torch.testing.assert_close(model.loss(x[:, :-1], x[:, 1:], chunk_size=5), model.loss(x[:, :-1], x[:, 1:]))


def test_tied_embedding_adds_its_gradient_into_the_heads(monkeypatch):
    """With a chunked loss the tied embedding's backward adds its rows into the LM head's
    gradient instead of making a second dense one: every parameter's gradient as with
    the plain lookup, over two accumulated micro-batches and through autograd.grad."""
    from mhar.model import loss as L
    torch.manual_seed(4)
    model = Decoder(tiny(METHODS["mhar"]))
    x = torch.randint(0, 64, (2, 17))
    taken = []
    take = L.TiedHeadGradient.take
    monkeypatch.setattr(L.TiedHeadGradient, "take", lambda self: taken.append(take(self)) or taken[-1])

    def grads(tied: bool):
        monkeypatch.setattr(Decoder, "_plain_tied_embedding", lambda self: tied)
        model.zero_grad(set_to_none=True)
        for _ in range(2):
            (model.loss(x[:, :-1], x[:, 1:], chunk_size=5, z_loss=1e-3) * 0.5).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    got, want = grads(True), grads(False)
    assert len(taken) == 2 and all(t is not None for t in taken)  # the tied path ran, twice
    assert got.keys() == want.keys()
    for name in got:
        torch.testing.assert_close(got[name], want[name], msg=name)
    monkeypatch.setattr(Decoder, "_plain_tied_embedding", lambda self: True)
    (g,) = torch.autograd.grad(model.loss(x[:, :-1], x[:, 1:], chunk_size=5, z_loss=1e-3) * 0.5,
                               [model.embed.weight])
    torch.testing.assert_close(g * 2, want["embed.weight"])


@pytest.mark.parametrize("bad,match", [
    (dict(stream=StreamConfig(method="routed", heads=5)), "heads=5 must divide d_model=32"),
    (dict(n_kv_heads=3), "n_kv_heads=3 must divide n_heads=4"),
    (dict(stream=StreamConfig(method="routed", block_size=-2)), "block_size=-2"),
    (dict(stream=StreamConfig(method="delta", block_size=0)), "block_size=0"),
    (dict(stream=StreamConfig(method="mixture")), "stream.method='mixture' is not one of standard, routed"),
    (dict(stream=StreamConfig(method="routed", schedule="lazy")), "stream.schedule='lazy'"),
    (dict(attention_kernel="flash"), "attention_kernel='flash' is not one of sdpa, fa4"),
])
def test_invalid_configurations_name_the_field(bad, match):
    kw = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    kw.update(bad)
    with pytest.raises(ValueError, match=match.replace("(", r"\(")):
        ModelConfig(**kw)


def test_overrides():
    cfg = apply_overrides(get_preset("tiny", "mhar"), ["stream.heads=4", "d_model=256"])
    assert cfg.stream.heads == 4 and cfg.d_model == 256
    with pytest.raises(ValueError, match="did you mean stream.heads"):
        apply_overrides(cfg, ["stream.head=2"])
    with pytest.raises(ValueError, match="heads=3 must divide"):
        apply_overrides(cfg, {"stream.heads": 3})


@pytest.mark.parametrize("preset", list(PRESETS))
def test_parameter_counts(preset):
    base = count_parameters(get_preset(preset, "baseline"))
    routed = count_parameters(get_preset(preset, "mhar"))
    cfg = get_preset(preset)
    assert base["routing"] == 0
    # 2d per site (query and key-norm weight), 2L + 1 sites; H adds nothing
    assert routed["routing"] == 2 * cfg.d_model * (2 * cfg.n_layers + 1)
    assert routed["total"] - base["total"] == routed["routing"]
    assert count_parameters(get_preset(preset, "attnres"))["total"] == routed["total"]
    if preset.startswith("paper"):
        assert routed["routing_pct"] < 0.03  # SPEC: about +0.02%


def test_params_cli_resolves_the_method_against_the_overridden_shape(capsys):
    """`mhar params --methods mhar-h3 d_model=96`: heads=3 divides the overridden width."""
    from mhar.cli import main

    code = main(["params", "--preset", "tiny", "--methods", "mhar-h3", "d_model=96"])
    out = capsys.readouterr()
    assert code == 0, out.err
    cfg = apply_overrides(get_preset("tiny", "baseline"), ["d_model=96", "stream.method=routed", "stream.heads=3"])
    assert f"{count_parameters(cfg)['routing']:,}" in out.out


def test_paper_shapes():
    c = get_preset("paper-1b")
    assert (c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff, c.vocab_size) == (1280, 36, 16, 8, 5120, 151936)


@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_chunked_linear_cross_entropy_matches_plain(z_loss):
    from mhar.model.loss import linear_cross_entropy
    torch.manual_seed(3)
    h = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 50, (37,))
    t[5] = -100  # ignored
    a = linear_cross_entropy(h, w, t, chunk_size=0, z_loss=z_loss)
    ga = torch.autograd.grad(a * 3, (h, w))
    b = linear_cross_entropy(h, w, t, chunk_size=8, z_loss=z_loss)
    gb = torch.autograd.grad(b * 3, (h, w))
    torch.testing.assert_close(a, b)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y)
    ref = torch.nn.functional.cross_entropy(h @ w.t(), t)
    if z_loss == 0:
        torch.testing.assert_close(a, ref)


@pytest.mark.parametrize("compiled", [False, True])
def test_standard_stream_fuses_its_add_into_the_next_sublayer(compiled):
    """The decoder's standard residual hands each sublayer the previous output to add
    (``residual=``), so the add runs in the sublayer's region: the hidden states and
    every gradient equal the plain read / call / write loop's (bit for bit, eagerly)."""
    torch.manual_seed(5)
    model = Decoder(tiny(METHODS["standard"]))
    if compiled:
        model.compile_regions()
    x = torch.randint(0, 64, (2, 16))
    fused_calls = []
    hooks = [s.register_forward_pre_hook(lambda m, a, kw: fused_calls.append("residual" in kw), with_kwargs=True)
             for s in model.sublayers]
    fused = model.hidden_states(x)
    fused.square().sum().backward()
    fused_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert fused_calls == [False] + [True] * (len(model.sublayers) - 1)
    for h in hooks:
        h.remove()

    model.zero_grad(set_to_none=True)
    cfg = model.config
    emb = model.embed(x)
    cos, sin = rope_cos_sin(torch.arange(16), cfg.attn_head_dim, cfg.rope_theta, emb.dtype)
    state = model.residual.start(emb)
    for i, sublayer in enumerate(model.sublayers):
        state.write(i, sublayer(state.read(i), cos, sin, None))
    plain = model.final_norm(state.final())
    plain.square().sum().backward()
    assert torch.equal(fused, plain)
    for n, p in model.named_parameters():
        if compiled:  # the compiled backward sums the stream's two gradient paths in its own order
            torch.testing.assert_close(fused_grads[n], p.grad, rtol=1e-5, atol=1e-6, msg=n)
        else:
            assert torch.equal(fused_grads[n], p.grad), n


def test_sublayer_kinds_have_their_own_compile_budget(caplog):
    """torch.compile keeps 8 compiled variants per function and runs it uncompiled past
    that. A benchmark process compiles the sublayers several ways (the baseline's fused
    add with and without a residual, routed methods' bf16 inputs, autocast's weight cache
    on for eager steps and off for CUDA-graph capture): with each kind's own ``forward``
    four such configurations stay within budget (one shared ``forward`` did not)."""
    import logging

    from mhar.model.loss import linear_cross_entropy

    torch._dynamo.reset()
    caplog.set_level(logging.WARNING, logger="torch._dynamo")
    for name in ("standard", "mhar-block"):
        for cache in (True, False):
            torch.manual_seed(0)
            model = Decoder(tiny(METHODS[name]))
            model.compile_regions()
            x = torch.randint(0, 64, (2, 17))
            with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache):
                h = model.hidden_states(x[:, :-1]).flatten(0, 1)
                loss = linear_cross_entropy(h, model.output_weight, x[:, 1:].flatten(), 16)
            loss.backward()
    torch._dynamo.reset()
    assert not [r for r in caplog.records if "recompile_limit" in r.getMessage()]
