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
attention (no cache, no padding mask) on CUDA bf16 / fp16 tensors, at a head dim of at most
128, on a GPU of compute capability 9 or 10, with the package importable; everywhere else the
decoder uses SDPA, which computes the same function. The kernels run only at the head dims in
:data:`HEAD_DIMS` (those whose gradients were checked against SDPA's); a model's heads of
another width are padded with zero lanes up to the next of them (:func:`kernel_head_dim`),
which changes no score and no output lane, with the softmax scale kept at the model's. Tests swap in a PyTorch stand-in for the two kernels
(:func:`use_kernels`) to check the ops' plumbing on the CPU.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

# Head dims whose FA4 gradients matched SDPA's on an H100 (flash-attn-4 4.0.0b40): 64
# (paper-100m, paper-350m; session 63, bench/results/session63/2_attention), 96 and 128
# (session 64, bench/results/session64/2_fa4_bars). At 80 (paper-1b) its SM90 backward gave
# gradients off by up to 3.4 (outputs right) in both sessions, so the kernels run only at
# these widths: other heads are padded up to the next (80 runs at 96).
HEAD_DIMS = (64, 96, 128)


def kernel_head_dim(head_dim: int) -> int | None:
    """The width FA4's kernels run heads of ``head_dim`` lanes at: the smallest of
    :data:`HEAD_DIMS` that holds them, or None above the largest."""
    return next((width for width in HEAD_DIMS if width >= head_dim), None)

_fa4: tuple[Callable, Callable] | None = None  # FA4's (forward, backward), imported on first use
_stand_in: tuple[Callable, Callable] | None = None  # tests' replacement (use_kernels)
_import_error: str | None = None


def _fa4_kernels() -> tuple[Callable, Callable]:
    from flash_attn.cute.interface import _flash_attn_bwd, _flash_attn_fwd

    # (.contiguous(): the ops' fakes promise contiguous outputs, which compiled code checks)
    def forward(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float) -> tuple[Tensor, Tensor]:
        out, lse, *_ = _flash_attn_fwd(q, k, v, softmax_scale=softmax_scale, causal=True, return_lse=True)
        return out.contiguous(), lse.contiguous()

    def backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor, lse: Tensor, softmax_scale: float):
        dq, dk, dv = _flash_attn_bwd(q, k, v, out, dout, lse, softmax_scale=softmax_scale, causal=True)[:3]
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
    if kernel_head_dim(head_dim) is not None:
        return True
    if head_dim not in _refused_head_dims:
        _refused_head_dims.add(head_dim)
        warnings.warn(f"attention_kernel='fa4' at head dim {head_dim}: the decoder uses SDPA (FA4's kernels run "
                      f"at head dims {', '.join(map(str, HEAD_DIMS))}, whose gradients were checked, and narrower "
                      "heads are padded up to them; see mhar.model.fa4)", stacklevel=2)
    return False


@torch.library.custom_op("mhar::fa4_causal", mutates_args=())
def fa4_causal(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float) -> tuple[Tensor, Tensor]:
    """Causal attention of q (B, T, H, D) over k, v (B, T, H_kv, D), scores times
    ``softmax_scale``: (out (B, T, H, D), lse (B, H, T) fp32)."""
    return kernels()[0](q, k, v, softmax_scale)


@fa4_causal.register_fake
def _(q, k, v, softmax_scale):
    B, T, H, _ = q.shape
    return q.new_empty(B, T, H, v.shape[-1]), q.new_empty(B, H, T, dtype=torch.float32)


@torch.library.custom_op("mhar::fa4_causal_backward", mutates_args=())
def fa4_causal_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor,
                        lse: Tensor, softmax_scale: float) -> tuple[Tensor, Tensor, Tensor]:
    return kernels()[1](q, k, v, out, dout, lse, softmax_scale)


@fa4_causal_backward.register_fake
def _(q, k, v, out, dout, lse, softmax_scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, ctx.softmax_scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    return (*fa4_causal_backward(q, k, v, out, dout.contiguous(), lse, ctx.softmax_scale), None)


torch.library.register_autograd("mhar::fa4_causal", _backward, setup_context=_setup_context)


def causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention on (B, T, heads, head_dim) tensors through FA4, GQA included. Heads
    narrower than the kernels' width (:func:`kernel_head_dim`) are padded with zero lanes, which
    add nothing to a score and leave the extra output lanes at zero; the scale stays
    ``1 / sqrt(head_dim)``."""
    head_dim = q.shape[-1]
    width = kernel_head_dim(head_dim)
    if width is None:
        raise ValueError(f"FA4 takes heads of at most {HEAD_DIMS[-1]} lanes; got {head_dim}")
    if width != head_dim:
        q, k, v = (F.pad(x, (0, width - head_dim)) for x in (q, k, v))
    out = fa4_causal(q.contiguous(), k.contiguous(), v.contiguous(), head_dim ** -0.5)[0]
    return out[..., :head_dim] if width != head_dim else out


def reference_kernels() -> tuple[Callable, Callable]:
    """A PyTorch stand-in for FA4's two kernels, with their layouts and their log-sum-exp
    (fp32 math): what the tests run the custom ops on."""

    def scores(q, k, softmax_scale):
        rep = q.shape[2] // k.shape[2]
        kk = k.float().repeat_interleave(rep, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q.float(), kk) * softmax_scale
        T = q.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return s.masked_fill(~causal, float("-inf")), rep

    def forward(q, k, v, softmax_scale):
        if not q.dtype == k.dtype == v.dtype:  # as FA4 requires
            raise ValueError(f"q, k and v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
        s, rep = scores(q, k, softmax_scale)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None])
        out = torch.einsum("bhts,bshd->bthd", p, v.float().repeat_interleave(rep, dim=2))
        return out.to(q.dtype).contiguous(), lse.contiguous()  # the fakes' (contiguous) strides

    def backward(q, k, v, out, dout, lse, softmax_scale):  # the textbook backward, from the saved lse
        s, rep = scores(q, k, softmax_scale)
        p = torch.exp(s - lse[..., None])  # (B, H, T, S)
        do = dout.float()
        dv = torch.einsum("bhts,bthd->bshd", p, do)
        dp = torch.einsum("bthd,bshd->bhts", do, v.float().repeat_interleave(rep, dim=2))
        ds = p * (dp - (do * out.float()).sum(-1).transpose(1, 2)[..., None]) * softmax_scale
        dq = torch.einsum("bhts,bshd->bthd", ds, k.float().repeat_interleave(rep, dim=2))
        dk = torch.einsum("bhts,bthd->bshd", ds, q.float())
        B, T, Hk, D = k.shape  # each key head's gradient sums over its group of query heads
        dk, dv = (g.reshape(B, T, Hk, rep, -1).sum(3) for g in (dk, dv))
        return tuple(g.to(t.dtype).contiguous() for g, t in ((dq, q), (dk, k), (dv, v)))

    return forward, backward
