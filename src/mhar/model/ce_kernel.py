"""Fused cross-entropy over one logits chunk, gradient written in place (Triton).

Two kernels take a ``(rows, V)`` logits chunk (bf16/fp16 on the GPU, any float dtype
under ``TRITON_INTERPRET=1``) and the rows' targets, and write each row's loss
``lse - z_target + z_loss * lse^2`` (0 for ignored rows) and its log-sum-exp, both fp32.
With ``g = d(loss_sum / count) / d logits = (softmax * (1 + 2 z_loss lse) -
onehot(target)) * valid / count``:

* :func:`cross_entropy_scaled_grad_` (the default, one pass) overwrites the chunk with
  ``g / row_scale`` and returns ``row_scale`` (fp32, one per row, 0 for ignored rows),
  so ``g = row_scale[:, None] * chunk``. Each element is read once and written once:
  ``exp(x - b)`` against a per-row reference ``b`` (the first tile's max), which bf16
  holds with its full precision over fp32's range. Should a later tile's max pass ``b``
  by more than ``HEADROOM`` (e^20: the row's sum stays far from overflow), the tiles
  already written are rescaled to the new reference (read and written again, for that row
  only). The target's column, known only at the row's end, is written last with the
  one-hot folded in. The caller scales the products' rows instead of the chunk:
  ``g @ W = row_scale * (chunk @ W)`` and ``g.T @ h = chunk.T @ (row_scale * h)``.
* :func:`cross_entropy_grad_` (two passes, ``MHAR_CE_ONE_PASS=0``) overwrites it with
  ``g`` itself: pass 1 keeps a running max and sum of exponentials, pass 2 re-reads the
  row's tiles, last first (those most likely still in L2), and writes the gradient: two
  reads and one write.

One program per row, looping over vocabulary tiles of ``BLOCK`` columns (the last one
masked, so any ``V`` works). Nothing else of the chunk's size is allocated. ``1 / count``
is read from a device scalar, so the caller never synchronises with the device.

``V`` is a compile-time constant (one compiled kernel per vocabulary size; a model has
one). Under Triton 3.6's interpreter a runtime loop bound (or a program id) needs
:func:`mhar.backends.fix_interpreter_index` with NumPy >= 2.4; this module applies it.

Used by :class:`mhar.model.loss.ChunkedLinearCrossEntropy` on CUDA; the plain PyTorch
path there is the reference these kernels are tested against.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from mhar.backends import fix_interpreter_index

fix_interpreter_index()

# Launch defaults (columns per tile, warps per row program); bench/loss_bench.py sweeps
# alternatives on the GPU. MHAR_CE_BLOCK / MHAR_CE_WARPS override them without an edit.
BLOCK = int(os.environ.get("MHAR_CE_BLOCK", 8192))
NUM_WARPS = int(os.environ.get("MHAR_CE_WARPS", 8))
# PROGRAMS > 0: that many programs loop over the rows instead of one program per row;
# REVERSE: the second pass runs from each row's end. On one 8192 x 151,936 bf16 chunk
# (H200, session 16): reversed 1.800 ms against 1.853 forward (some tiles still in L2);
# 1-4 programs per SM looping over rows 2.14-2.99 ms (too few rows in flight for the
# bandwidth); bench/results/loss_bench_h200.md.
PROGRAMS = int(os.environ.get("MHAR_CE_PROGRAMS", 0))
REVERSE = os.environ.get("MHAR_CE_REVERSE", "1") == "1"
# the one-pass kernel (cross_entropy_scaled_grad_) by default; 0: the two-pass one
ONE_PASS = os.environ.get("MHAR_CE_ONE_PASS", "1") == "1"
# how far (in nats) a row's max may pass its reference before the written tiles are
# rescaled: e^20 per element keeps a 151,936-column sum near 7e13, far from fp32's limit
HEADROOM = 20.0


@triton.jit
def _ce_row(X, stride_x, T, LOSS, LSE, INV_COUNT, ignore_index, z_loss, row,
            V: tl.constexpr, BLOCK: tl.constexpr, WRITE_GRAD: tl.constexpr, REVERSE: tl.constexpr):
    """One row: its loss and lse, and its gradient in place (see the module docstring)."""
    row = tl.cast(row, tl.int64)
    x_row = X + row * stride_x
    t = tl.load(T + row).to(tl.int64)
    valid = t != ignore_index
    cols = tl.arange(0, BLOCK)

    # pass 1: online max and sum of exp, per tile (one exp per element)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([], tl.float32)
    for off in range(0, V, BLOCK):
        c = off + cols
        x = tl.load(x_row + c, mask=c < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        m = m_new
    lse = m + tl.log(s)

    # the target's logit, read before pass 2 overwrites it; an out-of-range target reads NaN
    t_ok = valid & (t >= 0) & (t < V)
    x_t = tl.load(x_row + tl.where(t_ok, t, 0), mask=t_ok, other=float("nan")).to(tl.float32)
    loss = tl.where(valid, lse - x_t + z_loss * lse * lse, 0.0)
    tl.store(LOSS + row, loss)
    tl.store(LSE + row, lse)

    if WRITE_GRAD:
        # pass 2: softmax * (1 + 2 z lse) - onehot, times valid / count. REVERSE: from the
        # row's last tile back, the tiles pass 1 read last first (the likeliest still in L2)
        scale = tl.where(valid, tl.load(INV_COUNT).to(tl.float32), 0.0)
        coef = (1.0 + 2.0 * z_loss * lse) * scale
        n_tiles: tl.constexpr = (V + BLOCK - 1) // BLOCK
        for i in range(0, n_tiles):
            if REVERSE:
                c = (n_tiles - 1 - i) * BLOCK + cols
            else:
                c = i * BLOCK + cols
            cmask = c < V
            x = tl.load(x_row + c, mask=cmask, other=0.0).to(tl.float32)
            g = tl.exp(x - lse) * coef - tl.where(c == t, scale, 0.0)
            tl.store(x_row + c, g.to(X.dtype.element_ty), mask=cmask)


@triton.jit
def _ce_grad_kernel(X, stride_x, T, LOSS, LSE, INV_COUNT, ignore_index, z_loss, n_rows,
                    V: tl.constexpr, BLOCK: tl.constexpr, WRITE_GRAD: tl.constexpr,
                    PERSISTENT: tl.constexpr = False, REVERSE: tl.constexpr = False):
    """One program per row, or (PERSISTENT) fewer programs looping over rows: then fewer
    rows are in flight, so that a row's second pass can find it in L2."""
    if PERSISTENT:
        for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
            _ce_row(X, stride_x, T, LOSS, LSE, INV_COUNT, ignore_index, z_loss, row, V, BLOCK, WRITE_GRAD,
                    REVERSE)
    else:
        _ce_row(X, stride_x, T, LOSS, LSE, INV_COUNT, ignore_index, z_loss, tl.program_id(0), V, BLOCK,
                WRITE_GRAD, REVERSE)


@triton.jit
def _ce_scaled_kernel(X, stride_x, T, LOSS, LSE, ROW_SCALE, INV_COUNT, ignore_index, z_loss,
                      V: tl.constexpr, BLOCK: tl.constexpr, HEADROOM: tl.constexpr, WRITE_GRAD: tl.constexpr):
    """One row per program, one pass over it (see the module docstring)."""
    row = tl.cast(tl.program_id(0), tl.int64)
    x_row = X + row * stride_x
    t = tl.load(T + row).to(tl.int64)
    valid = t != ignore_index
    t_ok = valid & (t >= 0) & (t < V)
    # the target's logit, read before the pass overwrites it; an out-of-range target reads NaN
    x_t = tl.load(x_row + tl.where(t_ok, t, 0), mask=t_ok, other=float("nan")).to(tl.float32)
    cols = tl.arange(0, BLOCK)
    n_tiles: tl.constexpr = (V + BLOCK - 1) // BLOCK

    b = tl.full([], float("-inf"), tl.float32)  # the reference: the first tile sets it
    s = tl.zeros([], tl.float32)  # sum of exp(x - b)
    for i in range(0, n_tiles):
        c = i * BLOCK + cols
        cmask = c < V
        x = tl.load(x_row + c, mask=cmask, other=float("-inf")).to(tl.float32)
        m = tl.max(x, 0)
        if m > b + HEADROOM:
            r = tl.exp(b - m)  # 0 on the first tile
            s = s * r
            if WRITE_GRAD:  # rare after the first tile: the written tiles to the new reference
                tl.debug_barrier()
                for j in range(0, i):
                    cj = j * BLOCK + cols  # whole tiles (only the last one is masked)
                    e_j = tl.load(x_row + cj).to(tl.float32)
                    tl.store(x_row + cj, (e_j * r).to(X.dtype.element_ty))
            b = m
        e = tl.exp(x - b)
        s += tl.sum(e, 0)
        if WRITE_GRAD:
            tl.store(x_row + c, e.to(X.dtype.element_ty), mask=cmask)
    lse = b + tl.log(s)
    # (b - x_t) + log(s) rather than lse - x_t: no rounding of a large lse in the difference
    loss = tl.where(valid, (b - x_t) + tl.log(s) + z_loss * lse * lse, 0.0)
    tl.store(LOSS + row, loss)
    tl.store(LSE + row, lse)

    if WRITE_GRAD:
        # g = exp(x - lse) * (1 + 2 z lse) * scale - onehot * scale = row_scale * exp(x - b)
        # off the target, with row_scale = (1 + 2 z lse) * scale / s; at the target
        # g / row_scale = exp(x_t - b) - s / (1 + 2 z lse), computed here in fp32
        scale = tl.where(valid, tl.load(INV_COUNT).to(tl.float32), 0.0)
        growth = 1.0 + 2.0 * z_loss * lse
        tl.store(ROW_SCALE + row, growth * scale / s)
        tl.debug_barrier()  # after every thread's store of the target's tile
        at_t = tl.exp(x_t - b) - tl.where(growth != 0.0, s / growth, 0.0)
        tl.store(x_row + tl.where(t_ok, t, 0), at_t.to(X.dtype.element_ty), mask=t_ok)


def _check_chunk(logits: Tensor, targets: Tensor, inv_count: Tensor) -> tuple[int, int]:
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError(f"logits must be 2-D with unit column stride; got shape {tuple(logits.shape)}, "
                         f"strides {logits.stride()}")
    rows, V = logits.shape
    if targets.shape != (rows,):
        raise ValueError(f"targets must have shape ({rows},); got {tuple(targets.shape)}")
    if inv_count.numel() != 1:
        raise ValueError("inv_count must hold one element")
    return rows, V


def _row_out(out: Tensor | None, rows: int, device) -> Tensor:
    return torch.empty(rows, dtype=torch.float32, device=device) if out is None else out


def _block(block: int | None, V: int) -> int:
    block = block or min(BLOCK, triton.next_power_of_2(V))
    if block & (block - 1):
        raise ValueError(f"block must be a power of two; got {block}")
    return block


def cross_entropy_scaled_grad_(logits: Tensor, targets: Tensor, inv_count: Tensor, z_loss: float = 0.0,
                               ignore_index: int = -100, loss_out: Tensor | None = None,
                               lse_out: Tensor | None = None, row_scale_out: Tensor | None = None,
                               write_grad: bool = True, block: int | None = None,
                               num_warps: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row (loss, lse, row_scale) in fp32; unless ``write_grad=False``, ``logits`` is
    overwritten with the gradient of ``loss.sum() * inv_count`` divided by ``row_scale``
    per row (the one-pass kernel; see the module docstring; ``row_scale`` is written
    only with the gradient). Arguments as for :func:`cross_entropy_grad_`."""
    rows, V = _check_chunk(logits, targets, inv_count)
    loss_out, lse_out = _row_out(loss_out, rows, logits.device), _row_out(lse_out, rows, logits.device)
    row_scale_out = _row_out(row_scale_out, rows, logits.device)
    if rows == 0:
        return loss_out, lse_out, row_scale_out
    _ce_scaled_kernel[(rows,)](
        logits, logits.stride(0), targets, loss_out, lse_out, row_scale_out, inv_count, int(ignore_index),
        float(z_loss), V=int(V), BLOCK=_block(block, V), HEADROOM=HEADROOM, WRITE_GRAD=bool(write_grad),
        num_warps=num_warps or NUM_WARPS)
    return loss_out, lse_out, row_scale_out


def cross_entropy_grad_(logits: Tensor, targets: Tensor, inv_count: Tensor, z_loss: float = 0.0,
                        ignore_index: int = -100, loss_out: Tensor | None = None, lse_out: Tensor | None = None,
                        write_grad: bool = True, block: int | None = None,
                        num_warps: int | None = None, programs: int | None = None,
                        reverse: bool | None = None) -> tuple[Tensor, Tensor]:
    """Per-row (loss, lse) in fp32; ``logits`` is overwritten with the gradient of
    ``loss.sum() * inv_count`` (see the module docstring) unless ``write_grad=False``.

    ``logits`` (rows, V) with unit column stride; ``targets`` (rows,) integer;
    ``inv_count`` a one-element fp32 tensor on the same device (``1 / valid count`` of
    the whole batch, not just this chunk). ``programs``: that many programs looping over
    the rows (0: one per row); ``reverse``: the second pass from each row's end. Both
    default to the module's PROGRAMS and REVERSE."""
    rows, V = _check_chunk(logits, targets, inv_count)
    loss_out, lse_out = _row_out(loss_out, rows, logits.device), _row_out(lse_out, rows, logits.device)
    if rows == 0:
        return loss_out, lse_out
    block = _block(block, V)
    programs = PROGRAMS if programs is None else programs
    persistent = 0 < programs < rows
    _ce_grad_kernel[(programs if persistent else rows,)](
        logits, logits.stride(0), targets, loss_out, lse_out, inv_count, int(ignore_index), float(z_loss), rows,
        V=int(V), BLOCK=block, WRITE_GRAD=bool(write_grad), PERSISTENT=persistent,
        REVERSE=REVERSE if reverse is None else bool(reverse), num_warps=num_warps or NUM_WARPS)
    return loss_out, lse_out


# ------------------------------------------------------- the backward's upstream scale


@triton.jit
def _scale_unless_one_kernel(X, S, n, BLOCK: tl.constexpr):
    # S rounded to X's dtype first, the product in fp32: what torch's x * s.to(x.dtype) gives
    s = tl.load(S).to(X.dtype.element_ty).to(tl.float32)
    if s != 1.0:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(X + offs, mask=mask)
        tl.store(X + offs, (x.to(tl.float32) * s).to(X.dtype.element_ty), mask=mask)


SCALE_BLOCK = 4096


def scale_unless_one_(x: Tensor, scale: Tensor) -> Tensor:
    """``x *= scale`` in place, ``scale`` a one-element tensor read on the device: where it
    is 1 (rounded to ``x``'s dtype), as for a plain ``loss.backward()``, no element of ``x``
    is read or written. The loss's backward scales the head's gradient, formed in the
    forward, by the loss's upstream gradient: a read and a write of vocab x d fp32 values
    (0.17 ms a step at paper-100m on an H200, session 28), which this skips without the
    host reading ``scale`` (no synchronisation, so CUDA graphs capture it). Equals
    ``x.mul_(scale.to(x.dtype))``."""
    if scale.numel() != 1:
        raise ValueError(f"scale must hold one element; got shape {tuple(scale.shape)}")
    if not x.is_contiguous():  # (the loss's own gradients are contiguous)
        return x.mul_(scale.reshape(()).to(x.dtype))
    n = x.numel()
    if n:
        _scale_unless_one_kernel[(triton.cdiv(n, SCALE_BLOCK),)](x, scale.reshape(1), n, BLOCK=SCALE_BLOCK,
                                                                 num_warps=4)
    return x
