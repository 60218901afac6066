"""A residual stream is a strategy. The decoder is written once::

    state = stream.start(embedding)
    for i, sublayer in enumerate(sublayers):   # attn, mlp, attn, mlp, ...
        x = state.read(i)                      # what sublayer i sees
        state.write(i, sublayer(x))            # its raw output
    hidden = state.final()                     # into the final RMSNorm and LM head

(``state.step(i, sublayer, ...)`` does one read and write, for any sublayer. With
``fused=True`` a stream may instead fuse its glue into the sublayer's call, which must
then take the decoder's keywords: ``residual=`` (the standard residual) and ``add_to=``
(block routing; see ``mhar.model.layers``).)

A :class:`ResidualStream` is an ``nn.Module`` that owns the method's parameters
(routing queries, key norms, gates, mixing scalars); ``start`` returns a fresh
per-forward :class:`StreamState` holding the activations.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mhar import routing


SCHEDULES = ("auto", "one-pass", "two-phase")


def check_schedule(owner: str, schedule: str) -> None:
    """A stream built directly (not from a StreamConfig) checks its arguments too: an
    unknown schedule read as one-pass, silently."""
    if schedule not in SCHEDULES:
        raise ValueError(f"{owner}: schedule={schedule!r} is not one of {', '.join(SCHEDULES)}")


def check_index(i: int, num_sublayers: int) -> None:
    """A read past the sublayers a stream was built for would take the final read's
    parameters (or index past them): a model with more sublayers than it declared."""
    if not 0 <= i < num_sublayers:
        raise IndexError(f"sublayer {i} is out of range: the stream was built for num_sublayers={num_sublayers}")


def check_written(state: "StreamState", i: int) -> None:
    """Sublayers write in increasing order, each once (some may be skipped). A write of
    an earlier one is the loop run again on a state that has moved on: typically read
    and write inside a function that torch.utils.checkpoint recomputes in backward,
    which gave the standard and hyper streams wrong gradients silently."""
    last = getattr(state, "last_written", -1)
    if i <= last:
        raise RuntimeError(f"sublayer {i} written after sublayer {last}: a stream state is written once per "
                           "sublayer, in order. Under torch.utils.checkpoint, checkpoint the sublayer's call "
                           "only: state.write(i, checkpoint(f, state.read(i), use_reentrant=False))")
    state.last_written = i


class StreamState:
    def read(self, i: int) -> Tensor:
        raise NotImplementedError

    def write(self, i: int, output: Tensor) -> None:
        raise NotImplementedError

    def final(self) -> Tensor:
        raise NotImplementedError

    def step(self, i: int, sublayer, *args, fused: bool = False) -> None:
        """Sublayer i's read, call ``sublayer(x, *args)`` and write. ``fused``: the sublayer
        takes the keywords a stream fuses its glue through (see the module's docstring);
        off, any sublayer works, as with ``read`` and ``write``."""
        self.write(i, sublayer(self.read(i), *args))


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


class SourceList(list):
    """A routed stream's sources for one forward. When training eagerly each is
    registered with a :class:`mhar.routing.GradientSink`, so the routing backward sums
    its per-site gradients in-kernel; ``span`` names a call's registered sources. Under
    no_grad or torch.compile the sources stay plain tensors (``span`` is None)."""

    def __init__(self):
        super().__init__()
        eager_training = torch.is_grad_enabled() and not torch.compiler.is_compiling()
        self.sink = routing.GradientSink() if eager_training else None
        self.reserved: int | None = None  # the sink entry of the source that running_sum builds

    def add(self, source: Tensor) -> None:
        """Append a source (a running sum's, once complete, into its reserved entry)."""
        if self.sink is None:
            self.append(source)
            return
        self.append(self.sink.register(source, self.reserved))
        self.reserved = None

    def running_sum(self, total: Tensor | None, output: Tensor, added: bool = False) -> Tensor:
        """``total + output`` (``output`` when total is None): block routing's running sum,
        the next source to be added; ``added``: ``output`` is that sum already, formed from
        ``total`` by its producer (``project_into``). With a sink, reads of it name the next
        entry (``span(0, len(self) + 1)``, ``span(len(self), 1)``) and the backward sums their
        gradients into it in-kernel, instead of autograd adding two tensors per sublayer."""
        if self.sink is None:
            return output if total is None or added else total + output
        if total is None:
            self.reserved = self.sink.reserve()
            assert self.reserved == len(self), "every source of a SourceList with a sink is registered"
        return self.sink.running_sum(total, output, self.reserved, added)

    def span(self, start: int = 0, count: int | None = None):
        """The sink entries of a call whose first ``count`` sources (default: the rest)
        are ``self[start:start + count]``, and the running sum (``running_sum``) where
        they reach entry ``len(self)``."""
        if self.sink is None:
            return None
        return self.sink.span(start, len(self) - start if count is None else count)


# 'auto' block routing: blocks whose phase 1 would read fewer summaries than this read
# one-pass, the later ones two-phase (see uses_two_phase)
AUTO_BLOCK_PHASE1_MIN_SOURCES = 4


def phase1_min_sources(setting: int | None, schedule: str, block: bool) -> int:
    """The stream's ``phase1_min_sources`` resolved: a set value as it is; unset (None),
    AUTO_BLOCK_PHASE1_MIN_SOURCES for block routing under 'auto', else 0 (every chunk
    two-phase)."""
    if setting is not None:
        return setting
    return AUTO_BLOCK_PHASE1_MIN_SOURCES if schedule == "auto" and block else 0


def uses_two_phase(schedule: str, x: Tensor, heads: int, kind: str = "full") -> bool:
    """Resolve a schedule for a forward on ``x`` (..., d). ``kind``: "full" routing,
    "block" routing (whose reads see a few block summaries) or "delta" (the delta form's
    blocks). 'auto' is two-phase where it measured faster on an H200: on CUDA, for full
    routing at d >= 512 with any head count, and at d >= 1024 for block routing with any
    head count (from its fourth block on, ``phase1_min_sources``) and for the delta form
    with one head.
    - One head: attention residuals at 350M and 1B, 3-6% faster eager steps in session 5
      (bench/results/history/step_h200_session5.md) and 4.7-6.6% more tokens/s graphed in
      session 6 (bench/results/step_h200.md).
    - Full routing, 8 heads, since session 9's phase-1 gather (per-token matrix products):
      the routing kernels of a whole step took 50.6 against 52.5 ms one-pass at 1024/49
      and 120.3 against 145.3 at 1280/73; the graphed 1B MHAR step 345.7 ms against
      session 8's 371.0 (bench/results/routing_h200.md, step_h200.md).
    - Block routing, 8 heads: two-phase made the graphed 350M block MHAR step 0.894x of
      the baseline's throughput against 0.919x one-pass (session 9), then within the
      spread of one-pass at 350M and 1B (sessions 25, 33 and 34): phase 1's product kernels
      cost a block of 16 sources whatever a block's count. With the first blocks (fewer
      than 4 summaries) one-pass and the rest two-phase, 0.940x at 350M against 0.930x
      one-pass and 0.915x all two-phase; at 1B 0.936x against 0.928x one-pass in one
      process (session 35, bench/results/step_h200.md). With phase 1 taking several
      tokens at a time for few sources (session 36), 0.947x at 350M against 0.944x all
      two-phase in one process, 0.949x at 1B.
    - Full routing at d = 512 (100M), session 46: two-phase 0.891 / 0.891 of the baseline's
      throughput against one-pass 0.848 / 0.857 with 8 heads, 0.849 against 0.837 with
      one; at the trainer's 64 x 2048, 0.881 against 0.844, and peak memory 1.013 against
      1.045 x the baseline's (one-pass's backward starts every source's gradient sum at
      its first read). Two-phase had been the slower there (sessions 5, 10 and 12).
    - The delta form with several heads stays one-pass (its blocks' batched reads were
      not re-measured in session 35).
    The widths measured are the paper's, 512, 1024 and 1280; a width between them takes
    the rule of the measured width below it (768: 512's). Elsewhere 'auto' is one-pass:
    below d = 512 nothing was measured, and on the CPU (the reference path) the bytes do
    not matter."""
    if kind not in ("full", "block", "delta"):
        raise ValueError(f"uses_two_phase: kind={kind!r} is not full, block or delta")
    if schedule == "auto":
        min_width = 512 if kind == "full" else 1024
        return x.is_cuda and x.shape[-1] >= min_width and (heads == 1 or kind != "delta")
    return schedule == "two-phase"


def autocast_dtype(t: Tensor) -> torch.dtype:
    """The dtype sublayer outputs will have: the autocast dtype when autocast is on."""
    kind = t.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return t.dtype
