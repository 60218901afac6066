"""Linear + cross-entropy without materialising the (tokens x vocab) logits.

With a 151,936-entry vocabulary the logits dominate activation memory (16K tokens:
10 GB in fp32). :class:`ChunkedLinearCrossEntropy` computes the LM head and the loss
chunk by chunk and, in the same pass, the gradients for the hidden states and the
head weight (the approach of Liger-Kernel's fused linear cross-entropy, written here
in plain PyTorch so it runs everywhere). Backward only scales the stored gradients.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int, z_loss: float,
                ignore_index: int):
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
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return total / count

    @staticmethod
    def backward(ctx, grad_out):
        grad_hidden, grad_weight = ctx.saved_tensors
        gh = grad_hidden * grad_out.to(grad_hidden.dtype) if ctx.needs_input_grad[0] else None
        gw = (grad_weight * grad_out).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None
        return gh, gw, None, None, None, None


def linear_cross_entropy(hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int = 4096,
                         z_loss: float = 0.0, ignore_index: int = -100) -> Tensor:
    """Mean of CE(hidden @ weight.T, targets) (+ z_loss * logsumexp^2) over valid targets.
    ``hidden`` (n, d), ``targets`` (n,). ``chunk_size <= 0`` uses the plain path."""
    if chunk_size <= 0:
        logits = F.linear(hidden, weight).to(torch.promote_types(hidden.dtype, torch.float32))
        valid = targets != ignore_index
        lse = torch.logsumexp(logits, -1)
        ce = F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="none")
        return ((ce + z_loss * lse.square()) * valid).sum() / valid.sum().clamp(min=1)
    return ChunkedLinearCrossEntropy.apply(hidden, weight, targets, chunk_size, z_loss, ignore_index)
