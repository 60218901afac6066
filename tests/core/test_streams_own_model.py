"""The streams driven by a user's own model: plain sublayers, own loops, autocast."""

import pytest
import torch
from torch import nn

from mhar.streams import DeltaStream, HyperStream, RoutedStream, StandardStream

D, L2 = 16, 6  # width, sublayers

STREAMS = {
    "standard": lambda: StandardStream(D, L2),
    "hyper": lambda: HyperStream(D, L2, 4),
    "attnres": lambda: RoutedStream(D, L2, heads=1),
    "mhar": lambda: RoutedStream(D, L2, heads=4),
    "mhar-block": lambda: RoutedStream(D, L2, heads=4, block_size=2),
    "mhar-block-two-phase": lambda: RoutedStream(D, L2, heads=4, block_size=4, schedule="two-phase"),
    "delta": lambda: DeltaStream(D, L2, heads=4, block_size=2),
}


class PlainSublayer(nn.Module):
    """A user's pre-norm sublayer: f(x) = W LayerNorm(x), no keywords of mhar's own."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        return self.proj(self.norm(x))


def randomized(stream):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in stream.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    return stream


@pytest.mark.parametrize("name", list(STREAMS))
def test_step_takes_any_sublayer_and_equals_read_write(name):
    # step() without fused=True calls the sublayer with the read alone: a user's module
    # without mhar's residual= / add_to= keywords (the standard and block-routed streams
    # passed them unasked, a TypeError)
    torch.manual_seed(0)
    stream = randomized(STREAMS[name]())
    sublayers = [PlainSublayer() for _ in range(L2)]
    emb = torch.randn(2, 5, D)
    out = {}
    for use_step in (True, False):
        state = stream.start(emb)
        for i, f in enumerate(sublayers):
            if use_step:
                state.step(i, f)
            else:
                state.write(i, f(state.read(i)))
        out[use_step] = state.final()
    torch.testing.assert_close(out[True], out[False], rtol=0, atol=0)


class ScaledSublayer(PlainSublayer):
    """LayerScale: an fp32 per-channel scale on the output, which bf16 autocast promotes to fp32."""

    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((D,), 0.5))

    def forward(self, x):
        return super().forward(x) * self.gamma


@pytest.mark.parametrize("name", list(STREAMS))
def test_sublayer_outputs_of_another_dtype_under_autocast(name):
    # a routed stream's sources take the embedding's autocast dtype; an output promoted to
    # fp32 is cast to it (it made route() refuse mixed dtypes): the result equals the
    # stream over the outputs cast by hand. Every stream runs, gradients reach every parameter.
    torch.manual_seed(1)
    stream = randomized(STREAMS[name]())
    sublayers = [ScaledSublayer() for _ in range(L2)]
    emb = torch.randn(2, 5, D, requires_grad=True)
    out = {}
    for cast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            state = stream.start(emb)
            for i, f in enumerate(sublayers):
                y = f(state.read(i))
                assert y.dtype == torch.float32
                state.write(i, y.bfloat16() if cast else y)
            out[cast] = state.final()
    if isinstance(stream, RoutedStream):  # the others add in the promoted dtype
        torch.testing.assert_close(out[False], out[True], rtol=0, atol=0)
    out[False].float().square().mean().backward()
    assert all(p.grad is not None for p in stream.parameters())
    assert all(f.gamma.grad is not None for f in sublayers)


@pytest.mark.parametrize("build, match", [
    (lambda: RoutedStream(D, L2, 2, schedule="two_phase"), "schedule='two_phase'"),
    (lambda: RoutedStream(D, L2, 2, block_size=-1), "block_size=-1"),
    (lambda: RoutedStream(D, L2, 2, schedule="two-phase", chunk=0), "chunk=0"),
    (lambda: RoutedStream(D, L2, 2, phase1_min_sources=-1), "phase1_min_sources=-1"),
    (lambda: DeltaStream(D, L2, 2, 2, schedule="twophase"), "schedule='twophase'"),
    (lambda: DeltaStream(D, L2, 2, 0), "DeltaStream: block_size=0"),  # its own name, not the config's key
    (lambda: HyperStream(D, L2, 0), "n=0"),
    (lambda: HyperStream(D, L2, 4, recompute=-1), "recompute=-1"),
])
def test_streams_built_directly_check_their_arguments(build, match):
    # built without a StreamConfig: a schedule typo ran one-pass silently; the others
    # failed later (an assertion, a division by zero) or not at all
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_read_past_the_declared_sublayers_is_an_error(name):
    # sublayer num_sublayers would read with the final read's query (routed, delta)
    stream = STREAMS[name]()
    state = stream.start(torch.randn(2, D))
    for i in range(L2):
        state.write(i, state.read(i) * 0.5)
    if name == "standard":  # no per-sublayer parameters: any count works
        state.read(L2)
        return
    with pytest.raises(IndexError, match=f"sublayer {L2} is out of range.*num_sublayers={L2}"):
        state.read(L2)


@pytest.mark.parametrize("name", list(STREAMS))
def test_checkpointing_the_sublayer_call_matches_and_the_stream_loop_is_refused(name):
    # checkpoint(f, state.read(i)) gives the plain gradients. A block (two sublayers' reads
    # and writes) inside the checkpoint is recomputed in backward on a state that has moved
    # on: the standard and hyper streams' gradients came out wrong silently, the routed
    # ones failed with checkpoint's metadata mismatch; a second write of a sublayer is
    # now an error that says what to checkpoint
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(2)
    stream = randomized(STREAMS[name]())
    sublayers = nn.ModuleList(PlainSublayer() for _ in range(L2))
    emb = torch.randn(2, 5, D)

    def run(mode):
        sublayers.zero_grad()
        state = stream.start(emb)

        def block(j):
            for i in (2 * j, 2 * j + 1):
                x = state.read(i)
                f = sublayers[i]
                state.write(i, checkpoint(f, x, use_reentrant=False) if mode == "sublayer" else f(x))
        for j in range(L2 // 2):
            if mode == "block":
                checkpoint(block, j, use_reentrant=False)
            else:
                block(j)
        state.final().square().mean().backward()
        return [p.grad.clone() for p in sublayers.parameters()]

    plain = run("plain")
    for a, b in zip(run("sublayer"), plain):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match=r"sublayer \d written after sublayer \d.*checkpoint the sublayer's call"):
        run("block")


def test_readme_own_model_example_runs():
    # README's "Use it in your own model": its model, with the sublayers filled in, trains
    # a step with each stream it names
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = readme.split("## Use it in your own model", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    code = code.replace("nn.ModuleList(...)", "nn.ModuleList(PlainSublayer(d) for _ in range(2 * n_layers))")

    class PlainSublayer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm, self.proj = nn.LayerNorm(d), nn.Linear(d, d)

        def forward(self, x):
            return self.proj(self.norm(x))

    ns = {"PlainSublayer": PlainSublayer}
    exec(code, ns)
    others = next(line for line in code.splitlines() if line.strip().startswith("# StandardStream("))
    streams = [ns["GPT"](50).stream, *eval(others.strip()[1:], ns, {"d": 64, "n": 6})]  # the commented ones
    assert [type(s).__name__ for s in streams] == ["RoutedStream", "StandardStream", "HyperStream", "DeltaStream"]
    for stream in streams:
        model = ns["GPT"](50)
        model.stream = stream
        model(torch.randint(0, 50, (2, 7))).logsumexp(-1).mean().backward()
        assert all(p.grad is not None for p in stream.parameters())
