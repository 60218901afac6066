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
