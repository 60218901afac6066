"""Decoder building blocks: RMSNorm, RoPE, grouped-query attention with QK-RMSNorm,
SwiGLU MLP. The arithmetic mirrors the Hugging Face Llama/Qwen3 implementations
operation for operation, so converted models reproduce their logits exactly."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mhar.model import fa4
from mhar.model.config import ModelConfig

# SDPA's enable_gqa (torch >= 2.5)
_SDPA_HAS_GQA = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def project_into(x: Tensor, proj: nn.Linear, total: Tensor | None) -> Tensor:
    """``proj(x)``, or ``total + proj(x)`` as one product: ``total`` is the product's C
    operand (``addmm``, beta 1), so the add costs a read of it in cuBLAS's epilogue instead
    of a pass of its own over three tensors. Block routing's running sums use it with
    ``stream.sum_in_product`` (``RoutedStream``); in bf16 the sum is rounded once, from the product's fp32
    accumulator, not twice.

    Anything but a plain bias-free ``nn.Linear`` without hooks is called as a module and
    added to: a LoRA or quantized wrapper of the projection, or a hook on it, must see the
    call, and reading ``proj.weight`` would skip them without a word."""
    if total is None:
        return proj(x)
    if (type(proj) is not nn.Linear or proj.bias is not None
            or proj._forward_hooks or proj._forward_pre_hooks):
        return total + proj(x)
    d = total.shape[-1]
    return torch.addmm(total.reshape(-1, d), x.reshape(-1, x.shape[-1]), proj.weight.t()).view(total.shape)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None = None,
                  device: torch.device | None = None) -> Tensor:
    """RoPE inverse frequencies (head_dim / 2,), fp32, computed as transformers does
    (default, 'linear' and 'llama3' rope types), so converted models match bit for bit."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    if scaling is None:
        return inv_freq
    kind, factor = scaling["rope_type"], scaling["factor"]
    if kind == "linear":
        return inv_freq / factor
    if kind != "llama3":
        raise ValueError(f"unsupported rope_type {kind!r}")
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


_INV_FREQ_CACHE: dict[tuple, Tensor] = {}


def _cached_inv_freq(head_dim: int, theta: float, scaling: dict | None, device: torch.device) -> Tensor:
    """inv_freq computed on the CPU (as transformers computes its buffer at init) and
    moved to ``device`` once: computing it on a GPU gives different low bits."""
    key = (head_dim, float(theta), None if scaling is None else tuple(sorted(scaling.items())), str(device))
    t = _INV_FREQ_CACHE.get(key)
    if t is None:
        t = _INV_FREQ_CACHE[key] = rope_inv_freq(head_dim, theta, scaling).to(device)
    return t


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float, dtype: torch.dtype,
                 scaling: dict | None = None) -> tuple[Tensor, Tensor]:
    """cos/sin tables (T, head_dim) for positions (T,), or (B, 1, T, head_dim) for one row of
    positions per sequence (B, T) (left padding), in HF's non-interleaved layout."""
    inv_freq = _cached_inv_freq(head_dim, theta, scaling, positions.device)
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    if positions.dim() == 2:  # broadcast over the attention heads of (B, heads, T, head_dim)
        emb = emb.unsqueeze(1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def padding_attention_mask(keys_valid: Tensor, new_tokens: int) -> Tensor:
    """The boolean SDPA mask (B, 1, T, past + T) for the last ``new_tokens`` queries over
    every key, cached ones included: causal, and blind to the keys ``keys_valid`` (B, past + T)
    marks as padding. A query reads itself too, so a padding query (left padding's first
    positions, whose every earlier key is padding) has one key to read and stays finite;
    its output is never read by a real token (attention masks it, routing is per token)."""
    total = keys_valid.shape[1]
    past = total - new_tokens
    query = torch.arange(past, total, device=keys_valid.device)[:, None]
    key = torch.arange(total, device=keys_valid.device)[None, :]
    mask = (key <= query) & keys_valid[:, None, :]
    return (mask | (key == query))[:, None]


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return x * cos + _rotate_half(x) * sin


class KVCache:
    """Per-layer key/value cache for incremental decoding: tensors (B, kv_heads, T, hd)."""

    def __init__(self, n_layers: int):
        self.keys: list[Tensor | None] = [None] * n_layers
        self.values: list[Tensor | None] = [None] * n_layers

    def layer_length(self, layer: int) -> int:
        return 0 if self.keys[layer] is None else self.keys[layer].shape[2]

    @property
    def length(self) -> int:
        return self.layer_length(0)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def reorder(self, index: Tensor) -> None:
        self.keys = [None if k is None else k.index_select(0, index) for k in self.keys]
        self.values = [None if v is None else v.index_select(0, index) for v in self.values]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_index: int):
        super().__init__()
        self.layer_index = layer_index
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.attn_head_dim
        d, hd = cfg.d_model, self.head_dim
        self.q_proj = nn.Linear(d, cfg.n_heads * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.n_heads * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, cfg.norm_eps) if cfg.qk_norm else None
        self.fa4 = cfg.attention_kernel == "fa4"

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None = None,
                add_to: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """The attention output, ``add_to +`` it where given (see ``project_into``). ``mask``:
        a padding mask over every key (``padding_attention_mask``), or None for plain causal."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.fa4 and cache is None and mask is None and cos.dim() == 2 and fa4.fa4_usable(v):
            # FA4 takes the projections' (B, T, heads, hd) layout, GQA included. Under autocast
            # RoPE's fp32 tables make q and k fp32; SDPA would cast them back to the autocast
            # dtype, which v has.
            c, s = cos[:, None], sin[:, None]  # (T, 1, hd)
            q, k = apply_rope(q, c, s).to(v.dtype), apply_rope(k, c, s).to(v.dtype)
            return project_into(fa4.causal_attention(q, k, v).reshape(B, T, -1), self.o_proj, add_to)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        past = 0
        if cache is not None:
            past = cache.layer_length(self.layer_index)
            k, v = cache.update(self.layer_index, k, v)
        rep = self.n_heads // self.n_kv_heads
        # GQA as transformers >= 5 does it, so converted models match bit for bit on CUDA
        # too: SDPA's enable_gqa when there is no mask, an explicit repeat otherwise.
        gqa = {"enable_gqa": True} if rep > 1 and _SDPA_HAS_GQA and mask is None else {}
        if rep > 1 and not gqa:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if mask is not None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif past == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, **gqa)
        elif T == 1:
            out = F.scaled_dot_product_attention(q, k, v, **gqa)
        else:  # new tokens attend to the whole past and causally among themselves
            if gqa:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            causal = torch.ones(T, past + T, dtype=torch.bool, device=x.device).tril(diagonal=past)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        return project_into(out.transpose(1, 2).reshape(B, T, -1), self.o_proj, add_to)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: Tensor, add_to: Tensor | None = None) -> Tensor:
        """The MLP's output, ``add_to +`` it where given (see ``project_into``)."""
        return project_into(F.silu(self.gate_proj(x)) * self.up_proj(x), self.down_proj, add_to)


class _Sublayer(nn.Module):
    """f(x) = body(RMSNorm(x)). With ``residual`` given, the sublayer first forms the
    standard stream's next state ``x + residual`` and returns it with f of it: the add
    then runs inside the sublayer's compiled region, fused with the norm's read (and
    in backward the two gradient paths' sum with the norm's backward), instead of as
    separate passes over the fp32 stream (StandardStream). With ``add_to`` given, the
    sublayer returns ``add_to + f(x)``, the add in its last product (``project_into``):
    block routing's running sum (RoutedStream).

    Each kind defines its own ``forward``: torch.compile keeps a budget of 8 compiled
    variants per code object (residual or not, input dtype, autocast's cache flag...),
    and one ``forward`` shared by both kinds ran out of it in a benchmark process
    running four configurations, which then ran its sublayers uncompiled."""

    def body(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None, add_to: Tensor | None,
             mask: Tensor | None) -> Tensor:
        raise NotImplementedError

    def _forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None, mask: Tensor | None,
                 residual: Tensor | None, add_to: Tensor | None) -> Tensor | tuple[Tensor, Tensor]:
        if residual is None:
            return self.body(self.norm(x), cos, sin, cache, add_to, mask)
        x = x + residual
        return x, self.body(self.norm(x), cos, sin, cache, add_to, mask)


class AttentionSublayer(_Sublayer):
    """f(x) = Attention(RMSNorm(x))."""

    def __init__(self, cfg: ModelConfig, layer_index: int):
        super().__init__()
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, layer_index)

    def body(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None, add_to: Tensor | None,
             mask: Tensor | None) -> Tensor:
        return self.attn(x, cos, sin, cache, add_to, mask)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None = None, mask: Tensor | None = None,
                residual: Tensor | None = None, add_to: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        return self._forward(x, cos, sin, cache, mask, residual, add_to)


class MLPSublayer(_Sublayer):
    """f(x) = SwiGLU(RMSNorm(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def body(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None, add_to: Tensor | None,
             mask: Tensor | None) -> Tensor:
        return self.mlp(x, add_to)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache | None = None, mask: Tensor | None = None,
                residual: Tensor | None = None, add_to: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        return self._forward(x, cos, sin, cache, mask, residual, add_to)
