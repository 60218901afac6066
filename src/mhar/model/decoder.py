"""The decoder, written once over a residual-stream strategy (DESIGN.md)."""

from __future__ import annotations

import warnings
from functools import partial

import torch
import torch.utils.checkpoint
import torch.nn.functional as F
from torch import Tensor, nn

from mhar.model.config import ModelConfig
from mhar.model.loss import TiedHeadGradient, linear_cross_entropy, tied_embedding
from mhar.model.layers import (AttentionSublayer, KVCache, MLPSublayer, RMSNorm, padding_attention_mask,
                               rope_cos_sin)
from mhar.streams import build_stream


class Decoder(nn.Module):
    """Qwen3-style decoder: RMSNorm pre-norm, RoPE, GQA with QK-RMSNorm, SwiGLU,
    tied embeddings; the residual stream is ``cfg.stream``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.sublayers = nn.ModuleList()
        for layer in range(cfg.n_layers):
            self.sublayers.append(AttentionSublayer(cfg, layer))
            self.sublayers.append(MLPSublayer(cfg))
        self.residual = build_stream(cfg.stream, cfg.d_model, cfg.num_sublayers)
        self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # Recompute each sublayer in backward instead of keeping its activations (the
        # stream's sources are kept either way: they are the sublayers' inputs/outputs).
        self.activation_checkpointing = False
        self.reset_parameters()

    @property
    def gradient_checkpointing(self) -> bool:
        """``activation_checkpointing`` under the name transformers' ``*_checkpointing_enable``
        sets on every module that has it."""
        return self.activation_checkpointing

    @gradient_checkpointing.setter
    def gradient_checkpointing(self, enable: bool) -> None:
        self.activation_checkpointing = bool(enable)

    def reset_parameters(self) -> None:
        """N(0, init_std^2) for every matrix and the embedding; norms ones; biases zero.
        The stream strategies initialise their own parameters (queries zero, ...)."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, std)

    def compile_regions(self, **compile_kwargs) -> None:
        """Regional compilation: compile each sublayer (attention and MLP sublayers each
        compile once and are reused by every layer) and the stream's glue, instead of
        the whole unrolled model. Much faster to compile at depth, about as fast to run."""
        for sublayer in self.sublayers:
            sublayer.compile(**compile_kwargs)
        # eager, the final norm is some fifteen elementwise kernels over the last state,
        # forward and backward (0.3 ms of a 33 ms step at 100M on an H200); compiled, a
        # kernel or two each way
        self.final_norm.compile(**compile_kwargs)
        self.residual.compile_regions(**compile_kwargs)

    @property
    def output_weight(self) -> Tensor:
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def hidden_states(self, input_ids: Tensor, cache: KVCache | None = None,
                      tied: TiedHeadGradient | None = None, attention_mask: Tensor | None = None) -> Tensor:
        """Final normed hidden states (B, T, d). ``tied``: the embedding's gradient goes
        into the LM head's (see :class:`mhar.model.loss.TiedHeadGradient`). ``attention_mask``:
        transformers' (B, cached + new tokens), 1 for a token and 0 for padding; see
        :func:`token_positions` for what padding does."""
        B, T = input_ids.shape
        past = cache.length if cache is not None else 0
        warn_past_max_seq_len(past + T, self.config.max_seq_len)
        x = self.embed(input_ids) if tied is None else tied_embedding(input_ids, self.embed.weight, tied)
        positions, mask = token_positions(input_ids, past, attention_mask)
        cos, sin = rope_cos_sin(positions, self.config.attn_head_dim, self.config.rope_theta, x.dtype,
                                self.config.rope_scaling)
        args = (cos, sin, cache) if mask is None else (cos, sin, cache, mask)
        state = self.residual.start(x)
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled() and cache is None
        for i, sublayer in enumerate(self.sublayers):
            if recompute:
                # no RNG to replay (no dropout): nothing to save, and nothing a CUDA graph
                # capture would forbid
                call = partial(torch.utils.checkpoint.checkpoint, sublayer, use_reentrant=False,
                               preserve_rng_state=False)
            else:
                call = sublayer
            state.step(i, call, *args, fused=True)
        return self.final_norm(state.final())

    def forward(self, input_ids: Tensor, cache: KVCache | None = None) -> Tensor:
        """Logits (B, T, vocab)."""
        return F.linear(self.hidden_states(input_ids, cache), self.output_weight)

    def loss(self, input_ids: Tensor, targets: Tensor, chunk_size: int = 0, z_loss: float = 0.0) -> Tensor:
        """Mean next-token cross-entropy (+ z_loss * logsumexp^2). ``chunk_size > 0``
        fuses the LM head with the loss in chunks of tokens, so the full (tokens x
        vocab) logits never exist (see :mod:`mhar.model.loss`)."""
        tied = self.tied_head_gradient(chunk_size)
        h = self.hidden_states(input_ids, tied=tied).flatten(0, 1)
        return linear_cross_entropy(h, self.output_weight, targets.flatten(), chunk_size, z_loss, tied=tied)

    def tied_head_gradient(self, chunk_size: int) -> TiedHeadGradient | None:
        """For one forward of :meth:`hidden_states` and the chunked loss on its output:
        the hand-off that puts the tied embedding's gradient into the LM head's, or None
        where it does not apply (an untied head, the plain loss, inside a whole-model
        torch.compile, which would trace the hand-off's Python)."""
        if chunk_size > 0 and not torch.compiler.is_compiling() and self._plain_tied_embedding():
            return TiedHeadGradient()
        return None

    def _plain_tied_embedding(self) -> bool:
        """The head is the embedding, a plain lookup (no padding index, norm or sparse
        gradient, whose backward the tied path would not reproduce)."""
        e = self.embed
        return (self.lm_head is None and type(e) is nn.Embedding and e.padding_idx is None and e.max_norm is None
                and not e.scale_grad_by_freq and not e.sparse)

    # -- parameter accounting --------------------------------------------------
    def parameter_counts(self) -> dict[str, int]:
        total = sum(p.numel() for p in self.parameters())
        embedding = self.embed.weight.numel() + (0 if self.lm_head is None else self.lm_head.weight.numel())
        routing = self.residual.overhead_parameters()
        return {"total": total, "non_embedding": total - embedding, "routing": routing,
                "routing_pct": 100.0 * routing / total}

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward): 6 x matmul
        parameters (embedding lookup excluded, LM head included) plus attention
        scores and values, 12 x L x T x n_heads x head_dim / 2 under the causal mask."""
        cfg = self.config
        matmul = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))
        matmul += cfg.vocab_size * cfg.d_model if self.lm_head is None else 0
        attention = 6 * cfg.n_layers * seq_len * cfg.n_heads * cfg.attn_head_dim  # causal: half of 12
        return 6.0 * matmul + attention


def warn_past_max_seq_len(length: int, max_seq_len: int) -> None:
    """RoPE is computed for any position, as in transformers' models (a converted model gives
    its source's logits there too); positions past ``max_seq_len`` are only untrained."""
    if length > max_seq_len:
        warnings.warn(f"sequence length {length} exceeds max_seq_len={max_seq_len}: positions the model "
                      "was not trained on", stacklevel=3)


def token_positions(input_ids: Tensor, past: int, attention_mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """The new tokens' positions and the attention's padding mask, from transformers'
    ``attention_mask`` (B, past + T) over the cached and the new tokens (1 token, 0 padding).

    No mask, all ones, or padding only after every token of a row (right padding): the
    positions are past, past + 1, ... and attention is plain causal, which no real token
    reads padding through (routing is per token). Padding before a token (left padding,
    or tokens fed after padding): each row's positions count its own tokens (as
    transformers numbers them), and attention gets a mask that skips the padding keys."""
    B, T = input_ids.shape
    positions = torch.arange(past, past + T, device=input_ids.device)
    if attention_mask is None:
        return positions, None
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (B, past + T):
        raise ValueError(f"attention_mask must be 2-D (batch, cached + new tokens) = ({B}, {past + T}), "
                         f"got {tuple(attention_mask.shape)}")
    valid = attention_mask.to(input_ids.device).bool()
    if not bool((valid[:, 1:] & ~valid[:, :-1]).any()):  # no token after padding
        return positions, None
    row_positions = (valid.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
    return row_positions, padding_attention_mask(valid, T)


def count_parameters(cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts without allocating the weights (meta device)."""
    with torch.device("meta"):
        model = Decoder(cfg)
    return model.parameter_counts()



__all__ = ["Decoder", "count_parameters", "token_positions", "warn_past_max_seq_len"]
