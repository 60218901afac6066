"""Attention residuals (H = 1) and multi-head attention residuals (H > 1).

Replacement routing: sublayer i reads a softmax mixture of the sources that exist
before it and its raw output becomes a new source; nothing is added back.

* full routing (``block_size=0``): sources are the embedding and every raw sublayer
  output; 2L + 1 in all.
* block routing (``block_size=S``): sources are block summaries: the embedding and
  the sum of the raw outputs of each completed block of S sublayers; sublayers after
  the first of a block also read the running partial sum of their block. S = 1 is
  full routing. With ``sum_in_product`` (off by default) those later sublayers add
  their output into the sum in their last product (see ``step``).

Every site (each sublayer, plus a final one before the output norm) owns a query
(zero-initialised: every read starts as the uniform mean) and a key-norm weight
(ones). With the two-phase schedule (``schedule='two-phase'``; for 'auto' see ``base.uses_two_phase``) the
reads of a chunk of sublayers (a block, or ``chunk`` sublayers of full routing) over
the sources that exist when the chunk starts are done in one batched partial read;
each sublayer then merges, exactly, the sources created inside the chunk. The final read
of full routing is two-phase too, its phase 1 made when the last chunk begins (see
``_RoutedState.final``). Results equal the one-pass read.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mhar import routing
from mhar.streams.base import (ResidualStream, SourceList, StreamState, autocast_dtype, check_index, check_schedule,
                               check_written, phase1_min_sources, uses_two_phase)


def _finalize_row(p: routing.Partial, shape, dtype) -> Tensor:
    """The read of a chunk's first sublayer: its phase-1 row, normalised."""
    return routing.finalize(p, shape, dtype)[0]


class _RoutedState(StreamState):
    def __init__(self, stream: "RoutedStream", embedding: Tensor):
        self.s = stream
        self.shape, self.dtype = embedding.shape, autocast_dtype(embedding)
        self.two_phase = uses_two_phase(stream.schedule, embedding, stream.heads,
                                        kind="block" if stream.block_size else "full")
        self.chunk_two_phase = self.two_phase  # the current chunk's schedule (see phase1_min_sources)
        self.min_sources = phase1_min_sources(stream.phase1_min_sources, stream.schedule, stream.block_size > 0)
        # Full routing: every source. Block routing: completed block summaries.
        self.sources = SourceList()
        self.sources.add(embedding.to(self.dtype))
        self.partial_sum: Tensor | None = None  # block routing: running sum of the current block
        self.phase1_rows: routing.PhaseOneRows | None = None
        self.final_row: routing.PhaseOneRow | None = None  # full routing, two-phase: see ``final``
        self.key_scales = routing.KeyScales()  # each source's key-norm scales, once per forward
        self.chunk_start = 0  # sublayer index where the current chunk began
        self.sources_at_chunk_start = 1
        # one-pass reads take their site's row from one unbind (one autograd node for all
        # sites) instead of a slice per site (two nodes and two zero-filled grads per site)
        self.query_rows = stream.queries.unbind(0)
        self.norm_rows = stream.key_norms.unbind(0)

    # -- helpers -------------------------------------------------------------
    def _site(self, i: int, j: int | None = None) -> tuple[Tensor, Tensor]:
        j = i + 1 if j is None else j
        return self.s.queries[i:j], self.s.key_norms[i:j]

    # -- the interface -------------------------------------------------------
    def read(self, i: int) -> Tensor:
        s, H = self.s, self.s.heads
        check_index(i, s.num_sublayers)
        in_block = s.block_size and i % s.block_size  # a later sublayer of a block
        # (a block's running sum is read through the sink entry of the summary it becomes)
        n_src = len(self.sources)
        size = s.block_size or s.chunk  # a block is its own scheduling chunk
        if self.two_phase and i % size == 0:
            # a chunk whose phase 1 would read few sources reads one-pass: phase 1's kernels
            # cost much the same for 1 to 8 sources
            self.chunk_two_phase = n_src >= self.min_sources
            self.phase1_rows = None
        if not self.chunk_two_phase:
            srcs = self.sources + ([self.partial_sum] if in_block else [])
            return routing.route(srcs, self.query_rows[i], self.norm_rows[i], H,
                                 sink=self.sources.span(0, n_src + (1 if in_block else 0)))
        if i % size == 0:  # phase 1: every source that exists now, for the whole chunk at once
            end = min(i + size, s.num_sublayers)
            q, g = self._site(i, end)
            self.phase1_rows = routing.route_partial_rows(self.sources, q, g, H, sink=self.sources.span(),
                                                          scales=self.key_scales)
            self.chunk_start, self.sources_at_chunk_start = i, len(self.sources)
            if not s.block_size and end == s.num_sublayers:  # the last chunk: the final read's phase 1 too
                q, g = self._site(end)
                self.final_row = routing.route_partial_rows(self.sources, q, g, H, sink=self.sources.span(),
                                                            scales=self.key_scales)[0]
        first_new = self.sources_at_chunk_start
        new = [self.partial_sum] if in_block else self.sources[first_new:]
        rows, k = self.phase1_rows, i - self.chunk_start
        if new:  # phase 2: the sources created inside the chunk, merged exactly and normalised
            sink = self.sources.span(n_src, 1) if in_block else self.sources.span(first_new)
            # (full routing: its newest source's key-norm scales, computed here, can go to the
            # next chunk's phase 1; a block's running sum is not a source)
            scales = None if in_block else self.key_scales
            return routing.route_merge(rows[k], new, self.query_rows[i], self.norm_rows[i], H, sink=sink,
                                       scales=scales)
        if rows.direct:  # its gradient goes into the rows' buffer (eager: not a compiled region)
            return routing.finalize(rows[k], self.shape, self.dtype)[0]
        return s.finalize_row(rows.view(k), self.shape, self.dtype)

    def step(self, i: int, sublayer, *args, fused: bool = False) -> None:
        x = self.read(i)
        S = self.s.block_size
        if fused and S and i % S and self.s.sum_in_product:  # a block's later sublayer: its product adds into the sum
            self.write(i, sublayer(x, *args, add_to=self.partial_sum), added=True)
        else:
            self.write(i, sublayer(x, *args))

    def write(self, i: int, output: Tensor, added: bool = False) -> None:
        """Sublayer i's raw output, or (``added``, block routing) its block's running sum
        with the output added already."""
        check_written(self, i)
        S = self.s.block_size
        if not added and output.dtype != self.dtype:
            # the sources share the embedding's (autocast) dtype: a sublayer whose output is
            # promoted (bf16 autocast times an fp32 LayerScale) would leave them mixed
            output = output.to(self.dtype)
        if not S:
            self.sources.add(output)
            return
        self.partial_sum = self.sources.running_sum(self.partial_sum if i % S else None, output, added)
        if i % S == S - 1 or i == self.s.num_sublayers - 1:  # block complete (or the last, partial one)
            self.sources.add(self.partial_sum)
            self.partial_sum = None

    def final(self) -> Tensor:
        i = self.s.num_sublayers
        if self.final_row is not None:
            # Full routing, two-phase: the final read is two-phase too, its phase 1 read when
            # the last chunk began. Read one-pass, its backward would come first and start the
            # gradient sums of every source at once, with every activation still held (1B at
            # 32 x 1024: 6.1 GB at the step's peak, session 45); this way the older sources'
            # sums start in that phase 1's backward, after the chunk's sublayers have freed
            # theirs. (A phase-1 read of its own, not a ninth row of the chunk's: that pads the
            # phase-1 kernels' query tiles from 8 to 16; 350M's step ran 131.9 and 132.0 ms
            # with it against 130.7 without, three processes.)
            first_new = self.sources_at_chunk_start
            return routing.route_merge(self.final_row, self.sources[first_new:], self.query_rows[i],
                                       self.norm_rows[i], self.s.heads, sink=self.sources.span(first_new))
        return routing.route(self.sources, self.query_rows[i], self.norm_rows[i], self.s.heads,
                             sink=self.sources.span())


class RoutedStream(ResidualStream):
    method = "routed"

    def __init__(self, d_model: int, num_sublayers: int, heads: int = 1, block_size: int = 0,
                 schedule: str = "auto", chunk: int = 8, phase1_min_sources: int | None = None,
                 sum_in_product: bool = False):
        super().__init__(d_model, num_sublayers)
        routing.reference.check_heads(d_model, heads)
        check_schedule("RoutedStream", schedule)
        if block_size < 0:
            raise ValueError(f"RoutedStream: block_size={block_size} must be 0 (full routing) or >= 1")
        if chunk < 1:
            raise ValueError(f"RoutedStream: chunk={chunk} must be >= 1")
        m = phase1_min_sources
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 0):
            raise ValueError(f"RoutedStream: phase1_min_sources={m!r} must be an integer >= 0 or None")
        self.heads, self.block_size, self.schedule, self.chunk = heads, block_size, schedule, chunk
        self.phase1_min_sources, self.sum_in_product = phase1_min_sources, sum_in_product
        sites = num_sublayers + 1  # each sublayer and the final read
        self.queries = nn.Parameter(torch.zeros(sites, d_model))
        self.key_norms = nn.Parameter(torch.ones(sites, d_model))
        self.finalize_row = _finalize_row

    def compile_regions(self, **compile_kwargs) -> None:
        self.finalize_row = torch.compile(_finalize_row, **compile_kwargs)

    @property
    def num_sources(self) -> int:
        if not self.block_size:
            return self.num_sublayers + 1
        return 1 + -(-self.num_sublayers // self.block_size)

    def start(self, embedding: Tensor) -> StreamState:
        return _RoutedState(self, embedding)
