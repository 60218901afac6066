"""Residual-stream strategies: initial reads, schedules, block bookkeeping, delta identity."""

import pytest
import torch
from torch import nn

from mhar.model import Decoder, ModelConfig, StreamConfig, method_stream
from mhar.streams import DeltaStream, HyperStream, RoutedStream, StandardStream

D, L2 = 16, 6  # width, sublayers


def small_config(stream: StreamConfig, **kw) -> ModelConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=64)
    base.update(kw)
    return ModelConfig(stream=stream, **base)


def randomize_routing(model: Decoder, seed: int = 0) -> None:
    """Non-trivial routing parameters (at init every read is uniform)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.residual.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if "alpha" in name or "beta" in name else 1.0)
                    + (1.0 if "key_norms" in name or "static" in name else 0.0))


def drive(stream, emb, outputs):
    """Run a stream over fixed sublayer outputs; return the reads and the final state."""
    state = stream.start(emb)
    reads = []
    for i, y in enumerate(outputs):
        reads.append(state.read(i))
        state.write(i, y)
    return reads, state.final(), state


@pytest.mark.parametrize("stream", [
    RoutedStream(D, L2, heads=1), RoutedStream(D, L2, heads=4), RoutedStream(D, L2, heads=4, block_size=2),
    RoutedStream(D, L2, heads=2, block_size=4, schedule="two-phase"), RoutedStream(D, L2, 4, schedule="two-phase", chunk=3),
])
def test_routed_reads_start_uniform_and_first_read_is_the_embedding(stream):
    torch.manual_seed(0)
    emb = torch.randn(2, 3, D)
    outputs = [torch.randn(2, 3, D) for _ in range(L2)]
    reads, final, _ = drive(stream, emb, outputs)
    assert torch.equal(reads[0], emb)  # exactly
    S = stream.block_size
    for i in range(1, L2):
        if not S:
            visible = [emb] + outputs[:i]
        else:
            done = i // S
            blocks = [emb] + [sum(outputs[b * S:(b + 1) * S]) for b in range(done)]
            visible = blocks + ([sum(outputs[done * S:i])] if i % S else [])
        torch.testing.assert_close(reads[i], torch.stack(visible).mean(0), rtol=1e-5, atol=1e-6)
    every = [emb] + outputs if not S else [emb] + [sum(outputs[b:b + S]) for b in range(0, L2, S)]
    torch.testing.assert_close(final, torch.stack(every).mean(0), rtol=1e-5, atol=1e-6)


def test_block_summaries_are_sums_of_raw_outputs_and_last_partial_block_counts():
    torch.manual_seed(1)
    emb, outputs = torch.randn(4, D), [torch.randn(4, D) for _ in range(7)]
    _, _, state = drive(RoutedStream(D, 7, heads=2, block_size=3), emb, outputs)
    expected = [emb, sum(outputs[0:3]), sum(outputs[3:6]), outputs[6]]
    assert len(state.sources) == 4
    for got, want in zip(state.sources, expected):
        torch.testing.assert_close(got, want)


def test_standard_and_hyper_at_init_are_the_running_sum():
    torch.manual_seed(2)
    emb, outputs = torch.randn(3, D), [torch.randn(3, D) for _ in range(L2)]
    std_reads, std_final, _ = drive(StandardStream(D, L2), emb, outputs)
    hyp_reads, hyp_final, _ = drive(HyperStream(D, L2, n=4), emb, outputs)
    for a, b in zip(std_reads, hyp_reads):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(std_final, emb + sum(outputs))
    torch.testing.assert_close(hyp_final, std_final)


def test_hyper_matches_the_hyper_connections_package():
    hc = pytest.importorskip("hyper_connections")
    torch.manual_seed(3)
    n, B, T = 4, 2, 3
    ours = HyperStream(D, L2, n=n)
    with torch.no_grad():
        ours.static_alpha.add_(0.3 * torch.randn(ours.static_alpha.shape))
        ours.static_beta.add_(0.3 * torch.randn(ours.static_beta.shape))
    emb, outputs = torch.randn(B, T, D), [torch.randn(B, T, D) for _ in range(L2)]
    reads, final, _ = drive(ours, emb, outputs)
    # The package keeps the n streams folded into the batch dimension.
    X = torch.stack([emb] * n, 1).flatten(0, 1)  # '(b s) t d'
    for i in range(L2):
        layer = hc.HyperConnections(n, dim=D, layer_index=i)
        with torch.no_grad():
            layer.static_alpha.copy_(ours.static_alpha[i])
            layer.static_beta.copy_(ours.static_beta[i])
        branch_input, add_residual = layer(X)
        torch.testing.assert_close(branch_input, reads[i], rtol=1e-5, atol=1e-5)
        X = add_residual(outputs[i])
    torch.testing.assert_close(X.view(B, n, T, D).mean(1), final, rtol=1e-5, atol=1e-5)


def test_hyper_branch_input_owns_its_storage():
    """The sublayer saves its input for backward: a view of the (1 + n)-row mix would keep
    every row alive, n stream copies per sublayer."""
    state = HyperStream(D, L2, n=4).start(torch.randn(3, D))
    x = state.read(0)
    assert x.untyped_storage().nbytes() == x.numel() * x.element_size()
    assert x.untyped_storage().data_ptr() != state.mixed.untyped_storage().data_ptr()


def test_delta_block_delta_is_end_minus_start_of_that_block():
    """Would fail for 'subtract the previous delta' from the second block on."""
    torch.manual_seed(4)
    emb = torch.randn(2, D)
    outputs = [torch.randn(2, D) for _ in range(8)]
    _, _, state = drive(DeltaStream(D, 8, heads=2, block_size=2), emb, outputs)
    h = [emb]
    for y in outputs:
        h.append(h[-1] + y)
    deltas = state.sources[1:]
    assert len(deltas) == 4
    for b, delta in enumerate(deltas):
        torch.testing.assert_close(delta, h[2 * b + 2] - h[2 * b])
    wrong = h[4] - (h[2] - h[0])  # the public implementation's mistake, for block 2
    assert not torch.allclose(deltas[1], wrong)


@pytest.mark.parametrize("block_size", [1, 2, 4])
@pytest.mark.parametrize("schedule", ["one-pass", "two-phase"])
def test_delta_with_zero_gates_is_bit_identical_to_standard(block_size, schedule):
    torch.manual_seed(5)
    std = Decoder(small_config(StreamConfig(method="standard")))
    delta = Decoder(small_config(StreamConfig(method="delta", heads=4, block_size=block_size, schedule=schedule)))
    missing, unexpected = delta.load_state_dict(std.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("residual.") for k in missing)
    with torch.no_grad():  # routing parameters anything but the gates
        delta.residual.queries.normal_()
        delta.residual.null_source.normal_()
    x = torch.randint(0, 97, (2, 20))
    assert torch.equal(std(x), delta(x))


ROUTED_VARIANTS = [
    ("full/chunk", dict(method="routed", heads=4, schedule="two-phase", chunk=c)) for c in (1, 2, 3, 5, 8)
] + [
    ("block", dict(method="routed", heads=2, block_size=S, schedule="two-phase")) for S in (1, 2, 3, 4)
] + [  # the first chunks (blocks) one-pass, the later ones two-phase
    ("full/mixed", dict(method="routed", heads=4, schedule="two-phase", chunk=3, phase1_min_sources=4)),
    ("block/mixed", dict(method="routed", heads=2, block_size=2, schedule="two-phase", phase1_min_sources=3)),
]


@pytest.mark.parametrize("name,kw", ROUTED_VARIANTS)
def test_two_phase_equals_one_pass(name, kw):
    torch.manual_seed(6)
    two = Decoder(small_config(StreamConfig(**kw)))
    randomize_routing(two)
    one = Decoder(small_config(StreamConfig(**{**kw, "schedule": "one-pass"})))
    one.load_state_dict(two.state_dict())
    x = torch.randint(0, 97, (2, 12))
    a, b = one(x), two(x)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    a.square().mean().backward()
    b.square().mean().backward()
    for (n, p1), (_, p2) in zip(one.named_parameters(), two.named_parameters()):
        torch.testing.assert_close(p1.grad, p2.grad, rtol=1e-4, atol=1e-6, msg=n)


@pytest.mark.parametrize("block_size,min_sources,phase1_sources", [(0, 0, [1, 4, 7, 7]), (0, 4, [4, 7, 7]),
                                                                    (0, 8, []), (2, 3, [3, 4]), (2, 0, [1, 2, 3, 4]),
                                                                    (2, None, [1, 2, 3, 4])])
def test_phase1_min_sources(block_size, min_sources, phase1_sources, monkeypatch):
    # with the two-phase schedule, a chunk (block) whose phase 1 would read fewer than
    # phase1_min_sources sources reads one-pass: phase 1 runs only for the later chunks (full
    # routing's last chunk with the final read's own phase 1 beside it)
    from mhar import routing

    seen = []
    real = routing.route_partial_rows
    monkeypatch.setattr(routing, "route_partial_rows",
                        lambda srcs, *a, **k: seen.append(len(srcs)) or real(srcs, *a, **k))
    cfg = small_config(StreamConfig(method="routed", heads=2, block_size=block_size, schedule="two-phase", chunk=3,
                                    phase1_min_sources=min_sources), n_layers=4)
    Decoder(cfg)(torch.randint(0, 97, (2, 12)))
    assert cfg.n_layers * 2 == 8 and seen == phase1_sources, seen


def test_phase1_min_sources_setting():
    from mhar.model.config import apply_overrides
    from mhar.streams.base import AUTO_BLOCK_PHASE1_MIN_SOURCES, phase1_min_sources

    # unset: 'auto' block routing's first blocks one-pass; every other two-phase chunk two-phase
    assert phase1_min_sources(None, "auto", block=True) == AUTO_BLOCK_PHASE1_MIN_SOURCES == 4
    assert phase1_min_sources(None, "auto", block=False) == phase1_min_sources(None, "two-phase", block=True) == 0
    assert phase1_min_sources(2, "two-phase", block=False) == 2
    cfg = apply_overrides(small_config(StreamConfig(method="routed")), ["stream.phase1_min_sources=3"])
    assert cfg.stream.phase1_min_sources == 3
    for bad in (-1, "4", True):
        with pytest.raises(ValueError, match="phase1_min_sources"):
            StreamConfig(method="routed", phase1_min_sources=bad).validate(64, 8)
    with pytest.raises(ValueError, match="sum_in_product"):
        StreamConfig(method="routed", sum_in_product="no").validate(64, 8)


@pytest.mark.parametrize("schedule", ["one-pass", "two-phase"])
@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_block_running_sums_through_the_sink_equal_autograd_sums(schedule, block_size, monkeypatch):
    # block routing's running sums read through the summary's sink entry (their reads'
    # gradients summed into one tensor) give autograd's gradients; with 6 sublayers a block
    # of 4 leaves a partial last block
    from mhar import routing
    from mhar.streams import base

    torch.manual_seed(8)
    model = Decoder(small_config(StreamConfig(method="routed", heads=2, block_size=block_size, schedule=schedule)))
    randomize_routing(model)
    x = torch.randint(0, 97, (2, 12))

    def grads():
        model.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    sinks, Sink = [], routing.GradientSink
    monkeypatch.setattr(base.routing, "GradientSink", lambda: sinks.append(Sink()) or sinks[-1])
    with_sink = grads()
    (sink,) = sinks
    assert sink.buffers and all(b is None for b in sink.buffers)  # every sum handed over
    monkeypatch.setattr(base.routing, "GradientSink", lambda: None)  # no sink: autograd sums every gradient
    without = grads()
    for name, g in without.items():
        torch.testing.assert_close(with_sink[name], g, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("schedule", ["one-pass", "two-phase"])
def test_block_sum_in_product_equals_the_separate_add(schedule, compiled, device):
    # a block's later sublayers add their output into its running sum in their output
    # projection (addmm's C operand; compiled, inside the sublayer's region, whose backward
    # hands the sink entry's sum on to the previous sum): the same values and gradients as
    # the separate add, blocks of 4 over 6 sublayers leaving a partial last block (fp32:
    # on CUDA through the Triton routing kernels, the products in cuBLAS)
    torch.manual_seed(11)
    models = {}
    for fused in (True, False):
        cfg = StreamConfig(method="routed", heads=2, block_size=4, schedule=schedule, sum_in_product=fused)
        models[fused] = Decoder(small_config(cfg)).to(device)
    randomize_routing(models[True])
    models[False].load_state_dict(models[True].state_dict())
    added = []
    for s in models[True].sublayers:
        s.register_forward_pre_hook(lambda m, a, kw: added.append(kw.get("add_to") is not None), with_kwargs=True)
    x = torch.randint(0, 97, (2, 12), device=device)
    out, grads = {}, {}
    for fused, model in models.items():
        if compiled:
            model.compile_regions()
        out[fused] = model(x)
        out[fused].square().mean().backward()
        grads[fused] = {n: p.grad for n, p in model.named_parameters()}
    assert added == [False, True, True, True, False, True]
    torch.testing.assert_close(out[True], out[False], rtol=1e-5, atol=1e-6)
    for name, g in grads[False].items():
        torch.testing.assert_close(grads[True][name], g, rtol=1e-5, atol=1e-6, msg=name)


class _LoraLike(nn.Module):
    # a wrapper of a projection as LoRA libraries make one: ``weight`` is the base layer's,
    # the call adds a low-rank term that ``weight`` does not show
    def __init__(self, base: nn.Linear):
        super().__init__()
        self.base = base
        self.down = nn.Linear(base.in_features, 2, bias=False)
        self.up = nn.Linear(2, base.out_features, bias=False)

    @property
    def weight(self):
        return self.base.weight

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))


@pytest.mark.parametrize("compiled", [False, True])
def test_block_sum_in_product_calls_wrapped_and_hooked_projections(compiled):
    # a projection that is not a plain hook-free Linear (a LoRA-style wrapper, a forward
    # hook, a bias) is called and added to: its extra terms and hooks are not skipped.
    # Compiled, the hook is not checked: dynamo does not guard on hooks added after a
    # region's code was first compiled (skip_nnmodule_hook_guards), in either form
    torch.manual_seed(12)
    models, seen = {}, {True: [], False: []}
    for fused in (True, False):
        cfg = StreamConfig(method="routed", heads=2, block_size=4, sum_in_product=fused)
        models[fused] = Decoder(small_config(cfg))
    randomize_routing(models[True])
    models[False].load_state_dict(models[True].state_dict())
    for fused, model in models.items():
        torch.manual_seed(13)
        attn = next(s for s in model.sublayers[1:4] if hasattr(s, "attn")).attn
        mlp = next(s for s in model.sublayers[1:4] if hasattr(s, "mlp")).mlp
        attn.o_proj = _LoraLike(attn.o_proj)
        nn.init.normal_(attn.o_proj.up.weight)
        mlp.down_proj.register_forward_hook(lambda m, a, out, fused=fused: seen[fused].append(out.shape))
        if compiled:
            model.compile_regions()
    x = torch.randint(0, 97, (2, 12))
    torch.testing.assert_close(models[True](x), models[False](x), rtol=1e-5, atol=1e-6)
    if not compiled:
        assert seen[True] and seen[True] == seen[False]


def test_block_running_sums_survive_a_second_backward():
    # retain_graph: the sink's entries start over, so a second backward adds the same gradients
    torch.manual_seed(9)
    model = Decoder(small_config(StreamConfig(method="routed", heads=2, block_size=2)))
    randomize_routing(model)
    loss = model(torch.randint(0, 97, (2, 12))).square().mean()
    loss.backward(retain_graph=True)
    once = {n: p.grad.clone() for n, p in model.named_parameters()}
    loss.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, 2 * once[n], rtol=1e-5, atol=1e-7, msg=n)


def test_running_sum_read_elsewhere_is_an_error():
    from mhar import routing

    sink = routing.GradientSink()
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    index = sink.reserve()
    total = sink.running_sum(sink.running_sum(None, a, index), b, index)
    summary = sink.register(total, index)
    with pytest.raises(RuntimeError, match="running sum"):
        (summary.sum() + total.sum()).backward()  # the sum also used outside its entry
    with pytest.raises(ValueError, match="not reserved"):
        sink.register(torch.randn(3, 4), 7)


@pytest.mark.parametrize("heads", [1, 4])
def test_block_size_one_equals_full_routing(heads):
    torch.manual_seed(7)
    full = Decoder(small_config(StreamConfig(method="routed", heads=heads)))
    randomize_routing(full)
    block = Decoder(small_config(StreamConfig(method="routed", heads=heads, block_size=1)))
    block.load_state_dict(full.state_dict())
    x = torch.randint(0, 97, (2, 10))
    torch.testing.assert_close(full(x), block(x), rtol=0, atol=0)


def test_initial_parameters():
    s = RoutedStream(D, L2, heads=4)
    assert torch.count_nonzero(s.queries) == 0 and torch.all(s.key_norms == 1)
    d = DeltaStream(D, L2, heads=4, block_size=2)
    assert torch.count_nonzero(d.gates) == 0 and torch.count_nonzero(d.null_source) == 0
    assert torch.count_nonzero(d.queries) == 0 and torch.all(d.key_norms == 1)
    assert s.queries.shape == (L2 + 1, D)  # one site per sublayer plus the final read


def test_method_names():
    assert method_stream("mhar", 24).heads == 8
    assert method_stream("mhar-h4", 24).heads == 4
    assert method_stream("mhar-block", 24).block_size == 3  # about 8 blocks
    with pytest.raises(ValueError, match="did you mean"):
        method_stream("mhr", 24)
    # a heads override is checked against d_model, not the method's default it replaces
    assert method_stream("mhar", 24, 36, heads=1).heads == 1
    assert method_stream("mhar", 24, 36, heads=6).heads == 6
    with pytest.raises(ValueError, match="divide d_model"):
        method_stream("mhar", 24, 36, heads=5)


def test_auto_schedule():
    from types import SimpleNamespace

    from mhar.streams.base import uses_two_phase
    cuda = SimpleNamespace(is_cuda=True, shape=(2, 1024))  # only .is_cuda and .shape are read
    assert uses_two_phase("auto", cuda, 1) and uses_two_phase("auto", cuda, 8)
    assert uses_two_phase("auto", cuda, 1, "block") and uses_two_phase("auto", cuda, 8, "block")
    assert uses_two_phase("auto", cuda, 1, "delta") and not uses_two_phase("auto", cuda, 8, "delta")
    with pytest.raises(ValueError, match="kind"):
        uses_two_phase("auto", cuda, 8, "blocks")
    cuda_512 = SimpleNamespace(is_cuda=True, shape=(2, 512))
    assert uses_two_phase("auto", cuda_512, 1) and uses_two_phase("auto", cuda_512, 8)  # full routing from 512
    assert not uses_two_phase("auto", cuda_512, 8, "block") and not uses_two_phase("auto", cuda_512, 1, "delta")
    assert not uses_two_phase("auto", SimpleNamespace(is_cuda=True, shape=(2, 256)), 8)
    assert not uses_two_phase("auto", torch.zeros(2, 1024), 1)
    assert uses_two_phase("two-phase", torch.zeros(2, 8), 8) and not uses_two_phase("one-pass", cuda, 1)
    assert RoutedStream(D, L2).schedule == "auto" and DeltaStream(D, L2).schedule == "auto"
