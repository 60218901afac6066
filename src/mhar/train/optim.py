"""AdamW with the paper's settings and an optional no-decay set."""

from __future__ import annotations

import torch
from torch import nn


def no_decay(name: str, param: nn.Parameter) -> bool:
    """The conventional no-decay set: vectors (norm weights, biases, routing queries
    and key norms, gates, mixing scalars) and the embedding."""
    return param.ndim < 2 or name.startswith("embed.") or name.startswith("residual.")


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                    eps: float = 1e-8, decay_all: bool = True, impl: str = "torch") -> torch.optim.AdamW:
    """AdamW over the trainable parameters. ``decay_all`` (the paper's choice) decays
    every parameter; otherwise :func:`no_decay` parameters get none. ``impl``: "torch"
    (torch's AdamW, fused on CUDA) or "triton" (:class:`mhar.train.adamw_kernel.TritonAdamW`,
    whose step takes the gradient clip's scale)."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if decay_all:
        groups = [{"params": [p for _, p in params], "weight_decay": weight_decay}]
    else:
        groups = [{"params": [p for n, p in params if not no_decay(n, p)], "weight_decay": weight_decay},
                  {"params": [p for n, p in params if no_decay(n, p)], "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
    if impl == "triton":
        from mhar.train.adamw_kernel import TritonAdamW

        return TritonAdamW(groups, lr=lr, betas=betas, eps=eps)
    # the fused CUDA kernel (one launch for all parameters) where every parameter is a
    # plain CUDA tensor; FSDP2's sharded DTensors and the CPU keep the default
    fused = all(p.is_cuda and type(p.data) is torch.Tensor for _, p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)
