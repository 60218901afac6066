"""Linear + cross-entropy without materialising the (tokens x vocab) logits.

With a 151,936-entry vocabulary the logits dominate activation memory (16K tokens:
10 GB in fp32). :class:`ChunkedLinearCrossEntropy` computes the LM head and the loss
chunk by chunk and, in the same pass, the gradients for the hidden states and the
head weight (the approach of Liger-Kernel's fused linear cross-entropy). Backward
only scales the stored gradients.

Two backends, chosen at run time (:func:`set_backend` or
``MHAR_LOSS_BACKEND=auto|reference|triton``):

* ``reference``: plain PyTorch, runs everywhere; fp32 math for the softmax (the
  definition the fused path is tested against).
* ``triton`` (``auto`` picks it for CUDA tensors): per chunk one matmul in the compute
  dtype (the autocast dtype, bf16 in training; the head weight is cast once per call,
  not per chunk), then :func:`mhar.model.ce_kernel.cross_entropy_scaled_grad_` turns the
  logits chunk in place into its gradient divided by a per-row scale (fp32 statistics,
  one read and one write of the chunk), then ``grad_hidden[chunk] = row_scale * (g @ W)``
  straight into the output and ``grad_weight += g.T @ (row_scale * h)`` accumulated in
  fp32 by cuBLAS where the installed torch can (``addmm(..., out_dtype=float32)``), with
  fallbacks where it cannot. (``MHAR_CE_ONE_PASS=0``: the two-pass kernel, which writes
  the gradient itself.) On the CPU it runs only when forced, under
  ``TRITON_INTERPRET=1`` (tests).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor

from mhar.backends import BackendChoice

_BACKEND = BackendChoice("loss", "MHAR_LOSS_BACKEND", "mhar.model.ce_kernel")
# The fused path's backward scales the gradients its forward formed in place, skipping the
# scale on the device where it is 1, and hands them over (_hand_over): no new vocab x d
# tensor (0.6% off the 100M baseline's step on an H100, bench/results/session65/).
# MHAR_CE_HAND_OVER=0 writes a scaled copy instead, which allows a second backward.
HAND_OVER = os.environ.get("MHAR_CE_HAND_OVER", "1") == "1"


def set_backend(name: str | None) -> None:
    """Choose the chunked loss's backend: "auto" (Triton on CUDA, reference elsewhere),
    "reference", or "triton" (everywhere; on the CPU only under ``TRITON_INTERPRET=1``).
    ``None`` returns to ``MHAR_LOSS_BACKEND`` (default auto)."""
    _BACKEND.set(name)


def get_backend() -> str:
    return _BACKEND.get()


def _triton_available() -> bool:
    return _BACKEND.triton_available()


def _compute_dtype(hidden: Tensor, weight: Tensor) -> torch.dtype:
    """The dtype the LM-head matmul runs in: the autocast dtype when autocast is on for
    the tensors' device (autograd.Function.forward runs under the caller's autocast),
    else the promoted dtype of the inputs."""
    dev = hidden.device.type
    if dev in ("cuda", "cpu") and torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return torch.promote_types(hidden.dtype, weight.dtype)


def _use_fused(hidden: Tensor, weight: Tensor) -> bool:
    return _BACKEND.use_triton(hidden.is_cuda, _compute_dtype(hidden, weight))


# ------------------------------------------------ fp32 accumulation of g.T @ h

_ACCUM_MODE: dict = {}


def _accum_mode(device: torch.device, dtype: torch.dtype) -> str:
    """How to do ``acc(fp32) += a.T @ b`` for ``a, b`` in ``dtype`` on ``device``, probed
    once on small tensors (torch versions differ in what ``out_dtype`` accepts):

    * "fp32": inputs are fp32 already, ``acc.addmm_``;
    * "addmm_out_dtype": ``torch.addmm(acc, a.T, b, out_dtype=float32, out=acc)``, fp32
      accumulation in cuBLAS, no intermediate;
    * "mm_out_dtype": ``torch.mm(a.T, b, out_dtype=float32, out=tmp)`` then ``acc += tmp``
      (fp32 product, one fp32 temporary reused across chunks);
    * "lowp": ``acc += (a.T @ b)`` with the product rounded to ``dtype`` (what the
      reference path does under autocast)."""
    if dtype == torch.float32:
        return "fp32"
    key = (device.type, device.index, dtype)
    mode = _ACCUM_MODE.get(key)
    if mode is not None:
        return mode
    mode = "lowp"
    g = torch.Generator(device="cpu").manual_seed(0)
    a32 = torch.randn(24, 40, generator=g).to(dtype).float()
    b32 = torch.randn(24, 16, generator=g).to(dtype).float()
    c0 = torch.randn(40, 16, generator=g)
    want = c0 + a32.t() @ b32
    a, b = a32.to(device, dtype), b32.to(device, dtype)
    try:
        acc = c0.clone().to(device)
        torch.addmm(acc, a.t(), b, out_dtype=torch.float32, out=acc)
        # and with beta=0 it must ignore what acc held (the first chunk writes it)
        junk = torch.full_like(acc, float("nan"))
        torch.addmm(junk, a.t(), b, beta=0, out_dtype=torch.float32, out=junk)
        if torch.allclose(acc.cpu(), want, rtol=1e-5, atol=1e-4) and \
                torch.allclose(junk.cpu(), want - c0, rtol=1e-5, atol=1e-4):
            mode = "addmm_out_dtype"
    except Exception:
        pass
    if mode == "lowp":
        try:
            tmp = torch.empty(40, 16, device=device)
            torch.mm(a.t(), b, out_dtype=torch.float32, out=tmp)
            if torch.allclose(tmp.cpu() + c0, want, rtol=1e-5, atol=1e-4):
                mode = "mm_out_dtype"
        except Exception:
            pass
    _ACCUM_MODE[key] = mode
    return mode


class _Accumulator:
    """``acc += a.T @ b`` in fp32 with the mode chosen by :func:`_accum_mode`; the first
    ``add`` writes ``acc`` instead, so it may start as ``torch.empty`` (the LM head's
    fp32 gradient is not zeroed first: 0.8 GB of writes a step at 1B)."""

    def __init__(self, acc: Tensor, in_dtype: torch.dtype):
        self.acc = acc
        self.mode = _accum_mode(acc.device, in_dtype) if acc.dtype == torch.float32 else "lowp"
        self.tmp = None
        self.first = True

    def add(self, a: Tensor, b: Tensor) -> None:
        first, self.first = self.first, False
        if self.mode == "fp32":
            self.acc.addmm_(a.t(), b, beta=0 if first else 1)
        elif self.mode == "addmm_out_dtype":
            torch.addmm(self.acc, a.t(), b, beta=0 if first else 1, out_dtype=torch.float32, out=self.acc)
        elif self.mode == "mm_out_dtype":
            if first:
                torch.mm(a.t(), b, out_dtype=torch.float32, out=self.acc)
                return
            if self.tmp is None:
                self.tmp = torch.empty_like(self.acc)
            torch.mm(a.t(), b, out_dtype=torch.float32, out=self.tmp)
            self.acc += self.tmp
        elif first:
            self.acc.copy_(a.t() @ b)
        else:
            self.acc += (a.t() @ b).to(self.acc.dtype)


# ------------------------------------------------------------------ tied embedding


class TiedHeadGradient:
    """Hands the LM head's gradient to a tied embedding's backward, which adds its rows
    into it in place instead of making a gradient of its own.

    With tied weights autograd sums two dense (vocab x d) gradients for one matrix: the
    lookup's (zeroed, then scattered into) and the loss's, added together (two reads and a
    write; at 1B each is 1.2 GB in fp32). The loss's backward always runs first (the
    lookup's output is upstream of the loss), so it leaves its fresh gradient here; the
    lookup's backward, in the same backward pass (checked by autograd's graph-task id),
    index-adds its rows into it and returns no gradient of its own: autograd then hands
    the one tensor on. Otherwise the lookup returns the usual dense gradient."""

    def __init__(self):
        self._grad: Tensor | None = None
        self._task = None

    def put(self, grad: Tensor) -> None:
        self._grad, self._task = grad, torch._C._current_graph_task_id()

    def take(self) -> Tensor | None:
        grad, task = self._grad, self._task
        self._grad = self._task = None  # no reference left: autograd may then reuse the tensor as .grad
        return grad if grad is not None and task == torch._C._current_graph_task_id() else None


class _TiedLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids: Tensor, weight: Tensor, tied: TiedHeadGradient):
        ctx.save_for_backward(ids)
        ctx.tied, ctx.num_weights = tied, weight.shape[0]
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (ids,) = ctx.saved_tensors
        head = ctx.tied.take()
        if not ctx.needs_input_grad[1]:
            return None, None, None
        if head is None:  # none handed over in this backward pass: the usual dense gradient
            return None, torch.ops.aten.embedding_dense_backward(grad, ids, ctx.num_weights, -1, False), None
        rows = grad.reshape(-1, grad.shape[-1])
        head.index_add_(0, ids.reshape(-1), rows if rows.dtype == head.dtype else rows.to(head.dtype))
        return None, None, None


def tied_embedding(ids: Tensor, weight: Tensor, tied: TiedHeadGradient | None) -> Tensor:
    """``F.embedding(ids, weight)``, whose weight gradient goes into the LM head's (see
    :class:`TiedHeadGradient`) when ``tied`` is given and the loss passes it the same."""
    if tied is None or not torch.is_grad_enabled():
        return F.embedding(ids, weight)
    return _TiedLookup.apply(ids, weight, tied)


# ------------------------------------------------------------------ the op


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int, z_loss: float,
                ignore_index: int, fused: bool = False, tied: TiedHeadGradient | None = None):
        if fused:
            total, grad_hidden, grad_weight = _fused_forward(hidden, weight, targets, chunk_size, z_loss,
                                                             ignore_index, hidden.requires_grad,
                                                             weight.requires_grad)
        else:
            total, grad_hidden, grad_weight = _reference_forward(hidden, weight, targets, chunk_size, z_loss,
                                                                 ignore_index)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype, ctx.tied, ctx.hand_over, ctx.handed_over = weight.dtype, tied, fused and HAND_OVER, False
        return total

    @staticmethod
    def backward(ctx, grad_out):
        # The gradients were formed in the forward as plain tensors: a second order
        # (create_graph=True) would take them as constants, silently. @once_differentiable
        # cannot catch it, as the loss's incoming gradient is a constant too.
        if torch.is_grad_enabled():
            raise RuntimeError("mhar loss: cannot differentiate twice (create_graph=True) through the chunked "
                               "linear + cross-entropy, whose gradients are formed in its forward; use the "
                               "plain loss (chunk_size=0, the trainer's loss_chunk=0)")
        grad_hidden, grad_weight = ctx.saved_tensors
        if ctx.hand_over:
            gh, gw = _hand_over(ctx, grad_hidden, grad_weight, grad_out)
        else:
            gh = grad_hidden * grad_out.to(grad_hidden.dtype) if ctx.needs_input_grad[0] else None
            # (as a foreach op: the plain product with a 0-d CUDA tensor runs the broadcasting,
            # unvectorised kernel, at 2.8 TB/s over the head's fp32 gradient on an H200)
            gw = torch._foreach_mul([grad_weight], grad_out)[0] if ctx.needs_input_grad[1] else None
        gw = gw.to(ctx.weight_dtype) if gw is not None else None
        if gw is not None and ctx.tied is not None:
            ctx.tied.put(gw)  # ours alone (made here or in the forward): the tied lookup adds into it
        return gh, gw, None, None, None, None, None, None


def _hand_over(ctx, grad_hidden: Tensor, grad_weight: Tensor, grad_out: Tensor):
    """The fused path's backward with ``HAND_OVER``: the gradients formed in the forward,
    scaled in place by the upstream gradient (skipped on the device where it is 1, a plain
    ``loss.backward()``: :func:`mhar.model.ce_kernel.scale_unless_one_`) and handed over as
    they are, with no new vocab x d tensor. So a second backward through the same loss
    (``retain_graph``) would find them scaled (and, tied, with the embedding's rows added):
    it is refused."""
    from mhar.model import ce_kernel

    if ctx.handed_over:
        raise RuntimeError("mhar loss: a second backward through the fused chunked linear + cross-entropy "
                           "(retain_graph=True): its first backward handed over the gradients it had formed, "
                           "in place; for several backward passes use the reference backend "
                           "(MHAR_LOSS_BACKEND=reference) or the plain loss (chunk_size=0, the trainer's loss_chunk=0)")
    ctx.handed_over = True
    grad_out = grad_out.reshape(1)
    gh = ce_kernel.scale_unless_one_(grad_hidden, grad_out) if ctx.needs_input_grad[0] else None
    gw = ce_kernel.scale_unless_one_(grad_weight, grad_out) if ctx.needs_input_grad[1] else None
    return gh, gw


def _reference_forward(hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int, z_loss: float,
                       ignore_index: int):
    """Plain PyTorch, fp32 softmax statistics: (mean loss, grad_hidden, grad_weight)."""
    n = hidden.shape[0]
    valid = (targets != ignore_index)
    count = valid.sum().clamp(min=1)
    needs_grad = hidden.requires_grad or weight.requires_grad
    grad_hidden = torch.empty_like(hidden) if needs_grad else None
    grad_weight = torch.zeros(weight.shape, dtype=torch.promote_types(weight.dtype, torch.float32),
                              device=weight.device) if needs_grad else None
    acc = torch.promote_types(hidden.dtype, torch.float32)  # fp32 math (fp64 stays fp64)
    total = torch.zeros((), dtype=acc, device=hidden.device)
    for start in range(0, n, chunk_size):
        h = hidden[start:start + chunk_size]
        t = targets[start:start + chunk_size]
        v = valid[start:start + chunk_size]
        logits = (h @ weight.t()).to(acc)
        lse = torch.logsumexp(logits, -1)
        safe_t = torch.where(v, t, torch.zeros_like(t))
        target_logit = logits.gather(1, safe_t[:, None]).squeeze(1)
        loss = (lse - target_logit) + z_loss * lse.square()
        total += (loss * v).sum()
        if needs_grad:
            # d/dlogits of (lse - z_t + z_loss lse^2) = softmax * (1 + 2 z_loss lse) - onehot
            g = torch.softmax(logits, -1) * (1 + 2 * z_loss * lse)[:, None]
            g[torch.arange(g.shape[0], device=g.device), safe_t] -= 1
            g *= (v / count)[:, None]
            g = g.to(h.dtype)
            grad_hidden[start:start + chunk_size] = g @ weight
            grad_weight += (g.t() @ h).to(grad_weight.dtype)
    return total / count, grad_hidden, grad_weight


def _fused_forward(hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int, z_loss: float,
                   ignore_index: int, need_gh: bool, need_gw: bool):
    """Matmul in the compute dtype + Triton CE kernel in place + two matmuls per chunk."""
    from mhar.model import ce_kernel

    n, dev = hidden.shape[0], hidden.device
    cdt = _compute_dtype(hidden, weight)
    with torch.autocast(dev.type, enabled=False):
        h_all = hidden.to(cdt)
        w = weight.to(cdt)  # once per call, not per chunk
        targets = targets.contiguous()
        count = (targets != ignore_index).sum().clamp(min=1)
        inv_count = (1.0 / count.to(torch.float32)).reshape(1)
        loss_rows = torch.empty(n, dtype=torch.float32, device=dev)
        lse_rows = torch.empty(n, dtype=torch.float32, device=dev)
        grad_hidden = torch.empty_like(hidden) if need_gh else None
        grad_weight = None
        acc = None
        if need_gw:
            grad_weight = torch.empty(weight.shape, dtype=torch.promote_types(weight.dtype, torch.float32),
                                      device=dev)
            if n == 0:
                grad_weight.zero_()  # no chunk writes it
            acc = _Accumulator(grad_weight, cdt)
        rows_max = min(chunk_size, n)
        buf = torch.empty(rows_max, weight.shape[0], dtype=cdt, device=dev)
        one_pass = ce_kernel.ONE_PASS
        row_scale = torch.empty(n, dtype=torch.float32, device=dev) if one_pass else None
        h_scaled = torch.empty(rows_max, hidden.shape[1], dtype=cdt, device=dev) if one_pass and need_gw else None
        for start in range(0, n, chunk_size):
            end = min(start + chunk_size, n)
            h = h_all[start:end]
            logits = buf[:end - start]
            torch.mm(h, w.t(), out=logits)
            out = dict(loss_out=loss_rows[start:end], lse_out=lse_rows[start:end], write_grad=need_gh or need_gw)
            if one_pass:
                ce_kernel.cross_entropy_scaled_grad_(logits, targets[start:end], inv_count, z_loss, ignore_index,
                                                     row_scale_out=row_scale[start:end], **out)
                scale = row_scale[start:end, None]  # d(mean loss)/d logits = scale * logits now
            else:
                ce_kernel.cross_entropy_grad_(logits, targets[start:end], inv_count, z_loss, ignore_index, **out)
                scale = None  # logits now hold d(mean loss)/d logits themselves
            g = logits
            if need_gh:
                gh = grad_hidden[start:end]
                if gh.dtype == cdt:
                    torch.mm(g, w, out=gh)
                else:
                    gh.copy_(g @ w)
                if scale is not None:
                    gh.mul_(scale)
            if need_gw:
                if scale is not None:
                    h = torch.mul(h, scale, out=h_scaled[:end - start])
                acc.add(g, h)
        total = loss_rows.sum() / count
    return total.to(torch.promote_types(hidden.dtype, torch.float32)), grad_hidden, grad_weight


def linear_cross_entropy(hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int = 4096,
                         z_loss: float = 0.0, ignore_index: int = -100,
                         tied: TiedHeadGradient | None = None) -> Tensor:
    """Mean of CE(hidden @ weight.T, targets) (+ z_loss * logsumexp^2) over valid targets.
    ``hidden`` (n, d), ``targets`` (n,). ``chunk_size <= 0`` uses the plain path.
    ``tied``: the one given to :func:`tied_embedding` for the same weight (chunked paths)."""
    if chunk_size <= 0:
        logits = F.linear(hidden, weight).to(torch.promote_types(hidden.dtype, torch.float32))
        valid = targets != ignore_index
        lse = torch.logsumexp(logits, -1)
        ce = F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="none")
        return ((ce + z_loss * lse.square()) * valid).sum() / valid.sum().clamp(min=1)
    if _use_fused(hidden, weight):
        return _fused_apply(hidden, weight, targets, chunk_size, z_loss, ignore_index, tied)
    return ChunkedLinearCrossEntropy.apply(hidden, weight, targets, chunk_size, z_loss, ignore_index, False, tied)


@torch.compiler.disable
def _fused_apply(hidden, weight, targets, chunk_size, z_loss, ignore_index, tied):
    # opaque to torch.compile (the trainer may compile the loss module): the Triton
    # launch, the in-place chunk and the one-time cuBLAS probe run eagerly
    return ChunkedLinearCrossEntropy.apply(hidden, weight, targets, chunk_size, z_loss, ignore_index, True, tied)
