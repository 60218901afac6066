"""FlashAttention-4's CuTe kernels as the decoder's causal attention (``attention_kernel="fa4"``).

The default attention is SDPA, whose fastest backend on an H100 or H200 is cuDNN's (issue 6:
about 19-25% of the bf16 peak at the paper's shapes, bench/results/step_h200.md). The
``flash-attn-4`` package (``pip install flash-attn-4``; its kernels are written in CUTLASS's
Python DSL and compiled on first use) has forward and backward kernels for Hopper (SM90) and
Blackwell (SM100). It takes (batch, tokens, heads, head_dim) tensors, the layout of the
decoder's projections, with grouped-query attention built in, so no transposes and no
repeated keys.

The two kernels are wrapped as ``torch.library`` custom ops (``mhar::fa4_causal`` and its
backward), so a compiled region calls them as one opaque op each way and a CUDA graph
captures them. :func:`fa4_usable` says where the decoder takes them: training-style causal
attention (no cache, no padding mask) on CUDA bf16 / fp16 tensors, at a head dim in
:data:`HEAD_DIMS` (those whose gradients were checked against SDPA's), on a GPU of compute
capability 9 or 10, with the package importable; everywhere else the decoder uses SDPA,
which computes the same function. Tests swap in a PyTorch stand-in for the two kernels
(:func:`use_kernels`) to check the ops' plumbing on the CPU.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable

import torch
from torch import Tensor

# Head dims whose FA4 gradients matched SDPA's on an H100 (flash-attn-4 4.0.0b40): 64
# (paper-100m, paper-350m; session 63, bench/results/session63/2_attention), 96 and 128
# (session 64, bench/results/session64/2_fa4_bars). At 80 (paper-1b) its SM90 backward gave
# gradients off by up to 3.4 (outputs right) in both sessions, so other head dims keep SDPA.
# Padding 80-lane heads with zero lanes to 96 or 128 gives right gradients but is slower than
# SDPA: one paper-1b layer 1.48x / 1.76x cuDNN's time, the 1B step 2% slower (an H100,
# session 69, bench/results/session69/), so it is not done.
HEAD_DIMS = (64, 96, 128)

_fa4: tuple[Callable, Callable] | None = None  # FA4's (forward, backward), imported on first use
_stand_in: tuple[Callable, Callable] | None = None  # tests' replacement (use_kernels)
_import_error: str | None = None


def _fa4_kernels() -> tuple[Callable, Callable]:
    from flash_attn.cute.interface import _flash_attn_bwd, _flash_attn_fwd

    # (.contiguous(): the ops' fakes promise contiguous outputs, which compiled code checks)
    def forward(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        out, lse, *_ = _flash_attn_fwd(q, k, v, causal=True, return_lse=True)
        return out.contiguous(), lse.contiguous()

    def backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor, lse: Tensor):
        dq, dk, dv = _flash_attn_bwd(q, k, v, out, dout, lse, causal=True)[:3]
        return dq.contiguous(), dk.contiguous(), dv.contiguous()

    return forward, backward


def kernels() -> tuple[Callable, Callable]:
    global _fa4
    if _stand_in is not None:
        return _stand_in
    if _fa4 is None:
        _fa4 = _fa4_kernels()
    return _fa4


def use_kernels(pair: tuple[Callable, Callable] | None) -> None:
    """Run the ops on a stand-in (forward, backward) pair, on any device and dtype (tests);
    ``None`` returns to FA4's."""
    global _stand_in
    _stand_in = pair


@torch.compiler.assume_constant_result
def _ready_on(device_index: int) -> bool:
    """FA4 runs on this CUDA device: compute capability 9 or 10 and the package imports.
    Warns once where it would run but does not import. (A constant to torch.compile,
    which calls it while tracing a region.)"""
    global _fa4, _import_error
    if torch.cuda.get_device_capability(device_index)[0] not in (9, 10):
        return False
    if _fa4 is None and _import_error is None:
        try:
            _fa4 = _fa4_kernels()
        except Exception as e:  # not installed, or a DSL without this GPU's libraries
            _import_error = f"{type(e).__name__}: {e}"
            warnings.warn(f"attention_kernel='fa4' but flash-attn-4 cannot be used here ({_import_error}); "
                          "the decoder uses SDPA (pip install flash-attn-4)", stacklevel=2)
    return _fa4 is not None


def fa4_usable(x: Tensor) -> bool:
    """Whether the decoder runs causal attention over (B, T, heads, head_dim) tensors like
    ``x`` (device, dtype, head dim) on FA4's kernels (else on SDPA)."""
    if _stand_in is not None:
        return True
    return (x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and _head_dim_ok(x.shape[-1])
            and _ready_on(x.device.index))


_refused_head_dims: set[int] = set()


@torch.compiler.assume_constant_result
def _head_dim_ok(head_dim: int) -> bool:
    if head_dim in HEAD_DIMS:
        return True
    if head_dim not in _refused_head_dims:
        _refused_head_dims.add(head_dim)
        warnings.warn(f"attention_kernel='fa4' at head dim {head_dim}: the decoder uses SDPA (FA4 is taken at "
                      f"head dims {', '.join(map(str, HEAD_DIMS))}, whose gradients were checked; see mhar.model.fa4)",
                      stacklevel=2)
    return False


@torch.library.custom_op("mhar::fa4_causal", mutates_args=())
def fa4_causal(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Causal attention of q (B, T, H, D) over k, v (B, T, H_kv, D): (out (B, T, H, D), lse (B, H, T) fp32)."""
    return kernels()[0](q, k, v)


@fa4_causal.register_fake
def _(q, k, v):
    B, T, H, _ = q.shape
    return q.new_empty(B, T, H, v.shape[-1]), q.new_empty(B, H, T, dtype=torch.float32)


@torch.library.custom_op("mhar::fa4_causal_backward", mutates_args=())
def fa4_causal_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor,
                        lse: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return kernels()[1](q, k, v, out, dout, lse)


@fa4_causal_backward.register_fake
def _(q, k, v, out, dout, lse):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    return fa4_causal_backward(q, k, v, out, dout.contiguous(), lse)


torch.library.register_autograd("mhar::fa4_causal", _backward, setup_context=_setup_context)


def causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention on (B, T, heads, head_dim) tensors through FA4, GQA included."""
    return fa4_causal(q.contiguous(), k.contiguous(), v.contiguous())[0]


def reference_kernels() -> tuple[Callable, Callable]:
    """A PyTorch stand-in for FA4's two kernels, with their layouts and their log-sum-exp
    (fp32 math): what the tests run the custom ops on."""

    def scores(q, k):
        rep = q.shape[2] // k.shape[2]
        kk = k.float().repeat_interleave(rep, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q.float(), kk) / math.sqrt(q.shape[-1])
        T = q.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return s.masked_fill(~causal, float("-inf")), rep

    def forward(q, k, v):
        if not q.dtype == k.dtype == v.dtype:  # as FA4 requires
            raise ValueError(f"q, k and v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
        s, rep = scores(q, k)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None])
        out = torch.einsum("bhts,bshd->bthd", p, v.float().repeat_interleave(rep, dim=2))
        return out.to(q.dtype).contiguous(), lse.contiguous()  # the fakes' (contiguous) strides

    def backward(q, k, v, out, dout, lse):  # the textbook backward, from the saved lse
        s, rep = scores(q, k)
        p = torch.exp(s - lse[..., None])  # (B, H, T, S)
        do = dout.float()
        dv = torch.einsum("bhts,bthd->bshd", p, do)
        dp = torch.einsum("bthd,bshd->bhts", do, v.float().repeat_interleave(rep, dim=2))
        ds = p * (dp - (do * out.float()).sum(-1).transpose(1, 2)[..., None]) / math.sqrt(q.shape[-1])
        dq = torch.einsum("bhts,bshd->bthd", ds, k.float().repeat_interleave(rep, dim=2))
        dk = torch.einsum("bhts,bthd->bshd", ds, q.float())
        B, T, Hk, D = k.shape  # each key head's gradient sums over its group of query heads
        dk, dv = (g.reshape(B, T, Hk, rep, -1).sum(3) for g in (dk, dv))
        return tuple(g.to(t.dtype).contiguous() for g, t in ((dq, q), (dk, k), (dv, v)))

    return forward, backward
