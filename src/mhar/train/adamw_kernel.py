"""AdamW with the gradient clip folded in: one Triton kernel for every parameter.

A step's optimiser phase with torch is ``clip_grad_norm_`` then the fused AdamW. The
clip reads every gradient for the norm, then reads and writes it again to scale it;
AdamW reads the parameter, gradient and both moments and writes three of them back: ten
fp32 passes over the parameters. Session 7 measured the phase at 66-76% of that floor on
an H200 (bench/results/step_h200.md), and folding the clip's scale into torch's fused
kernel saved nothing, because that kernel writes the scaled gradients back. Here the
kernel multiplies each gradient by the clip's scale as it reads it and never writes it:
the norm's read and the update's seven passes, eight in all.

:class:`TritonAdamW` is ``torch.optim.AdamW`` (same hyperparameters, state names and
``state_dict``, so checkpoints move between the two) whose ``step(grad_scale=...)``
runs this kernel when every parameter of a group is a contiguous fp32 CUDA tensor (or
on the CPU under ``TRITON_INTERPRET=1``, for the tests), and torch's own step
otherwise. The trainer uses it with ``adamw=triton``, which ``adamw=auto`` (the default)
picks on CUDA in one process or under DDP (not FSDP2, whose parameters are DTensors).

Layout: each tensor is cut into chunks of ``BLOCK`` elements. A program takes one chunk,
found through a chunk table (tensor index, start), and reads the tensor's data pointers
(parameter, gradient, first and second moment) from tables, as the routing kernels do.
The update is torch's: ``p *= 1 - lr wd``; ``m += (1 - b1)(g - m)``;
``v = b2 v + (1 - b2) g^2``; ``p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)``.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from mhar.backends import fix_interpreter_index

fix_interpreter_index()

# Elements per program and warps: 8 elements a thread. With 16 (4096 / 8 warps, session
# 9) triton 3.6 took 166 registers, one program per SM, and the kernel ran at half the
# speed of torch's fused AdamW on the H200 (bench/results/session10/).
BLOCK = 1024
WARPS = 4


@triton.jit
def _update(p_ptr, g_ptr, m_ptr, v_ptr, offs, mask, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps,
            step_size, bc2_sqrt, grad_scale, MASKED: tl.constexpr):
    if MASKED:
        g = tl.load(g_ptr + offs, mask=mask, other=0.0)
        m = tl.load(m_ptr + offs, mask=mask, other=0.0)
        v = tl.load(v_ptr + offs, mask=mask, other=0.0)
        p = tl.load(p_ptr + offs, mask=mask, other=0.0)
    else:
        g = tl.load(g_ptr + offs)
        m = tl.load(m_ptr + offs)
        v = tl.load(v_ptr + offs)
        p = tl.load(p_ptr + offs)
    g = g * grad_scale
    p = p * decay
    m = m + one_minus_beta1 * (g - m)
    v = beta2 * v + one_minus_beta2 * g * g
    p = p - step_size * m / (tl.sqrt(v) / bc2_sqrt + eps)
    if MASKED:
        tl.store(p_ptr + offs, p, mask=mask)
        tl.store(m_ptr + offs, m, mask=mask)
        tl.store(v_ptr + offs, v, mask=mask)
    else:
        tl.store(p_ptr + offs, p)
        tl.store(m_ptr + offs, m)
        tl.store(v_ptr + offs, v)


@triton.jit
def _adamw_kernel(CHUNK_T, CHUNK_S, P, G, M, V, NUMEL, SCALE, decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
                  eps, step_size, bc2_sqrt, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    """One chunk of BLOCK elements of one tensor. A chunk that the tensor fills takes the
    unmasked path: with the start a known multiple of BLOCK and no mask, the loads and
    stores are 16-byte vectors (a mask against a size read from memory would make them
    4-byte ones). SCALE: the gradients' multiplier, a device scalar (no host sync to
    form it); NaN skips the update (the caller found the loss or the norm not finite
    without waiting for the device). The other factors are formed on the host in
    double, as torch does."""
    pid = tl.program_id(0)
    i = tl.load(CHUNK_T + pid)
    start = tl.multiple_of(tl.load(CHUNK_S + pid), BLOCK)
    n = tl.load(NUMEL + i)
    offs = start + tl.arange(0, BLOCK)
    f32 = tl.pointer_type(tl.float32)
    p_ptr = tl.multiple_of(tl.load(P + i).to(f32), ALIGN)
    g_ptr = tl.multiple_of(tl.load(G + i).to(f32), ALIGN)
    m_ptr = tl.multiple_of(tl.load(M + i).to(f32), ALIGN)
    v_ptr = tl.multiple_of(tl.load(V + i).to(f32), ALIGN)
    scale = tl.load(SCALE)
    if scale != scale:  # NaN: no update
        return
    if start + BLOCK <= n:
        _update(p_ptr, g_ptr, m_ptr, v_ptr, offs, None, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps,
                step_size, bc2_sqrt, scale, False)
    else:
        _update(p_ptr, g_ptr, m_ptr, v_ptr, offs, offs < n, decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
                eps, step_size, bc2_sqrt, scale, True)


def clip_scale(norm: Tensor, max_norm: float) -> Tensor:
    """``clip_grad_norm_``'s multiplier for gradients of total norm ``norm``, left on the
    device: ``min(1, max_norm / (norm + 1e-6))``."""
    return torch.clamp(max_norm / (norm + 1e-6), max=1.0)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _table(values, device, dtype=torch.int64) -> Tensor:
    t = torch.tensor(values, dtype=dtype)
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t


class TritonAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose step is one Triton kernel per parameter group (per
    step count within it), with the gradient clip's scale folded in:
    ``step(grad_scale=s)`` updates as if every gradient had been multiplied by ``s``,
    without writing the gradients. Falls back to torch's step (after scaling the
    gradients) where the kernel does not apply: parameters that are not contiguous
    fp32 CUDA tensors, sparse gradients, ``amsgrad`` or ``maximize``."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self._chunks: dict = {}  # (device, numels) -> chunk tensor index, chunk start and numel tables
        self._ptr_tables: dict = {}  # (device, data pointers) -> the four pointer tables
        # per step not yet rewound (the last two), the parameters whose count its kernel advanced
        self._stepped: list[list[Tensor]] = []

    def __setstate__(self, state: dict) -> None:  # copies and unpickled optimisers: a fresh cache
        super().__setstate__(state)
        self._chunks, self._ptr_tables, self._stepped = {}, {}, []

    def _kernel_applies(self, params: list[Tensor]) -> bool:
        def flat(t: Tensor, p: Tensor) -> bool:
            return type(t) is torch.Tensor and t.dtype == torch.float32 and t.is_contiguous() and t.device == p.device

        def ok(p: Tensor) -> bool:
            on_device = p.device == params[0].device and (p.is_cuda or (_interpreting() and p.device.type == "cpu"))
            moments = [self.state[p][k] for k in ("exp_avg", "exp_avg_sq") if k in self.state[p]]
            return (on_device and flat(p.data, p) and not p.grad.is_sparse and flat(p.grad, p)
                    and all(flat(m, p) for m in moments))
        return all(ok(p) for p in params)

    @torch.no_grad()
    def step(self, closure=None, grad_scale: float | Tensor = 1.0):
        """grad_scale: what to multiply the gradients by (the clip's scale), a number or a
        one-element tensor (left on the device, so that forming it needs no host sync).
        A NaN scale skips the update; :meth:`rewind_step` then takes back the step count."""
        stepped: list[Tensor] = []
        self._stepped = [*self._stepped[-1:], stepped]  # a trainer may queue one step ahead of its checks
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        fallback = []
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if group["amsgrad"] or group["maximize"] or not self._kernel_applies(params):
                fallback.append(group)
                continue
            by_step: dict[float, list[Tensor]] = {}
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                elif state["step"].device.type != "cpu":  # from torch's fused AdamW: one read, not one a step
                    state["step"] = state["step"].float().cpu()
                state["step"] += 1
                stepped.append(p)
                by_step.setdefault(float(state["step"]), []).append(p)
            for step, ps in by_step.items():
                self._launch(ps, group, step, grad_scale)
        if fallback:
            self._torch_step(fallback, grad_scale)
        return loss

    def _launch(self, params: list[Tensor], group: dict, step: float, grad_scale: float | Tensor) -> None:
        dev = params[0].device
        b1, b2 = group["betas"]
        numels = tuple(p.numel() for p in params)
        key = (dev, numels)
        if key not in self._chunks:
            if len(self._chunks) >= 16:  # parameter sets that change from step to step: keep it bounded
                self._chunks.clear()
            chunk_t, chunk_s = [], []
            for i, n in enumerate(numels):
                starts = range(0, n, BLOCK)
                chunk_t += [i] * len(starts)
                chunk_s += list(starts)
            self._chunks[key] = (_table(chunk_t, dev, torch.int32), _table(chunk_s, dev), _table(list(numels), dev))
        chunk_t, chunk_s, numel = self._chunks[key]
        tensors = [params, [p.grad for p in params], [self.state[p]["exp_avg"] for p in params],
                   [self.state[p]["exp_avg_sq"] for p in params]]
        ptrs = tuple(tuple(t.data_ptr() for t in ts) for ts in tensors)
        align = 16 if all(v % 16 == 0 for row in ptrs for v in row) else 1
        # The pointer tables, cached by their contents: a training step's tensors keep their
        # addresses, so the four pinned host buffers and copies are made once. (At 350M on
        # the H200, before this cache, a step measured 9.6 ms as called against 3.6 ms on
        # the device alone, bench/results/session10/; how much of the host's share was these
        # tables is not measured.)
        if (dev, ptrs) not in self._ptr_tables:
            if len(self._ptr_tables) >= 16:
                self._ptr_tables.clear()
            self._ptr_tables[(dev, ptrs)] = tuple(_table(list(row), dev) for row in ptrs)
        p_tab, g_tab, m_tab, v_tab = self._ptr_tables[(dev, ptrs)]
        scale = (grad_scale.reshape(1).to(dev, torch.float32) if isinstance(grad_scale, Tensor)
                 else torch.full((1,), float(grad_scale), dtype=torch.float32, device=dev))
        lr = float(group["lr"])
        _adamw_kernel[(chunk_t.numel(),)](chunk_t, chunk_s, p_tab, g_tab, m_tab, v_tab, numel, scale,
                                          1.0 - lr * float(group["weight_decay"]), b1, 1.0 - b1, b2, 1.0 - b2,
                                          group["eps"], lr / (1 - b1 ** step), (1 - b2 ** step) ** 0.5,
                                          BLOCK=BLOCK, ALIGN=align, num_warps=WARPS)

    def rewind_step(self) -> None:
        """Take back the last step's count where a NaN scale skipped its update (parameters,
        moments and counts are then as before that step). Called again, the step before
        it (a trainer that queued one step ahead of its checks skipped both)."""
        for p in (self._stepped.pop() if self._stepped else []):
            self.state[p]["step"] -= 1

    def _torch_step(self, groups: list[dict], grad_scale: float | Tensor) -> None:
        """torch's AdamW step for these groups only, the gradients scaled first (none for
        a NaN scale, as the kernel: the fallback's one host sync)."""
        if bool(torch.isnan(torch.as_tensor(grad_scale)).any()):
            return
        grads = [p.grad for g in groups for p in g["params"] if p.grad is not None]
        if grads and (isinstance(grad_scale, Tensor) or grad_scale != 1.0):
            if isinstance(grad_scale, Tensor):  # fp32: not rounded to the first gradient's dtype for all
                grad_scale = grad_scale.reshape(()).to(grads[0].device, torch.float32)
            torch._foreach_mul_(grads, grad_scale)
        # AdamW's step without the hook wrapper torch adds to the class (this class's own
        # step already ran the optimiser hooks once)
        step = torch.optim.AdamW.step
        step = step.__wrapped__ if getattr(step, "hooked", False) else step
        kept, self.param_groups = self.param_groups, groups
        try:
            step(self)
        finally:
            self.param_groups = kept
