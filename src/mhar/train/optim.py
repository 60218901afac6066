"""AdamW with the paper's settings and an optional no-decay set."""

from __future__ import annotations

import torch
from torch import nn


def no_decay(name: str, param: nn.Parameter) -> bool:
    """The conventional no-decay set: vectors (norm weights, biases, routing queries
    and key norms, gates, mixing scalars) and the embedding."""
    return param.ndim < 2 or name.startswith("embed.") or name.startswith("residual.")


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                    eps: float = 1e-8, decay_all: bool = True) -> torch.optim.AdamW:
    """AdamW over the trainable parameters. ``decay_all`` (the paper's choice) decays
    every parameter; otherwise :func:`no_decay` parameters get none."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if decay_all:
        groups = [{"params": [p for _, p in params], "weight_decay": weight_decay}]
    else:
        groups = [{"params": [p for n, p in params if not no_decay(n, p)], "weight_decay": weight_decay},
                  {"params": [p for n, p in params if no_decay(n, p)], "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
    # the fused CUDA kernel (one launch for all parameters) where every parameter is a
    # plain CUDA tensor; FSDP2's sharded DTensors and the CPU keep the default
    fused = all(p.is_cuda and type(p.data) is torch.Tensor for _, p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)


def is_fused(optimizer: torch.optim.Optimizer) -> bool:
    """Every parameter group steps through the fused kernel (the setting is per group)."""
    return all(group.get("fused") for group in optimizer.param_groups)


def clip_divisor(norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """What clipping to ``max_norm`` divides every gradient by: max(1, norm / max_norm)."""
    return torch.clamp(norm.float() / max_norm, min=1.0)


def fused_step(optimizer: torch.optim.Optimizer, grad_divisor: torch.Tensor | None) -> None:
    """A fused AdamW step on the gradients divided by ``grad_divisor``, in its kernel as it
    reads them (the ``grad_scale`` attribute through which ``torch.amp.GradScaler`` unscales
    for fused optimisers): the clip without a read and write of every gradient of its
    own. The gradients are left divided, as ``clip_grad_norm_`` leaves them."""
    if grad_divisor is None:
        optimizer.step()
        return
    optimizer.grad_scale = grad_divisor
    try:
        optimizer.step()
    finally:
        del optimizer.grad_scale


def clip_and_step(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip the gradients to ``max_norm`` and step; returns the norm before clipping. A fused
    AdamW takes the clip inside its step (:func:`fused_step`)."""
    if not is_fused(optimizer):
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        optimizer.step()
        return norm
    norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    fused_step(optimizer, clip_divisor(norm, max_norm))
    return norm
