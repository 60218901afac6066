"""Low-precision copies of the weights, kept by the optimiser (issue 6).

Under bf16 autocast every linear layer casts its fp32 weight to bf16 where it is used:
in the forward, and again in the backward (inductor recomputes the cast rather than
keep it). That reads 8 bytes and writes 4 per weight a step, in 168 / 336 / 504 small
kernels at the paper's 100M / 350M / 1B (0.36 / 1.74 / 3.24 ms a step on an H200,
bench/results/step_h200.md, session 26), and the loss casts the LM head once more.

:class:`LowpCopies` gives each linear layer (:class:`mhar.model.layers.Linear`) and the
decoder's output weight a copy in the autocast dtype, as a buffer that is not saved
(``weight_lowp``, ``output_weight_lowp``). Under autocast to that dtype they use the copy
in place of the cast; the gradient still goes to the fp32 weight, cast back as
autocast's cast passes it. :class:`mhar.train.adamw_kernel.TritonAdamW` writes each copy
with the fp32 update (2 bytes a weight a step, no launch of its own).

A copy is only as good as its last write. Each is tagged with its weight's version
counter and address when written; :meth:`LowpCopies.refresh` re-casts any whose weight
changed otherwise (a loaded checkpoint, torch's optimiser, user code: these move the
version, the Triton kernel does not). The trainer refreshes before every step and every
evaluation; an eager forward also checks the tag and falls back to the cast for a stale
copy. A compiled region or a CUDA graph cannot check, so code that changes weights
between steps must refresh (or :meth:`LowpCopies.release` the copies).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _tag(weight: Tensor) -> tuple[int, int]:
    return weight._version, weight.data_ptr()


class _UseCopy(torch.autograd.Function):
    """The copy forward, the gradient to the fp32 weight (as autocast's cast passes it)."""

    @staticmethod
    def forward(ctx, weight: Tensor, copy: Tensor) -> Tensor:
        ctx.weight_dtype = weight.dtype
        return copy.view_as(copy)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad.to(ctx.weight_dtype), None


def lowp_weight(weight: Tensor, copy: Tensor | None, tag: tuple[int, int] | None) -> Tensor:
    """The weight to multiply by: ``copy`` (standing in for ``weight``) where autocast is on
    for its device with its dtype and, outside torch.compile, ``tag`` says it is current;
    ``weight`` itself otherwise."""
    if copy is None:
        return weight
    dev = copy.device.type
    if not (torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev) == copy.dtype):
        return weight
    if not torch.compiler.is_compiling() and tag != _tag(weight):
        return weight  # changed since the copy was written: the cast, as without a copy
    return _UseCopy.apply(weight, copy)


class LowpCopies:
    """The copies of one model's weights in ``dtype``: attached on construction, kept
    current by :meth:`refresh` and the optimiser, removed by :meth:`release`.

    Attaches to every module with a ``weight_lowp`` slot (:class:`mhar.model.layers.Linear`)
    and to a model with an ``output_weight_lowp`` slot (:class:`mhar.model.Decoder`)."""

    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.bfloat16):
        self.dtype = dtype
        # (module, slot, weight): the copy is module.<slot>, its tag module._<slot>_tag
        self.slots: list[tuple[nn.Module, str, Tensor]] = []
        for module in model.modules():
            if "weight_lowp" in module._buffers:
                self.slots.append((module, "weight_lowp", module.weight))
        if "output_weight_lowp" in model._buffers:
            self.slots.append((model, "output_weight_lowp", model.output_weight))
        with torch.no_grad():
            for module, slot, weight in self.slots:
                setattr(module, slot, torch.empty_like(weight, dtype=dtype, memory_format=torch.contiguous_format))
                setattr(module, f"_{slot}_tag", None)
        self.refresh()

    def refresh(self) -> int:
        """Re-cast every copy whose weight changed since its last write; returns how many."""
        stale = 0
        with torch.no_grad():
            for module, slot, weight in self.slots:
                tag = _tag(weight)
                if getattr(module, f"_{slot}_tag") != tag:
                    getattr(module, slot).copy_(weight)
                    setattr(module, f"_{slot}_tag", tag)
                    stale += 1
        return stale

    def by_weight(self) -> dict[Tensor, Tensor]:
        """weight -> its copy (for the optimiser, which writes the copy with the weight)."""
        return {weight: getattr(module, slot) for module, slot, weight in self.slots}

    def release(self) -> None:
        """Remove the copies: the layers cast their weights again."""
        for module, slot, _ in self.slots:
            setattr(module, slot, None)
            setattr(module, f"_{slot}_tag", None)
        self.slots = []


__all__ = ["LowpCopies", "lowp_weight"]
