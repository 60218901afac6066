"""Capture what every routing site reads during one forward pass.

The model code is not changed: :func:`capture_sites` runs the decoder loop itself
(embed, ``state = model.residual.start(x)``, ``state.write(i, sublayer(state.read(i)))``,
``state.final()``) and, just before each read, records the sources that site sees:

* routed, full (``block_size=0``): the embedding and every earlier raw sublayer output;
* routed, block: the completed block summaries, plus the running partial sum of the
  current block for a sublayer that is not the first of its block;
* delta: the null source and the completed block deltas.

Each :class:`Site` also holds the site's query ``q`` and key-norm weight ``g``, so
``mhar.routing.reference.routing_weights(site.sources, site.query, site.norm_weight, H)``
gives exactly the weights the model used. Sites are indexed 0..num_sublayers-1 for the
sublayers and ``num_sublayers`` for the final read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from mhar.model.decoder import warn_past_max_seq_len
from mhar.model.layers import rope_cos_sin
from mhar.routing.reference import routing_weights
from mhar.streams.delta import DeltaStream
from mhar.streams.routed import RoutedStream


@dataclass
class Site:
    index: int            # 0..num_sublayers-1: sublayer i; num_sublayers: the final read
    name: str             # "attn0", "mlp0", ..., "final"
    sources: list[Tensor]  # each (B, T, d), as the site reads them
    labels: list[str]     # one per source: "emb", "attn0", ... / "block0", "partial" / "null", "delta0"
    query: Tensor         # (d,)
    norm_weight: Tensor   # (d,)
    heads: int

    def weights(self) -> Tensor:
        """Routing weights (B, T, H, N), fp32."""
        return routing_weights(self.sources, self.query, self.norm_weight, self.heads)


def sublayer_name(i: int, num_sublayers: int) -> str:
    if i == num_sublayers:
        return "final"
    return f"{'attn' if i % 2 == 0 else 'mlp'}{i // 2}"


def decoder_of(model: nn.Module) -> nn.Module:
    """The decoder to analyse: ``model`` itself, or the one a ``transformers`` wrapper
    (:class:`mhar.model.hf.MharForCausalLM`) holds as ``model.model``."""
    inner = getattr(model, "model", None)
    if getattr(model, "residual", None) is None and isinstance(inner, nn.Module) and hasattr(inner, "residual"):
        return inner
    return model


def routing_stream(model: nn.Module) -> RoutedStream | DeltaStream:
    """The model's routed (or delta) stream; ValueError for streams that do not route."""
    stream = getattr(decoder_of(model), "residual", None)
    if not isinstance(stream, (RoutedStream, DeltaStream)):
        method = getattr(stream, "method", type(stream).__name__)
        raise ValueError(f"the model's residual stream is {method!r}: it has no routing sites "
                         "(probe and maps need a routed or delta stream: attnres, mhar, their block forms, delta)")
    return stream


def source_columns(stream: RoutedStream | DeltaStream) -> list[str]:
    """Every source label any site can read, in order (the columns of a routing map)."""
    n = stream.num_sublayers
    if isinstance(stream, DeltaStream):
        blocks = -(-n // stream.block_size)
        return ["null"] + [f"delta{b}" for b in range(blocks)]
    if not stream.block_size:
        return ["emb"] + [sublayer_name(i, n) for i in range(n)]
    blocks = -(-n // stream.block_size)
    return ["emb"] + [f"block{b}" for b in range(blocks)] + ["partial"]


def _labels(stream, state, i: int) -> tuple[list[Tensor], list[str]]:
    n = stream.num_sublayers
    if isinstance(stream, DeltaStream):
        srcs = list(state.sources)
        return srcs, ["null"] + [f"delta{b}" for b in range(len(srcs) - 1)]
    srcs = list(state.sources)
    if not stream.block_size:
        return srcs, ["emb"] + [sublayer_name(j, n) for j in range(len(srcs) - 1)]
    labels = ["emb"] + [f"block{b}" for b in range(len(srcs) - 1)]
    if i < n and i % stream.block_size:  # a later sublayer of a block also reads the partial sum
        srcs.append(state.partial_sum)
        labels.append("partial")
    return srcs, labels


@torch.no_grad()
def capture_sites(model: nn.Module, input_ids: Tensor) -> list[Site]:
    """Run ``model`` on ``input_ids`` (B, T) and return one :class:`Site` per routing
    site (num_sublayers + 1 of them), in order. The forward pass is the model's own:
    the same stream state, reads and writes as ``Decoder.hidden_states``. ``model``: a
    :class:`~mhar.model.Decoder` or an ``MharForCausalLM`` (its decoder is read)."""
    model = decoder_of(model)
    stream = routing_stream(model)
    cfg = model.config
    B, T = input_ids.shape
    warn_past_max_seq_len(T, cfg.max_seq_len)  # as the model's own forward pass does
    x = model.embed(input_ids)
    positions = torch.arange(T, device=input_ids.device)
    cos, sin = rope_cos_sin(positions, cfg.attn_head_dim, cfg.rope_theta, x.dtype, cfg.rope_scaling)
    state = stream.start(x)
    n = stream.num_sublayers
    sites: list[Site] = []

    def record(i: int) -> None:
        srcs, labels = _labels(stream, state, i)
        sites.append(Site(i, sublayer_name(i, n), srcs, labels, stream.queries[i].detach(),
                          stream.key_norms[i].detach(), stream.heads))

    for i, sublayer in enumerate(model.sublayers):
        record(i)
        state.write(i, sublayer(state.read(i), cos, sin, None))
    record(n)
    return sites
