"""A residual stream is a strategy. The decoder is written once::

    state = stream.start(embedding)
    for i, sublayer in enumerate(sublayers):   # attn, mlp, attn, mlp, ...
        x = state.read(i)                      # what sublayer i sees
        state.write(i, sublayer(x))            # its raw output
    hidden = state.final()                     # into the final RMSNorm and LM head

A :class:`ResidualStream` is an ``nn.Module`` that owns the method's parameters
(routing queries, key norms, gates, mixing scalars); ``start`` returns a fresh
per-forward :class:`StreamState` holding the activations.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class StreamState:
    def read(self, i: int) -> Tensor:
        raise NotImplementedError

    def write(self, i: int, output: Tensor) -> None:
        raise NotImplementedError

    def final(self) -> Tensor:
        raise NotImplementedError


class ResidualStream(nn.Module):
    #: parameters that exist only because of the routing method (counted as overhead)
    method: str = "?"

    def __init__(self, d_model: int, num_sublayers: int):
        super().__init__()
        self.d_model = d_model
        self.num_sublayers = num_sublayers

    def start(self, embedding: Tensor) -> StreamState:
        raise NotImplementedError

    def compile_regions(self, **compile_kwargs) -> None:
        """Compile the stream's elementwise glue (see Decoder.compile_regions); default: nothing."""

    def overhead_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def uses_two_phase(schedule: str) -> bool:
    """Resolve a schedule: 'auto' is one-pass. Two-phase reads each old source once
    per chunk, but it writes fp32 partials (S x M x d x 4 bytes per chunk) and makes more
    calls; on an H200 the whole routed step measured 1.5-1.8x slower than one-pass
    (bench/results/routing_h200.md, before phase 2 was fused into one kernel). It stays
    opt-in until the fused version is measured faster."""
    return schedule == "two-phase"


def autocast_dtype(t: Tensor) -> torch.dtype:
    """The dtype sublayer outputs will have: the autocast dtype when autocast is on."""
    kind = t.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return t.dtype
