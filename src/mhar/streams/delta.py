"""Delta attention residuals: a gated routed term added to the standard stream,
for grafting depth routing onto pretrained models (SPEC.md section 3).

    x_i = h_i + gate_i * route_i(sources)      # what sublayer i sees
    h_{i+1} = h_i + f_i(RMSNorm(x_i))          # the standard residual, unchanged

Sources: a learnable null source (zero-initialised) and one delta per completed block
of ``block_size`` consecutive sublayers, where a block's delta is the stream at the
end of the block minus the stream at the *start of that block* (not minus the
previous delta). The final hidden state gets the same gated read over all deltas.
Gates start at zero, so at step 0 the model is bit-identical to the standard one.
Every sublayer of a block reads the same sources, so with the two-phase schedule a
block's reads are one batched partial read.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mhar import routing
from mhar.streams.base import (ResidualStream, SourceList, StreamState, check_index, check_schedule, check_written,
                               uses_two_phase)


class _DeltaState(StreamState):
    def __init__(self, stream: "DeltaStream", embedding: Tensor):
        self.s = stream
        self.h = embedding
        self.block_start = embedding
        self.sources = SourceList()
        self.sources.add(stream.null_source.to(embedding.dtype).expand_as(embedding))
        self.block_reads: Tensor | None = None  # two-phase: the whole block's reads
        self.two_phase = uses_two_phase(stream.schedule, embedding, stream.heads, kind="delta")

    def _read(self, i: int) -> Tensor:
        s = self.s
        if not self.two_phase:
            return routing.route(self.sources, s.queries[i], s.key_norms[i], s.heads, sink=self.sources.span())
        S = s.block_size
        j = i % S
        if j == 0:
            end = min(i + S, s.num_sublayers)
            p = routing.route_partial(self.sources, s.queries[i:end], s.key_norms[i:end], s.heads,
                                      sink=self.sources.span())
            self.block_reads = routing.finalize(p, self.h.shape, self.sources[0].dtype)
        return self.block_reads[j]

    def read(self, i: int) -> Tensor:
        check_index(i, self.s.num_sublayers)
        routed = self._read(i)
        return self.h + self.s.gates[i].to(self.h.dtype) * routed.to(self.h.dtype)

    def write(self, i: int, output: Tensor) -> None:
        check_written(self, i)
        self.h = self.h + output
        S = self.s.block_size
        if i % S == S - 1 or i == self.s.num_sublayers - 1:
            self.sources.add(self.h - self.block_start)
            self.block_start = self.h

    def final(self) -> Tensor:
        s, n = self.s, self.s.num_sublayers
        routed = routing.route(self.sources, s.queries[n], s.key_norms[n], s.heads, sink=self.sources.span())
        return self.h + s.gates[n].to(self.h.dtype) * routed.to(self.h.dtype)


class DeltaStream(ResidualStream):
    method = "delta"

    def __init__(self, d_model: int, num_sublayers: int, heads: int = 8, block_size: int = 8,
                 schedule: str = "auto"):
        super().__init__(d_model, num_sublayers)
        routing.reference.check_heads(d_model, heads)
        if block_size < 1:
            raise ValueError(f"DeltaStream: block_size={block_size} must be >= 1")
        check_schedule("DeltaStream", schedule)
        self.heads, self.block_size, self.schedule = heads, block_size, schedule
        sites = num_sublayers + 1
        self.queries = nn.Parameter(torch.zeros(sites, d_model))
        self.key_norms = nn.Parameter(torch.ones(sites, d_model))
        self.gates = nn.Parameter(torch.zeros(sites))
        self.null_source = nn.Parameter(torch.zeros(d_model))

    def start(self, embedding: Tensor) -> StreamState:
        return _DeltaState(self, embedding)
