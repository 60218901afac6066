"""Shared builders for the analysis tests (tiny configs, constructed models)."""

import torch
from torch import nn

from mhar.model import Decoder, ModelConfig, StreamConfig


def tiny_config(method="routed", heads=1, block_size=0, d_model=64, n_layers=2, vocab=64, **kw):
    stream = StreamConfig(method=method, heads=heads, block_size=block_size if method != "delta" else max(1, block_size))
    return ModelConfig(vocab_size=vocab, d_model=d_model, n_layers=n_layers, n_heads=4, n_kv_heads=2,
                       d_ff=2 * d_model, max_seq_len=64, stream=stream, **kw)


class Const(nn.Module):
    """A stand-in sublayer whose raw output is a fixed vector (a designed source)."""

    def __init__(self, v: torch.Tensor):
        super().__init__()
        self.register_buffer("v", v)

    def forward(self, x, cos, sin, cache=None):
        return self.v.expand_as(x).clone()


def constructed_model(source_vectors: torch.Tensor, heads: int = 1) -> Decoder:
    """A routed decoder whose sources are exactly ``source_vectors`` (N, d): the
    embedding is row 0 for every token, sublayer i outputs row i + 1."""
    N, d = source_vectors.shape
    cfg = tiny_config(heads=heads, d_model=d, n_layers=(N - 1) // 2, vocab=8)
    model = Decoder(cfg)
    with torch.no_grad():
        model.embed.weight.copy_(source_vectors[0].expand_as(model.embed.weight))
    model.sublayers = nn.ModuleList(Const(v) for v in source_vectors[1:])
    return model
