"""The depth read as one torch custom op with interchangeable backends.

Three ops are registered under the ``mhar`` namespace:

* ``mhar::route(sources, query, norm_weight, heads, eps) -> (y, lse)``: one routing
  site, normalised read ``y`` (sources' shape and dtype) and the per-head
  log-sum-exp ``lse`` (M, H) (non-differentiable; saved for backward).
* ``mhar::route_partial(sources, queries, norm_weights, heads, eps) -> (m, l, o)``:
  the phase-1 read of S queries (``m`` non-differentiable).
* ``mhar::route_backward(...) -> [grad_queries, grad_norm_weights, *grad_sources]``:
  shared by both, recomputes the norm and the softmax.

Each has a fake implementation and ``route``/``route_partial`` have autograd, so
``torch.compile(fullgraph=True)``, activation checkpointing and FSDP2 see single ops.
Inside, the backend is chosen at run time: Triton on CUDA tensors (or anywhere when
forced, e.g. on the CPU under ``TRITON_INTERPRET=1``), the reference otherwise.
Force one with :func:`set_backend` or ``MHAR_ROUTING_BACKEND=reference|triton|auto``.

Saved for backward: the sources (by reference), queries, norm weights and one
per-head statistic (``m`` for a partial read; ``lse`` for ``route``, which also
keeps its own output ``y``, the tensor the next sublayer holds anyway, to form
``g . y`` per head).
"""

from __future__ import annotations

import json
import os
import warnings
from collections import OrderedDict
from types import SimpleNamespace
from typing import NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from mhar.backends import KERNEL_DTYPES, BackendChoice
from mhar.routing import occupancy
from mhar.routing import reference as _ref
from mhar.routing.reference import KEY_NORM_EPS, Partial, check_heads

_BACKEND = BackendChoice("routing", "MHAR_ROUTING_BACKEND", "mhar.routing.triton_kernels")


def set_backend(name: str | None) -> None:
    """Choose the routing backend: "auto" (Triton on CUDA, reference elsewhere),
    "reference" or "triton" (Triton everywhere; on the CPU only under
    ``TRITON_INTERPRET=1``). ``None`` returns to ``MHAR_ROUTING_BACKEND`` (default auto)."""
    _BACKEND.set(name)


def get_backend() -> str:
    return _BACKEND.get()


def _use_triton(t: Tensor) -> bool:
    return _BACKEND.use_triton(t.is_cuda, t.dtype)


# Tests: fill outputs with NaN before the kernels write them (catches unwritten
# elements). Read once, at import, instead of an environment lookup per allocation.
POISON = os.environ.get("MHAR_ROUTING_POISON", "0") not in ("", "0")


def _new(shape, dtype, device) -> Tensor:
    if POISON:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


# ---------------------------------------------------------------- Triton launchers

_PTR_CACHE: OrderedDict = OrderedDict()
# Tables made while a CUDA graph is being captured. The capture records the table's
# host-to-device copy as a graph node that reads the pinned host buffer again on every
# replay, and bakes in the device table's address, so both must outlive the graph and
# never be reused: such tables bypass the cache (whose entries are evicted and freed)
# and wait here until the graph's owner takes them (:func:`take_captured_tables`).
# Within the captures until then a table is made once per pointer list (a backward's
# sources are its forward's: at 1B, 73 copy nodes fewer per step).
_CAPTURED_TABLES: list[tuple[Tensor, Tensor]] = []
_CAPTURED_BY_PTRS: dict = {}


def _ptr_table(tensors: Sequence[Tensor]) -> tuple[Tensor, int]:
    """int64 table of data pointers on the tensors' device, and their alignment: 16 when
    every tensor starts on a 16-byte boundary (the kernels may then use 16-byte vector
    loads), else 1. Cached by pointer values (the table's content is exactly its key, so
    reuse is always valid), except under a CUDA graph capture (see ``_CAPTURED_TABLES``)."""
    dev = tensors[0].device
    ptrs = tuple(t.data_ptr() for t in tensors)
    key = (dev, ptrs)
    if dev.type == "cuda" and torch.cuda.is_current_stream_capturing():
        hit = _CAPTURED_BY_PTRS.get(key)
        if hit is None:
            host = torch.tensor(ptrs, dtype=torch.int64).pin_memory()
            tab = host.to(dev, non_blocking=True)
            _CAPTURED_TABLES.append((host, tab))
            hit = _CAPTURED_BY_PTRS[key] = (tab, _alignment(ptrs))
        return hit
    hit = _PTR_CACHE.get(key)
    if hit is None:
        tab = torch.tensor(ptrs, dtype=torch.int64)
        if dev.type == "cuda":
            tab = tab.pin_memory().to(dev, non_blocking=True)
        hit = _PTR_CACHE[key] = (tab, _alignment(ptrs))
        if len(_PTR_CACHE) > 512:
            _PTR_CACHE.popitem(last=False)
    else:
        _PTR_CACHE.move_to_end(key)
    return hit


def _alignment(ptrs: tuple[int, ...]) -> int:
    return 16 if all(p % 16 == 0 for p in ptrs) else 1


def take_captured_tables() -> list[tuple[Tensor, Tensor]]:
    """The pointer tables (pinned host copy, device copy) made during CUDA graph captures
    since the last call. Whoever owns the graph keeps them for as long as it may replay."""
    taken = list(_CAPTURED_TABLES)
    _CAPTURED_TABLES.clear()
    _CAPTURED_BY_PTRS.clear()
    return taken


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


# Tile configuration: elements per program tile, warps, prefetch depth (tiles in flight
# ahead of the one being reduced) and backward programs per SM. One default for a single
# head and one for several ("bwd_sum_elems", "bwd_sum_warps" and "bwd_sum_maxnreg", when
# set, are the tile, warps and register cap of a backward that adds into running sums);
# CONFIG_TABLE[(padded width, heads > 1)] overrides them (and MHAR_ROUTING_CONFIG adds
# entries from a sweep file);
# TUNE, when not None, overrides everything (the sweep uses that). The values are
# bench/routing.py --tune's picks on an H200 at 9f66467
# (bench/results/history/routing_h200_session3.md): one or two warps per token row, so
# that every reduction stays inside a warp, and no deeper prefetch.
#
# Phase 1 of two-phase (S queries): the forward is ``_fwd_kernel`` with one program per
# query (the S programs of a token tile share its sources in L2). The backward
# ("bwd_twopass", the default) runs two passes that each parallelise over the axis that
# owns their output: ``_bwd_kernel`` with COEF, one program per query (its d(q*g) and per
# source the few coefficients of the source's gradient), then ``_bwd_gather_kernel``,
# one program per token and block of "gather_sources" sources (their gradients from the
# S queries' upstream gradients and the coefficients: matrix products per head, the row
# walked in chunks of "gather_cols" columns; "gather_precision" is its input precision for bf16
# sources: tl.dot's "tf32x3" or "tf32", or "bf16x3", three bf16 products of the operands'
# two bf16 parts (triton_kernels._dot_fp32); fp32 sources always use "ieee"). With
# "bwd_twopass" False, ``_bwd_kernel`` loops over the S queries per source instead: it
# holds a token's S upstream-gradient rows while streaming its sources, is latency-bound,
# and measured 1.6-2x slower in the whole step at 9ca617b and cf14cbd
# (bench/results/routing_h200.md).
# Kernels that held every query in registers (queries-tile, and a token-major gather)
# were slower still and are gone (their code is at 9ca617b).
# The gather's defaults are session 9's whole-step picks (bench/results/routing_h200.md):
# 16 sources, chunks of 128 columns, 4 warps (since session 19 with gather_xdot 70-146
# registers in triton 3.6's offline sm_90 compile, no spills; capped at 1280, see
# CONFIG_TABLE). Its products: single tf32
# ones measured 1.5-1.8 ms faster per whole step at 1280/73 than tf32x3 (about fp32's
# accuracy) for 4x the rounding (session 9). "bf16x3" (errors of a few 2^-16, well under
# the bf16 gradients' own rounding of 2^-8) since session 14: the whole step's kernels at 1280/73
# took 89.1 against 90.5 ms with 8 heads and 92.4 against 93.4 with one, at 1024/49 39.1
# against 39.6 with 8 (bench/results/session14/, run 6); in the interpreter the sources'
# bf16 gradients were within 3.37-3.38e-3 of fp64 against tf32x3's 3.35-3.37e-3
# (session14/interpreter/).
# gather_xdot: with bf16 rows the gather takes -(sum c) x and the running sum as matrix
# products too (diag(-c) x + I prev), so that triton's pipeliner copies their tiles ahead
# like the products' other operands ("gather_stages" stages; two were slower): at 1280/73
# with 8 heads the gather took 17.1 against 18.1 ms per step at the same cap, at 1024/49
# 4.4 against 5.6 (bench/results/session19/, call 2).
# Retimed with coef_parts (session 22, call 3), the whole step's kernels at 1280/73 with 8
# heads: 61.31 ms as shipped; 2 stages 61.55, 4 stages 62.23, 8 warps 65.93, 64 columns
# 66.00, 256 columns 68.79, 32 sources 65.48. At 1024/49: 29.29 as shipped and with 256
# columns, 29.87 with 4 stages.
# Blocks of queries per program for phase 1's forward and COEF pass (each source tile
# read once per block instead of once per query through L2; session 9) measured slower
# in every whole-step row of session 10, up to 2.5x (bench/results/routing_h200.md);
# their code is at 6d5e552.
# coef_parts: with bf16 gradient rows (the gather's EXACT) the COEF pass stores each
# coefficient as its two bf16 parts, (n_tok, H, n_src, 2 SP) bf16 (the same bytes at
# S = 8), and the gather takes them as product operands as they are, where it split them
# at every chunk: the same products and gradients to the bit; at 1280 with 8 heads the
# gather's loop takes 221 SASS instructions per chunk and warp against 401 and 114
# registers against 128 capped (offline, triton 3.6, bench/compile_sm90.py --opcodes).
# In the routing benchmark's whole step at 1280/73 with 8 heads the gather took 13.37
# against 14.61 ms (the step's kernels 61.93 against 63.18), at 1024/49 4.40 against 4.41;
# the 1B training step 285.8 against 286.1 ms (bench/results/session22/, call 1).
# gather_tokens: a read of at most 8 sources takes several tokens per program, as many as
# fill the products' 16 rows, at most this many (triton_kernels._bwd_gather_kernel's TOK;
# 1: a token per program, whose sources padded the rows). One phase-1 read at 1024 with 8
# heads and 6 queries, 16384 tokens (bench/phase1_call.py, fp32 partials), the gather at
# 1 / 2 / 4 / 8: 1 source 0.376 / 0.308 / 0.330 / 0.489 ms, 4 sources 0.431 / 0.372 / 0.362 / 0.362,
# 8 sources 0.465 / 0.417 / 0.416 / 0.416 (bench/results/session36/, call 1).
# gather_tokens_maxnreg: the gather's register cap at that many tokens a program (keys
# 2, 4, ...; absent: uncapped); "gather_maxnreg" is a token at a time's. At 4 tokens the
# gather compiles to 243-253 registers (two 4-warp programs per SM), yet a cap cost time
# with the training step's bf16 rows: at 1024 with 8 heads 4 sources took 0.187 ms capped
# at 96 against 0.164, at 1280 0.238 at 128 against 0.226 uncapped, one head at 1280
# 0.227 at 96 against 0.206 (bench/phase1_call.py --direct-rows, session37/, calls 6-7).
# (Calls 1-4 timed route_partial's fp32 partial, whose gather variant gained from caps;
# training does not take it.)
_PHASE1_BACKWARD = {"bwd_twopass": True, "gather_sources": 16, "gather_cols": 128, "gather_warps": 4,
                    "gather_precision": "bf16x3", "gather_maxnreg": None, "gather_xdot": True,
                    "gather_stages": 3, "coef_parts": True, "gather_tokens": 4, "gather_tokens_maxnreg": {}}
# pad_heads: a head width that is not a power of two as one padded part (see _geometry).
# (Session 10's "fwd_wide_b", a head's second part loaded in the first part's width, was
# slower in the whole step: 131.5 against 118.5 ms at 1280/73 with 8 heads; its code is
# at 1ceaac1.)
#
# fwd_dot: phase 1's forward as ``_fwd_dot_kernel``, every query in one program (each
# source row read once per token, the per-head sums as matrix products), programs
# persistent over tokens, "fwd_dot_progs_per_sm" per SM (registers allow one at 1024 and
# 1280: the whole step at 1024/49 with 8 heads took 39.7 against 40.3 ms with one
# token per program, at 1280/73 90.5 against 91.3; bench/results/session14/), with
# blocks of "dot_sources" sources and "dot_warps" warps. "dot_stages": each program walks
# its (token, block) pairs in one loop that triton's pipeliner runs in this many stages,
# copying each block's tiles into shared memory while the block before is reduced: at
# 1280/73 with 8 heads the forward took 8.2 against 10.7 ms per step with the hand
# prefetch a block ahead that it replaced, the COEF pass 7.9 against 8.8, the whole step's
# routing kernels 64.2 against 67.6 (1024/49: 30.7 against 31.5; bench/results/session20/,
# call 4). "dot_sumsq_products": the key norm's sum of squares
# taken as products too (triton_kernels._sumsq), in the forward and the COEF pass: at 1024
# with 8 heads one phase-1 read's forward and COEF pass took 16-17% less time with it
# and the persistent forward (session 14, run 2); at 1280 the same as elementwise. For
# bf16 sources the products take them as they are and the fp32 operand as two bf16
# parts, two products: within about 2^-17 of fp32 ("bf16x2"). tl.dot's tf32x3 was
# slower (the whole step 121.1 against 113.1 ms with the forward alone, run 1) and its
# fp32 tiles overflow shared memory in the COEF pass; other dtypes keep the per-query
# kernels on a GPU (see _dot_tile). Heads of more than 128 lanes
# (one head of 1024 or 1280) keep ``_fwd_kernel``: triton 3.6 compiles their tiles to local
# memory (thousands of stack bytes, bench/compile_sm90.py --kernels dot). On for several
# heads: at 1280/73 with 8 heads phase 1's forward took 15.8 ms against about 23 (the whole
# step's routing kernels 111.0 against 118.5 ms), and the 1B training step with MHAR went
# from 0.707 to 0.736 of the baseline (bench/results/session11/). With one head the paper
# widths have no head of 128 lanes or fewer, so it is unmeasured there: off.
# coef_dot: the backward's COEF pass the same way (``_coef_dot_kernel``), programs
# persistent over tokens, "coef_dot_progs_per_sm" of them per SM. On for several heads:
# at 1280/73 with 8 heads its calls took 18.0 ms per step, and the whole step's routing
# kernels 99.8 against 112.4 ms; the 1B step with MHAR went to 0.763 of the baseline
# (bench/results/session11/, run 3). Two programs per SM measured the same (99.9 ms).
# (Session 12 fused the gather into this kernel: each block's source gradients formed
# where its coefficients are, no coefficients in memory. At 255 registers one program per
# SM then waits on every chunk's running-sum reads: 48.6 ms per step at 1280/73 with 8
# heads against 17.8 + 22.8 for the COEF pass and the gather apart (bench/results/session12/);
# its code is at f63b16d.)
# coef_split / fwd_split: the COEF pass / the forward with a head per program (grid
# (programs, heads); "*_split_progs_per_sm" programs of "*_split_warps" warps per SM over
# all heads), the sources' key-norm scales read rather than summed over the row: the COEF
# pass takes the forward's, and the forward a stream's KeyScales (route_partial_rows's
# scales=; without one it runs every head and writes them). With all heads in one 8-warp
# program per SM the warps meet at every block's reductions over heads and layout
# conversions; eight one-warp programs per SM run apart. At 1280/73 with 8 heads the COEF
# pass took 8.8 against 15.7 ms per step and the whole step's routing kernels 76.9
# against 82.8 (1024/49: 33.8 against 36.3); then the forward 10.7 against 15.5 ms and the
# whole step 73.1 against 77.2 (1024/49: 32.6 against 33.8); two warps and four programs
# per SM were slower for both. The 1B MHAR step went from 0.805 to 0.825 of the baseline
# (bench/results/session18/, calls 1, 2 and 4). (The next token's gradient rows loaded a
# token ahead measured slower without the split, 18.3 against 15.6 ms, and the same with
# it; its code is at 5c597d3.) "fwd_split_maxnreg" / "coef_split_maxnreg": their register
# caps (None: the compiler's 164-209). At 1024 the forward capped at 168 with 12 programs
# per SM (see CONFIG_TABLE); the COEF pass at 160 or 128 took 1.3-1.9x as long (session 37,
# call 2).
# fwd_dot_min_queries: the fewest queries phase 1's forward takes as products. A chunk of
# one site has nothing to share a source's read with, and ran the product kernel with
# every head in one 8-warp program (the split needs S > 1): in bench/routing.py's whole
# step, whose 2L+1 sites in chunks of 8 leave the final read of every source alone in
# the last chunk, 1.88 ms at 1280/73 with 8 heads against 0.72 of bytes
# (bench/results/session21/, call 1). The per-query kernel reads each source once per
# site anyway. (The routed stream makes that read with ``route``.)
# dot_lane_groups: one head (attnres) takes the product kernels as this many lane groups of
# d / groups lanes, a group where a head would be, with the logits summed over the groups
# (triton_kernels' VH): a head of more than 128 lanes as one tile compiles to local memory,
# so one head of 1024 or 1280 took the per-query kernels for phase 1's forward and COEF
# pass. Needs d divisible by the groups and groups of at least 16 lanes; 0 or 1: off. Its
# own switch for one head (fwd_dot and coef_dot, off for one head, then apply only to
# widths it does not take). The programs hold every group: the split with a head per
# program needs each head's own softmax. In the whole step with one head (session 23,
# call 1, 3 stages, before dot_group_scales): 75.33 ms of kernels at 1280/73 against 85.30
# with the per-query kernels (phase 1's forward 12.8 ms and COEF pass 18.7, against the
# per-query forward and backward's 22.5 and 36.1 that also held phase 2's), 78.06 with 16
# groups; at 1024/49 34.73 against 38.75 (16 groups 35.13). The 1B attnres step went from
# 0.798 of the baseline (session 22) to 0.816 (bench/results/session23/, call 2).
# dot_group_scales: those programs read the sources' key-norm scales, as the split ones do
# (the forward a stream's KeyScales, the COEF pass the forward's; without a KeyScales the
# forward sums squares and writes them), and take their outputs as products of the tiles
# as loaded (triton_kernels' SCALES): no sum of squares and no second, transposed read.
# At 1280/73 with one head 72.15 against 74.48 ms (the COEF pass 16.54 against 17.95, the
# forward 11.18 against 12.73), at 1024/49 34.24 against 34.34 (call 4).
# merge_scales: phase 2 (route_merge with the stream's KeyScales) writes the key-norm scale
# of its newest source, which it computes anyway, into the KeyScales; the next chunk's
# phase 1 then computes only its last site's output's (_key_scales_kernel reads each
# source once: 0.65 ms a step in the 1B MHAR step, bench/results/session21/, call 2).
# In the whole step at 1280/73 with 8 heads, alternating in one process: 60.85 and 60.77
# ms of kernels against 61.53 and 61.39 off; the 1B MHAR step 0.853 of the baseline
# against 0.848 off, one process each (bench/results/session25/, call 1).
# direct_rows: route_partial_rows's sites write their rows' gradients into phase 1's
# buffer (PhaseOneRows); False takes the rows as autograd views, which stacks them (for
# side-by-side timing).
# rows_bf16: with bf16 sources, direct rows keep o in bf16, not fp32 (m and l stay fp32):
# phase 1 writes each site's row and phase 2 (or finalize) reads it once, the largest
# bytes of phase 1's forward after the sources (session 26's floors: at 1024/49 with
# 8 heads 3.3 of its 9.2 GB a step were the fp32 rows, and as many again read back).
# Both kernels still accumulate in fp32; the row is rounded once, to the precision of
# the sources it sums (o / l is a weighted mean of them), and the site's read, rounded to
# bf16 in its turn, carries at most that rounding twice. Routes that are not direct rows
# (route_partial, the reference) keep fp32 partials. On the H200 (bench/results/session33/,
# 8 heads, chunks of 8) the whole step's routing kernels at 512/25, 1024/49 and 1280/73:
# 7.09 / 28.65 / 59.76 ms against 7.30 / 29.10 / 60.78 with fp32 rows; the MHAR step
# 135.1 and 135.8 ms at 350M against 135.9 and 136.9, 283.4 and 283.3 at 1B against
# 283.6 and 283.9, 37.7 at 100M against 37.6 (one process each).
# dot_tokens: the forward reading the key-norm scales (a head per program, or one head's
# lane groups) and the COEF pass with a head per program take several tokens at a time
# for a read of at most 8 sources, as many as fill the products' 16 rows, at most this
# many (triton_kernels._fwd_packed, _coef_packed; 1: a token at a time). One phase-1 read
# at 1024 with 8 heads and 6 queries (bench/phase1_call.py, fp32 partials), 1 against 4:
# the forward 0.238 / 0.180 ms with 1 source, 0.257 / 0.193 with 4, 0.260 / 0.225 with 8; the COEF
# pass 0.274 / 0.224, 0.321 / 0.251, 0.338 / 0.253. With the gather's, the 350M block
# MHAR step ran at 0.947 of the baseline against 0.935 with both off, one process each
# (bench/results/session36/, call 2). coef_tokens: the COEF pass's own cap (4: with the
# training step's bf16 rows a read of 4 sources took 0.103 ms against 0.147 at 2 at 1024
# with 8 heads, 0.145 against 0.181 at 1280; session 37, call 6). dot_group_tokens: the
# same for one head's lane groups' forward (the COEF pass with lane groups takes a token
# at a time): a read of 4 sources took 0.272 ms at 4 against 0.350 a token at a time at
# 1024, 0.326 against 0.398 at 1280; 5 to 8 sources (2 tokens) within 1.5% of a token at
# a time (session 37, calls 6-7, --direct-rows); the attnres-block 350M step 0.936 of the
# baseline against 0.927 with session 36's settings (call 7, with the 1024 picks below).
_PHASE1_DOT = {"fwd_dot": False, "fwd_dot_progs_per_sm": 2, "dot_sources": 16, "dot_warps": 8, "dot_stages": 3,
               "dot_sumsq_products": True,
               "coef_dot": False, "coef_dot_progs_per_sm": 1,
               "coef_split": True, "coef_split_progs_per_sm": 8, "coef_split_warps": 1,
               "fwd_split": True, "fwd_split_progs_per_sm": 8, "fwd_split_warps": 1, "fwd_dot_min_queries": 2,
               "direct_rows": True, "rows_bf16": True, "dot_lane_groups": 8, "dot_group_scales": True, "fwd_dot_stages": None,
               "merge_scales": True, "dot_tokens": 4, "dot_group_tokens": 4, "coef_tokens": 4,
               "fwd_split_maxnreg": None, "coef_split_maxnreg": None, "coef_grads": False,
               "coef_grads_lanes": 64, "coef_grads_w_lo": False, "coef_grads_progs_per_sm": None,
               "coef_grads_maxnreg": None, "coef_grads_stages": None}
# coef_grads: a phase-1 backward whose sources are all a GradientSink's and whose COEF pass
# runs a head per program a token at a time with bf16 rows forms the sources' gradients in
# that pass (``_coef_dot_kernel``'s GRAD), with no coefficients in memory and no gather: it
# reads each source once instead of twice. The key norm's x term needs every head's c, so
# each head adds its share into the source's deferred terms in the sink, and the source's
# next phase-2 read (its last in backward) or else the sink applies them. Session 12's
# fusion, every head in one 8-warp program per SM with the x term in place, was slower
# than the two passes (see above). "coef_grads_lanes": part A's lanes per product of the
# gradients (64: 255 registers and 64 stack bytes at 1024 with one warp, against 104 with
# 128 lanes; offline, triton 3.9). One read with the training step's rows at 1024 with 8
# heads (session 38, call 5): the fused pass 0.542 / 1.170 / 1.831 ms at 9 / 25 / 41
# sources against 0.663 / 1.344 / 2.048 for the COEF pass and the gather; at 1280 it is
# 1.5-1.7x slower than the two (2.459 against 1.678 ms at 17 sources, 7.182 against 4.320
# at 65; 1.35-1.9x with two warps, 3 stages, 32 or 128 lanes), so it was on at 1024 only.
# The 350M step ran mhar at 0.875 of the baseline against 0.864 with it off (call 4, one
# process each), and at 0.876 against 0.873 with the order reversed (call 6).
# Why 1280 lost (session 41): its program took 29,504 bytes of shared memory, and with
# the 1 KB each program reserves 8 do not fit the SM's 228 KB, so the eighth program of
# each SM ran as a second wave (7 per SM: 2.84 against 4.54 ms at 41 sources).
# "coef_grads_w_lo": the gradient product's right operand holds w's two bf16 parts,
# [a | r dz | r dz | 0] by [g ; w_hi ; w_lo ; 0] (True), or w rounded to bf16, [a | r dz] by
# [g ; w_hi] (False): half the operand, which the pipeliner copies per token, and half
# the product. Rounding w costs at most 2^-9 of the r dz w term, the size of the bf16
# rounding of the running sum it is added into: in the interpreter the gradients were
# 0.89% / 1.10% from the two passes' at 160 / 8 and 64 / 4 heads, against 0.91% / 1.09%
# with w's two parts. It takes the pass at 1280 to 23,872 bytes (8 per SM fit; 252
# registers, no stack, with 32-lane pieces, offline on triton 3.6) and at 1024 from 255 to
# 238 registers. One read with the training rows (session 41, call 2), ms:
# - 1024, 9 / 25 / 41 sources: 0.444 / 0.909 / 1.404 against 0.536 / 1.138 / 1.774 with
#   w's two parts (the 350M step, one process each: mhar 0.882 against 0.877);
# - 1280, 17 / 41 / 65 sources, 32-lane pieces: 1.066 / 2.073 / 3.473 against the two
#   passes' 1.660 / 2.623 / 4.300. The 1B step, alternating processes (call 5): mhar
#   0.863 / 0.865 (277.4 / 276.6 ms) against 0.850 / 0.845 (282.2 / 283.7) with the two
#   passes, baselines 239.2-239.8 ms.
# "coef_grads_progs_per_sm", "coef_grads_maxnreg", "coef_grads_stages": the fused pass's own
# programs per SM, register cap and pipeline stages (None: the split COEF pass's
# "coef_split_progs_per_sm" / "coef_split_maxnreg" and "dot_stages"). At 1024 it takes 238
# registers, so 8 one-warp programs fit an SM; capped at 168, 11 fit in 2 stages or 12 in
# one (16 at a cap of 128), but the caps spill (80-304 bytes offline) and every capped
# form was slower: one read at 9 / 25 / 41 sources 0.523-0.911 / 1.173-2.050 /
# 1.827-3.277 ms against 0.443 / 0.917 / 1.411 as built (bench/results/session42/, call
# 1). Left at None. Holding d(q*g) transposed, from a second, transposed load of the
# source tiles, fits 12 programs at a cap of 168 in one stage with no stack (offline,
# triton 3.6, session 53), yet was slower still, 12 or 8 an SM: 0.625-0.817 / 1.509-1.821 /
# 2.308-2.858 ms against 0.442 / 0.919 / 1.419 (bench/results/session54/, call 1); taken out.
# One head (its lane groups) pipelines its COEF pass in 2 stages ("dot_stages") and its
# forward in 3 ("fwd_dot_stages", where set: the forward's own). In the whole step at
# 1280/73, 2 stages for both took 72.15 ms of kernels and 3 for both 71.77: the COEF pass
# 16.54 against 17.34 ms, the forward 11.18 against 9.93; at 1024/49 the COEF pass 7.14
# against 7.62 and the forward 4.58 against 4.24 (bench/results/session23/, call 4).
# fwd_maxnreg / bwd_maxnreg / gather_maxnreg: a register cap per thread for the per-query
# kernels and the gather (triton's maxnreg; None: the compiler's choice), so that more
# programs fit on an SM. At 1280/73 no cap on the per-query kernels measured faster in
# the whole step (bench/results/session13/). At 1024 with 8 heads (session 42, call 3;
# bench/routing.py's whole step at 1024/49, below the power cap): phase 2's
# forward capped at 72 took 2.817 against 2.978 ms a step (89 registers uncapped, 10
# two-warp programs per SM), but the 350M step, which runs at the 700 W cap, measured mhar
# 0.878 and 0.879 with it against 0.887 without; the backward adding into sums capped at
# 168 (12 one-warp programs per SM) took 7.374 against 6.485. Both left uncapped.
_DEFAULTS = {
    False: {"fwd_elems": 1024, "fwd_warps": 1, "fwd_pf": 1, "fwd_maxnreg": None,
            "bwd_elems": 1024, "bwd_warps": 2, "bwd_pf": 1, "bwd_progs_per_sm": 16, "bwd_maxnreg": None,
            "pad_heads": False, **_PHASE1_BACKWARD, **_PHASE1_DOT, "dot_stages": 2, "fwd_dot_stages": 3},
    True: {"fwd_elems": 1024, "fwd_warps": 1, "fwd_pf": 1, "fwd_maxnreg": None,
           "bwd_elems": 1024, "bwd_warps": 2, "bwd_pf": 1, "bwd_progs_per_sm": 16, "bwd_maxnreg": None,
           "pad_heads": False, **_PHASE1_BACKWARD, **_PHASE1_DOT, "fwd_dot": True, "coef_dot": True},
}
# The sweep's picks at the paper widths where they differ from the defaults.
# The phase-1 gather entries are the whole-step picks at e88ebdb (bench/routing.py
# --write-phase1-config; bench/results/routing_h200.md).
# Phase 1 at 1024 with several heads (350M): the forward with a head per program capped
# at 160 registers (164-209 uncapped, by tokens a step), so that twelve one-warp programs
# fit an SM (eight before), in 2 stages; the COEF pass in 2 stages. One read with the
# training step's bf16 rows (bench/phase1_call.py --direct-rows, 6 queries), the forward
# at 4 / 8 / 16 / 41 sources 0.135 / 0.159 / 0.191 / 0.491 ms against 0.150 / 0.184 /
# 0.218 / 0.644 before; the COEF pass at 8 / 16 / 41 sources 0.180 / 0.300 / 0.868 against
# 0.195 / 0.314 / 0.890 in 3 stages (bench/results/session37/, call 6). At 1280 the same
# forward took 0.430 against 0.276 ms at 4 sources, and 2 stages alone lost from 41
# sources on (call 4 and 6): 1280 keeps the defaults. Offline (sm_90, triton 3.9) the cap
# spills 24-80 bytes at 1024 for 2-14% more instructions per step, 24-200 at 1280 for up
# to 17% more (session37/compile_fwd_cap_sm90.txt). The 350M step (call 7, one process
# each): mhar 0.872 of the baseline against 0.858 with session 36's settings, mhar-block
# 0.950 against 0.940. Session 40 raised the cap to 168, the most that twelve one-warp
# programs can hold (12 x 32 x 168 <= 65,536): the cap of 160 spilled (ncu: 1.8 M
# local-memory requests in one read at 41 sources), and at 9 / 25 / 41 sources the forward
# took 0.187 / 0.330 / 0.473 ms against 0.202 / 0.355 / 0.507 (bench/results/session40/,
# call 5; at 1280 the cap of 168 and 12 per SM still lost, 0.857 against 0.672 at 41).
_PHASE1_1024 = {"dot_stages": 2, "fwd_dot_stages": 2, "fwd_split_maxnreg": 168, "fwd_split_progs_per_sm": 12,
                "coef_grads": True}
CONFIG_TABLE: dict[tuple[int, bool], dict] = {
    # One head at 512, measured with the host removed (session 7): a backward that writes
    # fresh gradients is faster with one token per program (0.371 ms per fwd+bwd call
    # against 0.421 with two), one that adds into running sums (training) with two
    # (the whole step's routing kernels: 8.76 ms against 9.34).
    (512, False): {"bwd_elems": 512, "bwd_sum_elems": 1024},
    # several heads at 1024: a backward that adds into running sums (the whole step's) with
    # one warp per token: 41.5 ms of routing kernels against 42.3 with two; one that writes
    # fresh gradients with two: 1.414 ms per fwd+bwd call replayed against 1.473
    # (bench/results/session14/, run 1; session 10 had picked one warp for both kinds while
    # the COEF pass still ran this kernel)
    (1024, True): {"fwd_warps": 2, "bwd_warps": 2, "bwd_sum_warps": 1, **_PHASE1_1024},
    # several heads at 512 (100M, two-phase since session 46): 1024's entry. The 100M MHAR
    # step in alternating processes took 36.2 / 36.3 ms with it against 36.6 / 36.5 with the
    # defaults (0.896 / 0.893 of the baseline against 0.885 / 0.885), and 261.6 against
    # 263.9 ms at 64 x 2048 (bench/results/session46/, call 3). Session 40's 100M steps with
    # 1024's phase-1 settings, and with the fused COEF pass, ran 'auto', then one-pass at
    # 512: those kernels did not run, so its "no gain" measured nothing.
    # The fused COEF pass at 512 in 32-lane pieces capped at 168 registers, twelve programs
    # per SM: it takes 214 registers uncapped (8 per SM) and, unlike 1024's, does not spill
    # at the cap (offline, session 51). One read with the training rows at 9 / 17 sources
    # (8 queries, 8 heads, 16,384 tokens): 0.242 / 0.479 ms against 0.311 / 0.574 as 8 per
    # SM in 64-lane pieces, the routing kernels 0.929 of before. The 100M step, processes
    # alternating: mhar 0.897 / 0.896 of the baseline against 0.893 (bench/results/session53/,
    # call 2).
    (512, True): {"fwd_warps": 2, "bwd_warps": 2, "bwd_sum_warps": 1, **_PHASE1_1024,
                  "coef_grads_progs_per_sm": 12, "coef_grads_maxnreg": 168, "coef_grads_lanes": 32},
    # at 1280 the gather (104-112 registers with token-major coefficients) capped at 96:
    # five programs per SM instead of four; the whole step at 1280/73 took 92.0 against
    # 93.3 ms of kernels with one head, 89.0 against 90.8 with eight (bench/results/session13/);
    # at two tokens a program too, four uncapped (gather_tokens_maxnreg)
    (1280, False): {"bwd_warps": 1, "gather_maxnreg": 96, "gather_tokens_maxnreg": {2: 96}},
    # and with several heads a backward that writes fresh gradients (a plain route call)
    # compiled with a cap of 224 registers (240 without; either way two warps per SM
    # sub-partition): 2.629 against 2.655 ms per fwd+bwd call replayed (session 15, run 1;
    # 2.631 against 2.656 in session 13); one that adds into sums stays uncapped (the whole
    # step at 1280/73 took 94.1 against 93.3 ms with the cap, session 13). The gather with
    # its sources and sums as products (gather_xdot) takes 146 registers uncapped at 1280
    # with 8 heads (three programs per SM), spills 80 bytes at 96, none at 128 (four per
    # SM): 14.7 ms per step at 1280/73 with the cap of 128, 15.7 uncapped, 17.1 at 96
    # (bench/results/session19/, calls 2 and 4). With one head the cap of 96 stays: 11.1
    # against 11.5 ms uncapped (call 4). With coef_parts (session 22) the gather compiles to
    # 96 registers uncapped at 1280 with 8 heads, so the cap does not bind: 13.34 ms per step
    # at 1280/73 uncapped, 13.37 at 128, 13.34 at 96 (bench/results/session22/, call 1).
    # Several tokens a program uncapped (gather_tokens_maxnreg).
    # The fused COEF pass (coef_grads, see above) with w in one bf16 part, in 32-lane pieces
    # (no stack; 64 lanes spill 56 bytes offline and measured within 4% either way).
    (1280, True): {"bwd_warps": 1, "gather_maxnreg": 128, "bwd_maxnreg": 224,
                   "bwd_sum_maxnreg": None, "coef_grads": True, "coef_grads_lanes": 32},
}
TUNE: dict | None = None


def load_config_table(path: str) -> None:
    """Add tile configs from a JSON file written by ``bench/routing.py --tune --write-config``
    (keys "WIDTH,MULTI_HEAD", e.g. "1280,0"; the key "*" changes the defaults of every
    width, e.g. ``{"*": {"bwd_twopass": false}}``). Also read at import from
    ``MHAR_ROUTING_CONFIG``, so a sweep on your GPU applies without editing code."""
    with open(path) as f:
        for key, cfg in json.load(f).items():
            if key == "*":
                for defaults in _DEFAULTS.values():
                    defaults.update(cfg)
                continue
            width, multi = key.split(",")
            entry = (int(width), bool(int(multi)))
            CONFIG_TABLE[entry] = {**CONFIG_TABLE.get(entry, {}), **cfg}


if os.environ.get("MHAR_ROUTING_CONFIG"):
    load_config_table(os.environ["MHAR_ROUTING_CONFIG"])


def _cfg(padded_width: int, multi_head: bool) -> dict:
    base = {**_DEFAULTS[multi_head], **CONFIG_TABLE.get((padded_width, multi_head), {})}
    if TUNE is None:
        return base
    for key in ("elems", "warps", "maxnreg"):  # a sweep's backward tile, warps or cap apply to both backward kinds
        if "bwd_" + key in TUNE:
            base.pop("bwd_sum_" + key, None)
    return {**base, **TUNE}


def _bwd_launch(cfg: dict, summing: bool) -> tuple[int, int | None]:
    """Warps and register cap of ``_bwd_kernel``: a backward that adds into running sums
    takes the "bwd_sum_" entries where the config has them, else the backward's."""
    if summing:
        return cfg.get("bwd_sum_warps", cfg["bwd_warps"]), cfg.get("bwd_sum_maxnreg", cfg["bwd_maxnreg"])
    return cfg["bwd_warps"], cfg["bwd_maxnreg"]


def _pow2_floor(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


def _split_width(dh: int) -> tuple[int, int]:
    """A head of width dh as two power-of-two parts: DA (the largest power of two <= dh)
    and DB (the rest rounded up; 0, no part B, when dh is a power of two)."""
    da = _pow2_floor(dh)
    return da, (_pow2(dh - da) if dh > da else 0)


def padded_width(d: int, heads: int) -> int:
    """Lanes of one row in the kernels' tiles (the key of CONFIG_TABLE)."""
    dh = d // heads
    da, db = _split_width(dh)
    return _pow2(heads) * (da + db)


def _geometry(d: int, heads: int, n_tok: int, kind: str, align: int):
    """Head width, tile config, and the kernels' tile constexprs (align: of every pointer
    the kernel reads or writes through a table)."""
    dh = d // heads
    HP = _pow2(heads)
    DA, DB = _split_width(dh)
    cfg = _cfg(padded_width(d, heads), heads > 1)
    if cfg["pad_heads"] and DB:
        # one part of pow2(dh) lanes per head: masked lanes instead of the two parts'
        # layout conversions (each reduction's sums meet in one register layout)
        DA, DB = _pow2(dh), 0
    lanes = HP * (DA + DB)
    elems = cfg.get(kind + "_elems", cfg["bwd_elems"])  # "bwd_sum" (adding into sums) falls back to "bwd"
    BM = max(1, min(_pow2_floor(max(1, elems // lanes)), _pow2(max(n_tok, 1))))
    # every lane valid (no padded heads, columns or tokens): the kernels drop their masks
    even = n_tok % BM == 0 and HP == heads and DA + DB == dh
    tile = dict(H=heads, HP=HP, DA=DA, DB=DB, DC=_chunk_lanes(DA, DB, heads), CF=_chunks_first(), HAS_B=DB > 0,
                EVEN=even, ALIGN=align, BM=BM)
    return dh, cfg, tile


_CHUNKS_FIRST: list = []  # the installed triton's answer, found once


def _chunks_first() -> bool:
    """The per-query kernels' tile axis order (triton_kernels._chunked_cols): chunks before
    heads from triton 3.7 on, heads first before it, so that either way the compiler
    gives the warp's threads to the heads (offline sm_90 compiles with triton 3.6-3.9)."""
    if not _CHUNKS_FIRST:
        try:
            import triton

            major, minor = (int(v) for v in triton.__version__.split(".")[:2])
        except (ImportError, ValueError):  # no triton (nothing to launch) or an odd version string
            major, minor = 3, 7
        _CHUNKS_FIRST.append((major, minor) >= (3, 7))
    return _CHUNKS_FIRST[0]


def _chunk_lanes(da: int, db: int, heads: int) -> int:
    """DC, the lanes of part A's chunks in the per-query kernels. With several heads, part
    B's width, so that both parts' per-head sums land in one register layout
    (triton_kernels, "Layout"). One head keeps part A whole: its full-row sums meet
    without conversions anyway, and chunks would put a second warp across chunks (the
    whole step at 1280/73 with two backward warps took 207 ms of kernels against 130,
    bench/results/session13/)."""
    return db if db and heads > 1 else da


_SM_COUNT: dict = {}


def _head_parts(dh: int) -> tuple[int, int]:
    """The product kernels' two parts of a head (PA, PB; 0: none): the kernels' parts
    (``_split_width``), except that a matrix product is at least 16 wide: a head of 16
    lanes or fewer is one masked part of 16, and a second part narrower than 16 is padded
    (its lanes past the head masked)."""
    if _pow2(dh) <= 16:
        return 16, 0
    da, db = _split_width(dh)
    return da, (max(db, 16) if db else 0)


def _gather_walk(d: int, dh: int, cols: int) -> dict:
    """The phase-1 gather's walk of a row: chunks of WIDTH columns (``cols`` at most, at
    least 16, a head's width rounded up to a power of two where that is less), each
    meeting at most SPAN heads (one product per head)."""
    width = min(cols, max(16, _pow2(dh)))
    span = max((min(c0 + width, d) - 1) // dh - c0 // dh + 1 for c0 in range(0, d, width))
    return dict(WIDTH=width, SPAN=span)


def _tokens_per_step(cfg: dict, key: str, rows: int, n_src: int) -> int:
    """Tokens a phase-1 product kernel takes at once (its TOK): as many as fill its
    products' ``rows`` with a read's sources, at most config ``key`` (a power of two; 1 is
    a token at a time)."""
    cap = cfg[key]
    if cap < 1 or cap & (cap - 1):
        raise ValueError(f"routing config: {key} must be a power of two >= 1, got {cap}")
    return max(1, min(cap, rows // _pow2(n_src)))


def _gather_maxnreg(cfg: dict, tok: int) -> int | None:
    """The gather's register cap at ``tok`` tokens a program: config "gather_maxnreg" for
    one, "gather_tokens_maxnreg"[tok] for several (absent: uncapped; keys ints, or strings
    from a JSON config)."""
    if tok == 1:
        return cfg["gather_maxnreg"]
    caps = cfg["gather_tokens_maxnreg"]
    return caps.get(tok, caps.get(str(tok)))


def _dot_tile(cfg: dict, key: str, dh: int, heads: int, S: int, align: int, src: Tensor) -> dict | None:
    """The constexprs of a phase-1 kernel as matrix products (``_fwd_dot_kernel``,
    ``_coef_dot_kernel``) when the config's ``key`` turns it on and the heads' first part is
    at most 128 lanes (wider ones compile to local memory), or for one head as lane groups
    (config "dot_lane_groups"); else None. A head part is at least 16 lanes (a product's
    inner size), its lanes past the head masked. The kernels take ``dh`` and ``H`` from
    here: a group's lanes and the groups, with ``VH``, for one head as lane groups."""
    groups = cfg["dot_lane_groups"]
    vh = heads == 1 and groups > 1 and dh % groups == 0 and dh // groups >= 16
    if vh:
        heads, dh = groups, dh // groups
    pa, pb = _head_parts(dh)
    if not (cfg[key] or vh) or pa > 128:
        return None
    if src.is_cuda and src.dtype != torch.bfloat16:
        # On a GPU, bf16 sources only: fp32 tiles (fp32 sources, or bf16 ones taken as fp32
        # by tl.dot's tf32x3) are twice the bytes, and the COEF pass at 1280 / 8 heads then
        # needs 233,728 to 294,912 bytes of shared memory (the H200 has 232,448; run 3 and
        # run 4 of bench/results/session11/). The interpreter runs the fp32 path on the CPU.
        return None
    _check_pow2_16(cfg, "dot_sources")
    return dict(dh=dh, H=heads, HP=_pow2(heads), DA=pa, DB=pb, KS=cfg["dot_sources"], SP=max(8, _pow2(S)),
                ALIGN=align, PREC="bf16x2" if src.dtype == torch.bfloat16 else "ieee", STAGES=cfg["dot_stages"],
                SS_DOT=cfg["dot_sumsq_products"], VH=vh)


def _check_pow2_16(cfg: dict, key: str) -> None:
    """A matrix product's size from the config: a power of two >= 16."""
    if cfg[key] < 16 or cfg[key] & (cfg[key] - 1):
        raise ValueError(f"routing config: {key} must be a power of two >= 16, got {cfg[key]}")


def _n_programs(device: torch.device, n_tiles: int, per_sm: int, share: int = 1, launch: tuple | None = None) -> int:
    """Persistent programs over n_tiles: per_sm per SM, divided among ``share`` programs
    that run side by side (a grid's second dimension). ``launch`` (``_launch_key``): once
    a launch of that kernel has told what an SM holds of it (``_note_fit``), per_sm is
    rounded down to whole waves of that (``occupancy.whole_waves``)."""
    if device.type != "cuda":
        return max(1, min(n_tiles, 3))
    idx = _device_index(device)
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    held = _FIT.get(launch, 0) if launch is not None else 0
    return max(1, min(n_tiles, _SM_COUNT[idx] * occupancy.whole_waves(per_sm, held) // share))


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


# programs an SM holds of a persistent launch's compiled kernel, by ``_launch_key``: read
# after its first launch (``_note_fit``; 0 where triton did not tell), so that later
# launches run whole waves on whatever triton and GPU compiled it (``occupancy``)
_FIT: dict = {}
_SM_LIMITS: dict = {}


def _launch_key(kernel, device: torch.device, dtypes, consts: dict, warps: int, maxnreg: int | None) -> tuple:
    """What a persistent launch's compiled kernel depends on that the op chooses: its
    constexprs (d included; in the call site's order, a few microseconds a launch),
    warps, register cap, its tensors' dtypes and the device."""
    name = kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)
    return (name, tuple(consts.items()), warps, maxnreg, dtypes, device.type, device.index)


def _note_fit(launch: tuple | None, compiled, device: torch.device) -> None:
    """Record how many programs of ``compiled`` (what triton's launch returned) one SM
    of ``device`` holds, for ``_n_programs``; once per launch key."""
    if launch is None or launch in _FIT or device.type != "cuda":
        return
    idx = _device_index(device)
    if idx not in _SM_LIMITS:
        _SM_LIMITS[idx] = occupancy.sm_limits(torch.cuda.get_device_properties(idx))
    registers, meta = getattr(compiled, "n_regs", None), getattr(compiled, "metadata", None)
    if registers is None or meta is None or _SM_LIMITS[idx] is None:  # not told: as configured
        _FIT[launch] = 0
        return
    _FIT[launch] = occupancy.resident_per_sm(registers, meta.shared, meta.num_warps, _SM_LIMITS[idx])["fit"]


# (kernel, constexprs, warps, device) of product kernels that did not fit this GPU's
# shared memory: those launches take the per-query kernels from then on
_DOT_UNFIT: set = set()


def _launch_dot(kernel, grid: tuple, args: tuple, consts: dict, warps: int, device: torch.device,
                maxnreg: int | None = None, launch: tuple | None = None) -> bool:
    """Launch a phase-1 kernel as matrix products; False (nothing launched) when it needs
    more shared memory than the GPU has, in its pipeline stages (``STAGES``) and then in
    one. With three stages, up to 148,544 bytes at the paper widths with every head in a
    program and 18,432 with a head per program (the default for several heads); in one
    stage up to 102,400 (``bench/compile_sm90.py --kernels dot``). An H100/H200 or A100
    has room for three; triton raises before the kernel runs. ``launch``: the caller's
    ``_launch_key``, under which the kernel that ran notes what an SM holds of it."""
    from triton.runtime.errors import OutOfResources

    name = kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)
    key = (name, tuple(sorted(consts.items())), warps, maxnreg, str(device))
    stages = consts.get("STAGES", 1)
    if key not in _DOT_UNFIT:
        try:
            _note_fit(launch, kernel[grid](*args, **consts, num_warps=warps, maxnreg=maxnreg), device)
            return True
        except OutOfResources as e:
            _DOT_UNFIT.add(key)
            then = "it runs in one stage" if stages > 1 else "phase 1 uses the per-query kernels"
            warnings.warn(f"mhar routing: {name} in {stages} pipeline stage(s) does not fit this GPU ({e}); {then}",
                          stacklevel=2)
    if stages > 1:  # one stage holds a single block's tiles in shared memory
        return _launch_dot(kernel, grid, args, {**consts, "STAGES": 1}, warps, device, maxnreg, launch)
    return False


def _contig(srcs: Sequence[Tensor]) -> list[Tensor]:
    return [s if s.is_contiguous() else s.contiguous() for s in srcs]


def _route_weights(queries: Tensor, norm_weights: Tensor) -> Tensor:
    """w = q * g in fp32 (S, d), what the kernels take: formed once per read in its
    forward and kept for its backward (a launch fewer per site and step)."""
    return (queries.float() * norm_weights.float()).contiguous()


def _triton_forward(srcs: list[Tensor], queries: Tensor, norm_weights: Tensor, heads: int, eps: float,
                    final: bool, init: Partial | None = None, want_rstd: bool = False,
                    scales: KeyScales | None = None, w: Tensor | None = None, last_scale: Tensor | None = None,
                    o_dtype: torch.dtype = torch.float32):
    """final: (y, lse) of one query; else (m, l, o) of S queries, o in ``o_dtype`` (fp32,
    or bf16 for direct rows, config "rows_bf16"). init (final only): a
    one-row partial read of other sources that the read starts from (fused phase 2).
    want_rstd (partial reads): also return the sources' key-norm scales (n_src, n_tok) for
    the backward's COEF pass with a head per program, or None where it does not run.
    scales: the stream's :class:`KeyScales`; with it the forward may run a head per
    program too (config "fwd_split"). w: ``_route_weights(queries, norm_weights)``, where
    the caller keeps it for the backward. last_scale (final only): an (n_tok,) fp32 tensor
    the kernel writes the last source's key-norm scales into."""
    from mhar.routing.triton_kernels import _fwd_kernel

    srcs = _contig(srcs)
    S, d = queries.shape
    n_tok = srcs[0].numel() // d
    dev = srcs[0].device
    w = _route_weights(queries, norm_weights) if w is None else w
    table, align = _ptr_table(srcs)
    dh, cfg, tile = _geometry(d, heads, n_tok, "fwd", align)
    n_tiles = -(-n_tok // tile["BM"])
    if final:
        y = _new(srcs[0].shape, srcs[0].dtype, dev)
        lse = _new((n_tok, heads), torch.float32, dev)
        m0, l0, o0 = (lse, lse, y) if init is None else (t.contiguous() for t in init)
        if n_tiles:
            _fwd_kernel[(n_tiles,)](table, srcs[0], w, lse, lse, y, m0, l0, o0, len(srcs), n_tok, 1, d, dh, eps,
                                      **tile, FINAL=True, INIT=init is not None, PF=cfg["fwd_pf"],
                                      SCALE_OUT=last_scale, LAST_SCALE=last_scale is not None,
                                      num_warps=cfg["fwd_warps"], maxnreg=cfg["fwd_maxnreg"])
        return y, lse
    m = _new((S, n_tok, heads), torch.float32, dev)
    l = _new((S, n_tok, heads), torch.float32, dev)
    o = _new((S, n_tok, d), o_dtype, dev)
    dot = _dot_tile(cfg, "fwd_dot", dh, heads, S, align, srcs[0]) if S >= cfg["fwd_dot_min_queries"] else None
    done = False  # by the kernel as matrix products
    rstd = None
    if n_tok and dot:
        from mhar.routing.triton_kernels import _fwd_dot_kernel

        consts, per_sm, warps, grid_h, maxnreg = dict(dot), cfg["fwd_dot_progs_per_sm"], cfg["dot_warps"], 1, None
        if cfg["fwd_dot_stages"]:
            consts["STAGES"] = cfg["fwd_dot_stages"]
        group_scales = dot["VH"] and cfg["dot_group_scales"]
        if scales is not None and cfg["fwd_split"] and heads > 1 and S > 1:  # a head per program
            rstd = scales.table(srcs, eps)
            consts.update(SPLIT=True, SCALES=True, HP=1)
            per_sm, warps, grid_h = cfg["fwd_split_progs_per_sm"], cfg["fwd_split_warps"], heads
            maxnreg = cfg["fwd_split_maxnreg"]
        elif scales is not None and group_scales:  # one head's lane groups read them too
            rstd = scales.table(srcs, eps)
            consts["SCALES"] = True
        elif want_rstd and (_coef_split(cfg, heads, S) or group_scales):  # written for the COEF pass
            rstd = torch.empty((len(srcs), n_tok), dtype=torch.float32, device=dev)
            consts["RS"] = True
        if consts.get("SCALES"):  # few sources: several tokens at a time
            key = "dot_group_tokens" if dot["VH"] else "dot_tokens"
            consts["TOK"] = _tokens_per_step(cfg, key, dot["KS"], len(srcs))
        consts["eps"] = eps
        launch = _launch_key(_fwd_dot_kernel, dev, srcs[0].dtype, {**consts, "d": d}, warps, maxnreg)
        n_prog = _n_programs(dev, -(-n_tok // consts.get("TOK", 1)), per_sm, share=grid_h, launch=launch)
        args = (table, srcs[0], w, m, l, o, m if rstd is None else rstd, len(srcs), n_tok, S, n_prog, d)
        done = _launch_dot(_fwd_dot_kernel, (n_prog, grid_h), args, consts, warps, dev, maxnreg, launch)
    if n_tiles and not done:
        rstd = None
        _fwd_kernel[(S * n_tiles,)](table, srcs[0], w, m, l, o, m, l, o, len(srcs), n_tok, S, d, dh, eps,
                                  **tile, FINAL=False, PF=cfg["fwd_pf"], num_warps=cfg["fwd_warps"],
                                  maxnreg=cfg["fwd_maxnreg"])
    return (m, l, o, rstd) if want_rstd else (m, l, o)


class KeyScales:
    """The key-norm scales 1 / rms of a stream's sources at every token, (n_tok,) fp32
    per source, each computed once per forward (``_key_scales_kernel``, one read of the
    source) and read by every later phase-1 call: its forward and COEF pass with a head per
    program see only their head's lanes of a row. A chunk's call finds the earlier
    sources' scales here and computes the chunk's new sources' (with config
    "merge_scales", phase 2 has already put all but the chunk's last). Pass one per forward
    (``route_partial_rows(..., scales=)``); a call whose sources are not the ones held
    (by identity, in order) recomputes from the first that differs."""

    def __init__(self):
        self._rows: list[Tensor] = []
        self._of: list[Tensor] = []
        self._eps: float | None = None

    def table(self, srcs: list[Tensor], eps: float) -> Tensor:
        """The scales of ``srcs`` as one (n_src, n_tok) fp32 tensor."""
        if eps != self._eps:
            self._rows, self._of, self._eps = [], [], eps
        k = 0
        while k < min(len(self._of), len(srcs)) and self._of[k] is srcs[k]:
            k += 1
        if k < len(srcs):  # from the first source not held at its place on
            del self._rows[k:], self._of[k:]
            self._rows.extend(_key_scales(srcs[k:], eps).unbind(0))
            self._of.extend(srcs[k:])
        return torch.stack(self._rows[:len(srcs)])

    def put(self, src: Tensor, row: Tensor, eps: float) -> None:
        """The scales of ``src``, computed elsewhere (phase 2's kernel), held after the
        others: a source one past the held ones (by a stream's order) is then not read
        again. Held anywhere else, ``table`` finds it out of place and recomputes from
        there, so a wrong guess costs a recomputation, never a wrong scale."""
        if self._eps is None:
            self._eps = eps
        if eps == self._eps and not any(x is src for x in self._of):
            self._rows.append(row)
            self._of.append(src)


def _key_scales(srcs: list[Tensor], eps: float) -> Tensor:
    from mhar.routing.triton_kernels import _key_scales_kernel

    d = srcs[0].shape[-1]
    n_tok = srcs[0].numel() // d
    out = torch.empty((len(srcs), n_tok), dtype=torch.float32, device=srcs[0].device)
    if n_tok:
        table, align = _ptr_table(_contig(srcs))
        bt = 16
        _key_scales_kernel[(len(srcs) * -(-n_tok // bt),)](table, srcs[0], out, n_tok, d, eps, BT=bt,
                                                        BD=min(256, _pow2(d)), ALIGN=align, num_warps=4)
    return out


def _coef_split(cfg: dict, heads: int, S: int) -> bool:
    """Whether the COEF pass runs a head per program (config "coef_split"): several heads
    and queries, as products."""
    return cfg["coef_split"] and cfg["coef_dot"] and cfg["bwd_twopass"] and heads > 1 and S > 1


def _stacked(grad: Tensor | Sequence[Tensor]) -> Tensor:
    """The S queries' upstream gradients as one (S, M, d) tensor."""
    return grad if isinstance(grad, Tensor) else torch.stack(list(grad))


def _triton_backward(srcs: list[Tensor], queries: Tensor, norm_weights: Tensor, grad: Tensor | Sequence[Tensor],
                     stat: Tensor, off: Tensor | None, y: Tensor | None, heads: int, eps: float,
                     sink: SinkSpan | None = None, partial: tuple | None = None,
                     rstd: Tensor | None = None, w: Tensor | None = None) -> list[Tensor | None]:
    """grad: (S, M, d), or the S queries' (M, d) gradients as separate tensors in any one
    dtype (a phase-1 read's rows in final form, ``_RowGrads``; the phase-1 kernels read
    them through a pointer table, the others take them stacked).
    partial (a final read that started from a phase-1 row, one query): (m0, grad_o,
    grad_l), the row's max (n_tok, H) and two fp32 outputs (n_tok, d) and (n_tok, H) that
    the kernel fills with the row's gradients; or (None, stat, off), two (n_tok, H) fp32
    outputs that it fills with lse and -(g . y) per head (the row in final form).
    rstd (n_src, n_tok): the sources' key-norm scales from the forward; with them the COEF
    pass may run a head per program (``_coef_split``). w: the forward's
    ``_route_weights``, or None to form it again."""
    from mhar.routing.triton_kernels import _bwd_kernel

    srcs = _contig(srcs)
    S, d = queries.shape
    n_tok = srcs[0].numel() // d
    dev = srcs[0].device
    w = _route_weights(queries, norm_weights) if w is None else w
    # The sink's sources get their gradient summed in-kernel into the sink's running
    # sums (n_acc of them; none on the first read of a backward, which creates the sums).
    # Every other source gets a separate fresh gradient, not a slice of one buffer:
    # autograd sums later contributions into a gradient in place only when it owns its
    # storage (a shared buffer would cost a transient copy of every gradient).
    sums, n_acc = sink.sums(srcs) if sink is not None else ([], 0)
    grads = [_new(s.shape, s.dtype, dev) for s in srcs[len(sums):]]
    dests = [*sums, *grads]
    src_table, src_align = _ptr_table(srcs)
    dest_table, dest_align = _ptr_table(dests)
    dh, cfg, tile = _geometry(d, heads, n_tok, "bwd_sum" if n_acc else "bwd", min(src_align, dest_align))
    warps, maxnreg = _bwd_launch(cfg, summing=n_acc > 0)
    stat = stat.contiguous()
    if S > 1 and cfg["bwd_twopass"]:  # per-query coefficients, then per-source gradients
        from mhar.routing.triton_kernels import _bwd_gather_kernel

        # the queries' gradients through a pointer table, in their own dtype (bf16 or fp32)
        rows = _contig(grad.unbind(0) if isinstance(grad, Tensor) else grad)
        if rows[0].dtype not in (torch.bfloat16, torch.float32):
            rows = [r.float() for r in rows]
        grad_table, grad_align = _ptr_table(rows)
        if grad_align < tile["ALIGN"]:
            dh, cfg, tile = _geometry(d, heads, n_tok, "bwd_sum" if n_acc else "bwd", grad_align)
        ks = cfg["gather_sources"]
        for key in ("gather_sources", "gather_cols"):  # a matrix product's rows, and its columns
            _check_pow2_16(cfg, key)
        n_tiles = -(-n_tok // tile["BM"])
        # bf16 gradient rows enter the gather's products as they are, beside w's two bf16
        # parts (triton_kernels._bwd_gather_kernel, EXACT); the coefficients then as their
        # two bf16 parts, stored so by the COEF pass (PARTS)
        exact = rows[0].dtype == torch.bfloat16
        parts = exact and cfg["coef_parts"]
        dot = _dot_tile(cfg, "coef_dot", dh, heads, S, tile["ALIGN"], srcs[0]) if n_tiles else None
        split = dot is not None and rstd is not None and _coef_split(cfg, heads, S)
        # the forward's key-norm scales: read by the split pass, and by one head's lane groups
        scaled = split or (dot is not None and rstd is not None and dot["VH"] and cfg["dot_group_scales"])
        g_exact = exact and dot is not None and dot["PREC"] == "bf16x2"
        tok = _tokens_per_step(cfg, "coef_tokens", dot["KS"], len(srcs)) if split else 1
        # the sources' gradients formed in the COEF pass (config "coef_grads"): every source a
        # sink entry of its own (its deferred x terms live there), a head per program, a token
        # at a time
        grads_here = (split and g_exact and tok == 1 and cfg["coef_grads"] and sink is not None
                      and len(sums) == len(srcs) and not sink.any_held())
        w_parts = w
        if exact:  # w's two bf16 parts, the gather's and GRAD's rows beside bf16 gradients
            w_hi = w.bfloat16()
            w_parts = torch.stack([w_hi, (w - w_hi.float()).bfloat16()])

        def coefficients():
            # token-major, so that each gather program reads its block's coefficients as
            # contiguous runs (source-major, 32-byte pieces cost 5.2 of the gather's 22.7 ms
            # at 1280/73 with 8 heads, bench/results/session13/)
            if parts:  # (n_tok, H, n_src, 2 SP) bf16: a row's high parts, then its low parts
                sp = max(8, _pow2(S))
                alloc = torch.zeros if S < sp else torch.empty  # zeros past S (the gather reads them)
                ca = alloc((n_tok, heads, len(srcs), 2 * sp), dtype=torch.bfloat16, device=dev)
                cb = alloc(ca.shape, dtype=torch.bfloat16, device=dev)
            else:
                ca = torch.empty((n_tok, heads, len(srcs), S), dtype=torch.float32, device=dev)
                cb = torch.empty_like(ca)
            # c per head when the COEF pass runs a head per program, summed by the gather
            cc = torch.empty((heads if split else 1, n_tok, len(srcs), S), dtype=torch.float32, device=dev)
            return ca, cb, cc

        done = False  # the COEF pass, by the kernel as matrix products
        if dot:  # programs persistent over tokens, every query (and every head, unless split) in each
            from mhar.routing.triton_kernels import _coef_dot_kernel

            per_sm, warps_dot, grid_h, maxnreg = cfg["coef_dot_progs_per_sm"], cfg["dot_warps"], 1, None
            if split:  # programs per SM over all heads; few sources: several tokens at a time
                per_sm, warps_dot, grid_h = cfg["coef_split_progs_per_sm"], cfg["coef_split_warps"], heads
                maxnreg = cfg["coef_split_maxnreg"]
            if grads_here:  # the fused pass's own residency settings, where set
                per_sm = cfg["coef_grads_progs_per_sm"] or per_sm
                maxnreg = cfg["coef_grads_maxnreg"] or maxnreg
            # bf16 gradients enter g.x as they are (one product; exact)
            consts = {**dot, "eps": eps, "G_EXACT": g_exact, "SPLIT": split, "SCALES": scaled, "PARTS": parts,
                      "TOK": tok, "GRAD": grads_here}
            if grads_here:
                consts["GL"] = min(cfg["coef_grads_lanes"], dot["DA"])
                consts["W_LO"] = cfg["coef_grads_w_lo"]
                consts["STAGES"] = cfg["coef_grads_stages"] or consts["STAGES"]
            if split:
                consts["HP"] = 1
            launch = _launch_key(_coef_dot_kernel, dev, (srcs[0].dtype, rows[0].dtype), {**consts, "d": d}, warps_dot,
                                 maxnreg)
            n_prog = _n_programs(dev, -(-n_tok // tok), per_sm, share=grid_h, launch=launch)
            dw_parts = torch.empty((n_prog, S, d), dtype=torch.float32, device=dev)  # every (program, query) row
            if grads_here:
                coef_a = coef_b = coef_c = w  # (not read)
                deferred, n_cacc = sink.deferred_terms(heads, n_tok, dev)
                deferred_table = _ptr_table(deferred)[0]
            else:
                coef_a, coef_b, coef_c = coefficients()
                deferred_table, n_cacc = w, 0
            args = (src_table, srcs[0], w, grad_table, rows[0], stat, off.contiguous(), dw_parts, coef_a, coef_b,
                    coef_c, coef_c if rstd is None else rstd, len(srcs), n_tok, S, n_prog, dest_table, w_parts,
                    deferred_table, n_acc, n_cacc, d)
            done = _launch_dot(_coef_dot_kernel, (n_prog, grid_h), args, consts, warps_dot, dev, maxnreg, launch)
            split = split and done
            if grads_here and not done:  # the two passes below instead: nothing deferred
                if not n_cacc:
                    for t in deferred:
                        t.zero_()
                grads_here = False
                coef_a, coef_b, coef_c = coefficients()
        if not done:  # the COEF pass as the per-query kernel, a program per (query, tile share)
            consts = dict(**tile, SINGLE=True, FINAL=False, PF=cfg["bwd_pf"], COEF=True, PARTS=parts,
                          SP=max(8, _pow2(S)))
            launch = _launch_key(_bwd_kernel, dev, (srcs[0].dtype, rows[0].dtype), {**consts, "d": d, "dh": dh},
                                 warps, cfg["bwd_maxnreg"])
            n_prog = max(1, _n_programs(dev, n_tiles, cfg["bwd_progs_per_sm"], launch=launch) // S)
            dw_parts = torch.empty((n_prog, S, d), dtype=torch.float32, device=dev)
            if n_tiles and not dot:
                coef_a, coef_b, coef_c = coefficients()
        if n_tiles and not grads_here:
            if not done:
                compiled = _bwd_kernel[(S, n_prog)](src_table, srcs[0], src_table, w, grad_table, rows[0], stat,
                                                    off.contiguous(), rows[0], dw_parts, coef_a, coef_b, coef_c,
                                                    dw_parts, dw_parts, dw_parts, dw_parts,
                                                    len(srcs), 0, n_tok, S, d, dh, eps, n_tiles, n_prog,
                                                    **consts, num_warps=warps, maxnreg=cfg["bwd_maxnreg"])
                _note_fit(launch, compiled, dev)
            tok = _tokens_per_step(cfg, "gather_tokens", ks, len(srcs))
            grid = -(-len(srcs) // ks) * n_tok if tok == 1 else -(-n_tok // tok)
            _bwd_gather_kernel[(grid,)](
                src_table, srcs[0], dest_table, w, w_parts, grad_table, rows[0], coef_a, coef_b, coef_c, len(srcs),
                n_acc, S, n_tok, d, dh, EXACT=exact, TOK=tok, NSEG=_pow2(tok + (2 if exact else 1)),
                H=heads, **_gather_walk(d, dh, cfg["gather_cols"]), KS=ks,
                SP=max(8, _pow2(S)), ALIGN=tile["ALIGN"], ACCUM=n_acc > 0,
                PREC="ieee" if srcs[0].dtype in (torch.float32, torch.float64) else cfg["gather_precision"],
                CH=heads if split else 1, XDOT=exact and cfg["gather_xdot"], PARTS=parts,
                num_warps=cfg["gather_warps"],
                num_stages=cfg["gather_stages"], maxnreg=_gather_maxnreg(cfg, tok))
    else:
        n_tiles = -(-n_tok // tile["BM"])
        launch = None
        if n_tiles:
            final = y is not None
            assert final == (off is None) and (not final or S == 1)
            assert partial is None or final
            grad = _stacked(grad).contiguous()
            # PARTIAL: the phase-1 row's gradients (1), or -(g . y) (2)
            mode = 0 if partial is None else 1 if partial[0] is not None else 2
            # the last source's deferred key-norm terms, applied with this read's (a one-query
            # read with the source in its sink span: phase 2's read of it is its last)
            claimed = sink.claim_last(heads) if S == 1 and sink is not None and len(sums) == len(srcs) else None
            consts = dict(**tile, SINGLE=(S == 1), FINAL=final, ACCUM=n_acc > 0, PF=cfg["bwd_pf"], PARTIAL=mode,
                          CLAIM=claimed is not None)
            launch = _launch_key(_bwd_kernel, dev, (srcs[0].dtype, grad.dtype), {**consts, "d": d, "dh": dh}, warps,
                                 maxnreg)
        n_prog = _n_programs(dev, n_tiles, cfg["bwd_progs_per_sm"], launch=launch)
        # one row per program; the one-query kernel writes its whole row, the S-query one accumulates
        dw_parts = (torch.empty if S == 1 else torch.zeros)((n_prog, S, d), dtype=torch.float32, device=dev)
        if n_tiles:
            pm, pgo, pgl = partial if partial is not None else (dw_parts, dw_parts, dw_parts)
            if mode == 2:
                pm = dw_parts
            compiled = _bwd_kernel[(n_prog,)](src_table, srcs[0], dest_table, w, grad, grad, stat,
                                              stat if final else off.contiguous(),
                                              y.contiguous() if final else grad, dw_parts, dw_parts, dw_parts,
                                              dw_parts, pm, pgo, pgl, dw_parts if claimed is None else claimed,
                                              len(srcs), n_acc, n_tok, S, d, dh, eps, n_tiles, n_prog,
                                              **consts, num_warps=warps, maxnreg=maxnreg)
            _note_fit(launch, compiled, dev)
    if not n_tok:
        dw_parts.zero_()
        for g in dests[n_acc:]:
            g.zero_()
    dw = dw_parts.sum(0)
    return [(dw * norm_weights.float()).to(queries.dtype), (dw * queries.float()).to(norm_weights.dtype),
            *[None] * len(sums), *grads]


# finalize's kernels: elements per program tile (a chunk of the head's columns) and
# warps. Elementwise passes with one per-head sum, memory-bound. Picked from triton 3.9's
# offline sm_90 compile (bench/compile_sm90.py's resources) at the paper widths, 38-46
# registers forward and 60-80 backward, no stack; 4096 elements took 80 and 182-184 (two
# programs per SM). Not swept on a GPU (TUNE overrides them); against the eager ops they
# replaced, the whole step at 1280/73 with 8 heads took 86.5 against 88.7 ms of
# kernels, the benchmark's own loss included (bench/results/session15/, run 5).
_FINALIZE = {"finalize_elems": 2048, "finalize_warps": 4}


def _finalize_launch(n_tok: int, d: int, heads: int) -> tuple[tuple[int], dict, int]:
    """Grid, tile constexprs and warps of the finalize kernels: one program per (token
    block, head), BM tokens by chunks of BD lanes of the head. BD is the largest power of
    two dividing the head width, at most 256 (no masked lanes: 32 at 160, 256 at 1024 or
    1280); where that is under 16 (widths 123, 20, 1), the width rounded up to a power of
    two, at most 256 (the last chunk's lanes past the head masked)."""
    cfg = {**_FINALIZE, **(TUNE or {})}
    dh = d // heads
    bd = min(dh & -dh, 256)
    if bd < 16:
        bd = min(_pow2(dh), 256)
    bm = max(1, min(_pow2_floor(max(1, cfg["finalize_elems"] // bd)), _pow2(n_tok)))
    return (heads * -(-n_tok // bm),), dict(d=d, dh=dh, H=heads, BM=bm, BD=bd), cfg["finalize_warps"]


def _triton_finalize(l: Tensor, o: Tensor, dtype: torch.dtype) -> Tensor:
    """x = o / l per head in ``dtype``, (S, M, d), in one pass; l (S, M, H), o (S, M, d) fp32."""
    from mhar.routing.triton_kernels import _finalize_fwd_kernel

    S, M, H = l.shape
    d = o.shape[-1]
    x = _new((S, M, d), dtype, o.device)
    if S * M:
        grid, tile, warps = _finalize_launch(S * M, d, H)
        _finalize_fwd_kernel[grid](o.contiguous(), l.contiguous(), x, S * M, **tile, num_warps=warps)
    return x


def _triton_finalize_backward(g: Tensor, x: Tensor, l: Tensor, grad_o: Tensor | None, grad_l: Tensor) -> None:
    """Fill grad_o (.., d) and grad_l (.., H), contiguous fp32, with finalize's gradients
    from g (x's shape, any dtype and strides). grad_o None: grad_l gets -(g . x) per head
    instead, not divided by l (a phase-1 row in final form, ``_RowGrads``)."""
    from mhar.routing.triton_kernels import _finalize_bwd_kernel

    H = l.shape[-1]
    d = x.shape[-1]
    n_tok = l.numel() // H
    if n_tok:
        grid, tile, warps = _finalize_launch(n_tok, d, H)
        _finalize_bwd_kernel[grid](g.contiguous(), x.contiguous(), l.contiguous(), grad_l if grad_o is None else grad_o,
                                   grad_l, n_tok, **tile, ROWS=grad_o is None, num_warps=warps)


# ---------------------------------------------------------------- backend dispatch

def _ref_partial(srcs, queries, norm_weights, heads, eps):
    with torch.no_grad():
        return tuple(_ref.route_partial(srcs, queries, norm_weights, heads, eps))


def _ref_backward(srcs, queries, norm_weights, grad, stat, off, heads, eps) -> list[Tensor]:
    ctx = SimpleNamespace(saved_tensors=(queries, norm_weights, stat, *srcs), heads=heads, eps=eps)
    with torch.no_grad():
        gq, gg, _, _, *gs = _ref._PartialRead.backward(ctx, None, off, grad)
    return [gq, gg, *gs]


def _forward_impl(srcs: list[Tensor], queries: Tensor, norm_weights: Tensor, heads: int, eps: float,
                  final: bool, want_rstd: bool = False, scales: KeyScales | None = None,
                  w: Tensor | None = None, o_dtype: torch.dtype = torch.float32) -> tuple[Tensor, ...]:
    """final: (y, lse) of one query; else (m, l, o) of S queries, and with want_rstd the
    sources' key-norm scales or None (``_triton_forward``; w and o_dtype as there: the
    reference's o is fp32 whatever o_dtype)."""
    if _use_triton(srcs[0]):
        return _triton_forward(srcs, queries, norm_weights, heads, eps, final, want_rstd=want_rstd, scales=scales,
                               w=w, o_dtype=o_dtype)
    m, l, o = _ref_partial(srcs, queries, norm_weights, heads, eps)
    if not final:
        return (m.contiguous(), l.contiguous(), o.contiguous()) + ((None,) if want_rstd else ())
    d = queries.shape[-1]
    n_tok = o.shape[1]
    y = (o[0].view(n_tok, heads, d // heads) / l[0].unsqueeze(-1)).view(srcs[0].shape).to(srcs[0].dtype)
    return y, (m[0] + torch.log(l[0])).contiguous()


def _backward_impl(srcs: list[Tensor], queries: Tensor, norm_weights: Tensor, grad: Tensor, stat: Tensor,
                   off: Tensor | None, y: Tensor | None, heads: int, eps: float,
                   sink: SinkSpan | None = None, rstd: Tensor | None = None,
                   w: Tensor | None = None) -> list[Tensor | None]:
    """grad (S, M, d) or S (M, d) tensors, stat (S, M, H): m (partial) or lse (final, with
    y given and off None); off (S, M, H): grad_l of a partial read, or -(g . y) with lse.
    rstd: the forward's key-norm scales (``_triton_forward``), or None; w: the forward's
    ``_route_weights`` or None.
    Returns [grad_queries, grad_norm_weights, *grad_sources], with None for the sources
    whose gradient went into ``sink``."""
    if _use_triton(srcs[0]):
        return _triton_backward(srcs, queries, norm_weights, grad, stat, off, y, heads, eps, sink, rstd=rstd, w=w)
    grad = _stacked(grad)
    if off is None:
        S, n_tok, _ = stat.shape
        d = queries.shape[-1]
        off = -(grad.to(stat.dtype) * y.reshape(S, n_tok, d).to(stat.dtype)).view(S, n_tok, heads, d // heads).sum(-1)
    res = [t.contiguous() for t in _ref_backward(srcs, queries, norm_weights, grad, stat, off, heads, eps)]
    return res if sink is None else [*res[:2], *sink.add(res[2:])]


# ---------------------------------------------------------------- the ops

@torch.library.custom_op("mhar::route", mutates_args=())
def route_op(sources: list[Tensor], query: Tensor, norm_weight: Tensor, heads: int, eps: float) -> tuple[Tensor, Tensor]:
    d = query.shape[-1]
    return _forward_impl(list(sources), query.view(1, d), norm_weight.view(1, d), heads, eps, True)


@route_op.register_fake
def _(sources, query, norm_weight, heads, eps):
    d = query.shape[-1]
    ct = torch.float64 if sources[0].dtype == torch.float64 else torch.float32
    n_tok = sources[0].numel() // d
    return torch.empty_like(sources[0], memory_format=torch.contiguous_format), sources[0].new_empty((n_tok, heads), dtype=ct)


@torch.library.custom_op("mhar::route_partial", mutates_args=())
def route_partial_op(sources: list[Tensor], queries: Tensor, norm_weights: Tensor, heads: int,
                     eps: float) -> tuple[Tensor, Tensor, Tensor]:
    return _forward_impl(list(sources), queries, norm_weights, heads, eps, False)


@route_partial_op.register_fake
def _(sources, queries, norm_weights, heads, eps):
    S, d = queries.shape
    ct = torch.float64 if sources[0].dtype == torch.float64 else torch.float32
    n_tok = sources[0].numel() // d
    return (sources[0].new_empty((S, n_tok, heads), dtype=ct), sources[0].new_empty((S, n_tok, heads), dtype=ct),
            sources[0].new_empty((S, n_tok, d), dtype=ct))


@torch.library.custom_op("mhar::route_backward", mutates_args=())
def route_backward_op(sources: list[Tensor], queries: Tensor, norm_weights: Tensor, grad: Tensor, stat: Tensor,
                      off: Optional[Tensor], y: Optional[Tensor], heads: int, eps: float) -> list[Tensor]:
    """grad: (S, M, d) upstream gradient; stat: (S, M, H) logit offset (m, or lse of a
    final read); off: (S, M, H) grad_l of a partial read, or None for a final read,
    whose output y is then given (the kernel forms -(grad_y . y) per head itself)."""
    return _backward_impl(list(sources), queries, norm_weights, grad, stat, off, y, heads, eps)


@route_backward_op.register_fake
def _(sources, queries, norm_weights, grad, stat, off, y, heads, eps):
    return [torch.empty_like(queries), torch.empty_like(norm_weights),
            *[torch.empty_like(s, memory_format=torch.contiguous_format) for s in sources]]


def _route_setup(ctx, inputs, output):
    sources, query, norm_weight, heads, eps = inputs
    y, lse = output
    ctx.save_for_backward(query, norm_weight, y, lse, *sources)
    ctx.heads, ctx.eps, ctx.n = heads, eps, len(sources)
    ctx.mark_non_differentiable(lse)


def _route_backward(ctx, grad_y, grad_lse):
    query, norm_weight, y, lse, *sources = ctx.saved_tensors
    heads, d = ctx.heads, query.shape[-1]
    if grad_y is None:
        return [None] * ctx.n, None, None, None, None
    n_tok = lse.shape[0]
    res = route_backward_op(sources, query.view(1, d), norm_weight.view(1, d), grad_y.reshape(1, n_tok, d),
                            lse.view(1, n_tok, heads), None, y, heads, ctx.eps)
    return list(res[2:]), res[0].view(query.shape), res[1].view(norm_weight.shape), None, None


route_op.register_autograd(_route_backward, setup_context=_route_setup)


def _partial_setup(ctx, inputs, output):
    sources, queries, norm_weights, heads, eps = inputs
    m, l, o = output
    ctx.save_for_backward(queries, norm_weights, m, *sources)
    ctx.heads, ctx.eps, ctx.n = heads, eps, len(sources)
    ctx.mark_non_differentiable(m)


def _partial_backward(ctx, grad_m, grad_l, grad_o):
    queries, norm_weights, m, *sources = ctx.saved_tensors
    if grad_l is None and grad_o is None:
        return [None] * ctx.n, None, None, None, None
    S, d = queries.shape
    n_tok = m.shape[1]
    if grad_l is None:
        grad_l = torch.zeros_like(m)
    if grad_o is None:
        grad_o = m.new_zeros((S, n_tok, d))
    res = route_backward_op(sources, queries, norm_weights, grad_o, m, grad_l, None, ctx.heads, ctx.eps)
    return list(res[2:]), res[0], res[1], None, None


route_partial_op.register_autograd(_partial_backward, setup_context=_partial_setup)


# ---------------------------------------------------------------- eager fast path
# The same implementation behind plain autograd Functions: torch.library's Python
# dispatch (aliasing checks, pytree over N tensors) costs ~0.5-1 ms per call with tens
# of sources, more than the kernels at small shapes. Eager code takes this path;
# torch.compile traces the custom ops (the public functions switch on is_compiling).
# Their backward passes are not differentiable themselves (kernels, in-place sums): each
# is @once_differentiable, so a second-order gradient (create_graph=True, a gradient
# penalty) is an error instead of silently missing routing's terms.

class GradientSink:
    """Running sums of the gradients of a stream's sources, added into by the routing
    backward itself.

    Every later site reads a source, so in backward a source gets one gradient per site.
    Returned to autograd, each is a fresh tensor (a write) that autograd then adds to
    the others (two reads and a write), with a launch per source and site. Registered
    with a sink instead, a source's gradient is summed inside the backward kernel (a
    read and a write) and the reads return None for it; the source's registration node
    hands the finished sum to autograd once every read's backward has run (autograd
    runs a node only after all of its consumers).

    Usage (one sink per forward)::

        sink = GradientSink()
        src = sink.register(x)                      # the tensor to read from now on
        y = route([src, ...], q, g, H, sink=sink.span(0, k))   # the call's first k
                                                    # sources are sink entries 0..k-1

    A block's running sum (block routing: the sum of the block's outputs so far, read by
    its later sublayers) sums its reads' gradients into the entry of the block summary it
    becomes (``reserve``, ``running_sum``): the gradient of every partial sum, and of each
    output added into one, is that entry's running sum at the time, so the backward adds
    each read's gradient into it where autograd would add two tensors per sublayer.

    An entry may also hold deferred key-norm terms (``deferred``; config "coef_grads"): a
    phase-1 backward that forms a source's gradient a head at a time leaves the x term,
    which needs every head, as per-head shares of c. The first later read that claims them
    (phase 2's, ``SinkSpan.claim_last``) applies them in its kernel; the entry's node applies
    whatever is left when it hands the sum over. Each term is applied exactly once.
    """

    def __init__(self):
        self.buffers: list[Tensor | None] = []
        # per entry, the key norm's deferred x terms: (H, n_tok) fp32 shares of c left by
        # phase-1 backward passes that formed the source's gradient by head (config
        # "coef_grads"); applied as -(sum c) x by a later read of the source that claims them,
        # else by the entry's node when it hands the sum over
        self.deferred: list[Tensor | None] = []
        self.held: set[int] = set()  # reserved entries (running sums'): their summary's node keeps the sum

    def register(self, source: Tensor, index: int | None = None) -> Tensor:
        """The tensor to read ``source`` through; ``index``: an entry from ``reserve``."""
        if index is None:
            self.buffers.append(None)
            self.deferred.append(None)
            index = len(self.buffers) - 1
        elif index not in self.held:
            raise ValueError(f"sink entry {index} was not reserved")
        return _SinkSource.apply(source, self, index)

    def reserve(self) -> int:
        """An entry for a source that does not exist yet (a block summary, registered with
        ``register(summary, index)`` once its block is complete); reads of its running sum
        (``running_sum``) name it in their spans."""
        self.buffers.append(None)
        self.deferred.append(None)
        self.held.add(len(self.buffers) - 1)
        return len(self.buffers) - 1

    def running_sum(self, total: Tensor | None, output: Tensor, index: int, added: bool = False) -> Tensor:
        """``total + output`` (``output`` for a block's first), a running sum whose reads
        are registered as the reserved entry ``index``: nothing else may read it (its
        gradient must reach it only as the entry's sum). ``added``: ``output`` is the sum
        already, its producer's backward passing the entry's sum on to ``total`` itself
        (a product with ``total`` as its C operand does: ``project_into``)."""
        if added:
            if total is None:
                raise ValueError("an added running sum needs the total it was formed from")
            return _RunningSum.apply(None, output, self, index, False)
        return _RunningSum.apply(total, output, self, index, total is None)

    def span(self, start: int, count: int) -> "SinkSpan | None":
        return SinkSpan(self, start, count) if count else None


class SinkSpan:
    """The first ``count`` sources of one routing call are the sink's entries
    ``start .. start + count - 1``."""

    def __init__(self, sink: GradientSink, start: int, count: int):
        self.sink, self.start, self.count = sink, start, count

    def _entries(self, store: list, specs: Sequence[tuple]) -> tuple[list[Tensor], int]:
        """The span's entries of ``store`` (the sink's sums or deferred terms), each
        allocated where missing as its (shape, dtype, device) in ``specs``, and how many to
        add into: all of them when some already held values (the others start from zero;
        no schedule of ours does this: a span's first read in a backward finds all of its
        sums or none of them), else none (the kernel writes them all)."""
        idx = range(self.start, self.start + self.count)
        have = any(store[j] is not None for j in idx)
        for j, (shape, dtype, device) in zip(idx, specs):
            if store[j] is None:
                store[j] = (torch.zeros if have else torch.empty)(shape, dtype=dtype, device=device)
        return [store[j] for j in idx], self.count if have else 0

    def sums(self, srcs: Sequence[Tensor]) -> tuple[list[Tensor], int]:
        """The running sums to add into (allocated on the first read of a backward, which
        then writes them: n_acc 0) and how many of them already hold a sum."""
        return self._entries(self.sink.buffers, [(s.shape, s.dtype, s.device) for s in srcs[:self.count]])

    def any_held(self) -> bool:
        return any(j in self.sink.held for j in range(self.start, self.start + self.count))

    def deferred_terms(self, heads: int, n_tok: int, device: torch.device) -> tuple[list[Tensor], int]:
        """The entries' deferred key-norm terms (``GradientSink.deferred``) to add into, (H,
        n_tok) fp32 each, and how many already hold some (as ``sums``)."""
        return self._entries(self.sink.deferred, [((heads, n_tok), torch.float32, device)] * self.count)

    def claim_last(self, heads: int) -> Tensor | None:
        """The last entry's deferred terms, taken (the caller's kernel applies them), if they
        are shares of ``heads`` heads; else None and they stay for the sink."""
        j = self.start + self.count - 1
        term = self.sink.deferred[j]
        if term is None or term.shape[0] != heads:
            return None
        self.sink.deferred[j] = None
        return term

    def add(self, grads: Sequence[Tensor]) -> list[Tensor | None]:
        """Reference path: add the first ``count`` gradients into the sums; None for them."""
        bufs = self.sink.buffers
        for j, g in zip(range(self.start, self.start + self.count), grads):
            bufs[j] = g if bufs[j] is None else bufs[j].add_(g)
        return [*[None] * self.count, *grads[self.count:]]


def _no_second_order() -> None:
    """A sink's backward under create_graph=True: its sums hold the reads' gradients as
    plain tensors (often with no gradient of their own reaching the node, so
    @once_differentiable would see nothing to mark), and a second order would take
    them as constants."""
    if torch.is_grad_enabled():
        raise RuntimeError("mhar routing: cannot differentiate twice (create_graph=True) through a routed "
                           "stream's GradientSink: the routing backward is not differentiable")


def _apply_deferred(total: Tensor, source: Tensor, terms: Tensor) -> None:
    """total -= (sum over heads of ``terms``) x, in place, per token: a source's deferred key-norm
    x terms (``GradientSink.deferred``; (H, n_tok) fp32) into its gradient's sum."""
    from mhar.routing.triton_kernels import _deferred_norm_kernel

    d = source.shape[-1]
    n_tok = source.numel() // d
    if n_tok:
        bt, bd = 16, min(256, _pow2(d))
        grid = (-(-n_tok // bt), -(-d // bd))
        _deferred_norm_kernel[grid](source.contiguous(), total, terms, n_tok, d, terms.shape[0],
                                    HP=_pow2(terms.shape[0]), BT=bt, BD=bd, num_warps=4)


class _SinkSource(torch.autograd.Function):
    """Identity whose backward returns the sink's sum for one source (plus any gradient
    that reached the source other than through routing reads)."""

    @staticmethod
    def forward(ctx, source, sink, index):
        ctx.set_materialize_grads(False)  # the reads return None: no zero-filled gradient
        ctx.sink, ctx.index = sink, index
        ctx.save_for_backward(source)  # for deferred key-norm terms that no read claimed
        return source.view_as(source)

    @staticmethod
    def backward(ctx, grad):
        _no_second_order()
        sink, i = ctx.sink, ctx.index
        total = sink.buffers[i]
        deferred, sink.deferred[i] = sink.deferred[i], None
        if deferred is not None:  # written with the sum it belongs to
            _apply_deferred(total, ctx.saved_tensors[0], deferred)
        if i in sink.held:  # a block summary: its running sum's reads add into this same sum next
            if grad is not None:
                sink.buffers[i] = total = grad.clone() if total is None else total.add_(grad)
            return total, None, None
        sink.buffers[i] = None  # a second backward (retain_graph) starts over
        if grad is not None:
            total = grad if total is None else total + grad
        return total, None, None


class _RunningSum(torch.autograd.Function):
    """A block's running sum, ``total + output``, read through a reserved sink entry (see
    :class:`GradientSink`). In backward its gradient arrives as the entry's sum itself and
    goes on, the same tensor, to both inputs; the read before it (of ``total``) then adds
    into it in its kernel, after the output's sublayer has taken its gradient (the read's
    output is that sublayer's input). The block's first output ends the entry. An
    ``output`` that is the sum already (``total`` None, ``first`` False) is passed through."""

    @staticmethod
    def forward(ctx, total, output, sink, index, first):
        ctx.set_materialize_grads(False)
        ctx.sink, ctx.index, ctx.first, ctx.has_total = sink, index, first, total is not None
        return output.view_as(output) if total is None else total + output

    @staticmethod
    def backward(ctx, grad):
        _no_second_order()
        sink, i = ctx.sink, ctx.index
        total = sink.buffers[i]
        if grad is not None and (total is None or grad.data_ptr() != total.data_ptr()):
            raise RuntimeError("a block's running sum got a gradient other than its sink entry's sum: "
                               "it may be read only through GradientSink.running_sum's entry")
        if ctx.first:  # the block's last backward: the entry is done (a second backward starts over)
            sink.buffers[i] = None
            return None, total, None, None, None
        return (total if ctx.has_total else None), total, None, None, None


class _RouteFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, norm_weight, heads, eps, sink, *sources):
        d = query.shape[-1]
        ctx.w = _route_weights(query.view(1, d), norm_weight.view(1, d)) if _use_triton(sources[0]) else None
        y, lse = _forward_impl(list(sources), query.view(1, d), norm_weight.view(1, d), heads, eps, True, w=ctx.w)
        ctx.save_for_backward(query, norm_weight, y, lse, *sources)
        ctx.heads, ctx.eps, ctx.sink = heads, eps, sink
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        query, norm_weight, y, lse, *sources = ctx.saved_tensors
        d, n_tok = query.shape[-1], lse.shape[0]
        res = _backward_impl(sources, query.view(1, d), norm_weight.view(1, d), grad_y.reshape(1, n_tok, d),
                             lse.view(1, n_tok, ctx.heads), None, y, ctx.heads, ctx.eps, ctx.sink, w=ctx.w)
        return (res[0].view(query.shape), res[1].view(norm_weight.shape), None, None, None, *res[2:])


class _PartialFn(torch.autograd.Function):
    """grads (a _RowGrads, or None): the sites that read this call's rows write their
    gradients into it (returning None to autograd), and backward takes them."""

    @staticmethod
    def forward(ctx, queries, norm_weights, heads, eps, sink, grads, scales, *sources):
        ctx.w = _route_weights(queries, norm_weights) if _use_triton(sources[0]) else None
        o_dtype = torch.float32
        if grads is not None and sources[0].dtype == torch.bfloat16 and \
                _cfg(padded_width(queries.shape[-1], heads), heads > 1)["rows_bf16"]:
            o_dtype = torch.bfloat16  # direct rows: only the sites' kernels read o
        m, l, o, rstd = _forward_impl(list(sources), queries, norm_weights, heads, eps, False, want_rstd=True,
                                      scales=scales, w=ctx.w, o_dtype=o_dtype)
        ctx.save_for_backward(queries, norm_weights, m, rstd, *sources)
        ctx.heads, ctx.eps, ctx.sink, ctx.grads = heads, eps, sink, grads
        ctx.mark_non_differentiable(m)
        ctx.set_materialize_grads(False)
        return m, l, o

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_m, grad_l, grad_o):
        queries, norm_weights, m, rstd, *sources = ctx.saved_tensors
        S, d = queries.shape
        rows = ctx.grads.take() if ctx.grads is not None else None
        if rows is not None and grad_l is None and grad_o is None:
            # the sites' reads in final form: g, lse and -(g . y) per query
            res = _backward_impl(sources, queries, norm_weights, *rows, None, ctx.heads, ctx.eps, ctx.sink, rstd,
                                 w=ctx.w)
            return (res[0], res[1], None, None, None, None, None, *res[2:])
        if rows is not None:  # l or o reached by autograd too: the rows as gradients of l and o, added
            row_l, row_o = _RowGrads.as_partial(m, *rows)
            grad_l = row_l if grad_l is None else row_l + grad_l
            grad_o = row_o if grad_o is None else row_o + grad_o
        if grad_l is None and grad_o is None:
            return (None,) * (7 + len(sources))
        if grad_l is None:
            grad_l = torch.zeros_like(m)
        if grad_o is None:
            grad_o = m.new_zeros((S, m.shape[1], d))
        res = _backward_impl(sources, queries, norm_weights, grad_o, m, grad_l, None, ctx.heads, ctx.eps, ctx.sink,
                             rstd, w=ctx.w)
        return (res[0], res[1], None, None, None, None, None, *res[2:])


class PhaseOneRow(NamedTuple):
    """Row ``index`` of a :class:`PhaseOneRows`: what ``route_merge`` and ``finalize`` take
    for one site in place of a one-row :class:`Partial`."""
    rows: "PhaseOneRows"
    index: int


class _RowGrads:
    """What a phase-1 read's backward needs from its S sites, each site's row in final
    form: the site's upstream gradient g (M, d) as autograd gave it (no copy), the
    softmax statistic of its whole read, lse (M, H), and -(g . y) per head (M, H).

    A site's read is the phase-1 row merged with its own sources and normalised, so the
    gradient that reaches an old source through it is the final read's, over all its
    sources: a = e^(z - lse), dz = a (g . s - g . y). The phase-1 backward runs on these
    as they are (its kernels read the g rows through a pointer table), where the rows as
    gradients of (l, o) would be fp32 copies of g scaled by e^(m - lse), written by every
    site and read twice by phase 1 (``as_partial`` forms them where autograd also brings
    gradients of l or o). Sites write one row each (a row that several sites read gets
    each read, added up in ``take``); the phase-1 backward takes them. The
    autograd contexts hold this, never the read's outputs: an output referenced from its
    own node's context is a reference cycle that Python's collector cannot see."""

    def __init__(self, h_shape: tuple, device: torch.device):
        self.h_shape, self.device = h_shape, device  # (S, M, H)
        self.stat = self.off = None
        self.grads: dict[int, Tensor] = {}
        # further reads of a row already read (g, lse, -(g . y)), folded into it by ``take``
        self.more: dict[int, list[tuple[Tensor, Tensor, Tensor]]] = {}

    def row(self, i: int, g: Tensor) -> tuple[Tensor, Tensor]:
        """Record site i's upstream gradient g (M, d), contiguous; returns its lse and
        -(g . y) rows, (M, H) fp32, for the site to fill. A row read by several sites gets
        buffers of its own for each later read (``take`` adds them up)."""
        if self.stat is None:
            self.stat = _new(self.h_shape, torch.float32, self.device)
            self.off = _new(self.h_shape, torch.float32, self.device)
        if i not in self.grads:
            self.grads[i] = g
            return self.stat[i], self.off[i]
        stat = _new(self.h_shape[1:], torch.float32, self.device)
        off = _new(self.h_shape[1:], torch.float32, self.device)
        self.more.setdefault(i, []).append((g, stat, off))
        return stat, off

    def _fold(self, i: int, reads: list[tuple[Tensor, Tensor, Tensor]]) -> None:
        """Row i's later reads added into its first, in place: a read is the row's
        gradients e^(m - lse) g and e^(m - lse) (-(g . y)) per head, so two reads are one
        with lse = min(lse1, lse2) and g, -(g . y) each scaled by e^(lse - lse_k) <= 1."""
        S, M, H = self.h_shape
        g, stat, off = self.grads[i].float().view(M, H, -1), self.stat[i], self.off[i]
        for g2, stat2, off2 in reads:
            low = torch.minimum(stat, stat2)
            a, b = torch.exp(low - stat), torch.exp(low - stat2)
            g = a.unsqueeze(-1) * g + b.unsqueeze(-1) * g2.float().view(M, H, -1)
            off.copy_(a * off + b * off2)
            stat.copy_(low)
        self.grads[i] = g.view(M, -1)

    def take(self) -> tuple[list[Tensor], Tensor, Tensor] | None:
        """(g rows, lse (S, M, H), -(g . y) (S, M, H)), or None when no site wrote; the
        buffers are released. A row no site wrote reads zeros with lse = +inf (weight 0)."""
        for i, reads in self.more.items():
            self._fold(i, reads)
        grads, stat, off = self.grads, self.stat, self.off
        self.grads, self.stat, self.off, self.more = {}, None, None, {}
        if not grads:
            return None
        dtypes = {g.dtype for g in grads.values()}
        dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32
        first = next(iter(grads.values()))
        rows = []
        for i in range(self.h_shape[0]):
            g = grads.get(i)
            if g is None:
                g = torch.zeros_like(first, dtype=dtype)
                stat[i].fill_(float("inf"))
                off[i].zero_()
            rows.append(g.to(dtype))
        return rows, stat, off

    @staticmethod
    def as_partial(m: Tensor, rows: list[Tensor], stat: Tensor, off: Tensor) -> tuple[Tensor, Tensor]:
        """The rows as gradients of the read's (l, o), (S, M, H) and (S, M, d) fp32: per
        head e^(m - lse) (-(g . y)) and e^(m - lse) g."""
        S, M, H = stat.shape
        scale = torch.exp(m - stat)
        g = torch.stack([r.reshape(M, H, -1) for r in rows]).float()
        return scale * off, (scale.unsqueeze(-1) * g).view(S, M, -1)


class PhaseOneRows:
    """The S rows of a phase-1 read, one per site of a chunk (``route_partial_rows``).

    ``partial`` is the read, (m, l, o) of all S queries. On the eager Triton path
    (``direct``) each site's ``route_merge`` / ``finalize`` backward hands its row to the
    phase-1 backward in final form (its upstream gradient, lse and -(g . y); see
    ``_RowGrads``) and returns None to autograd. Rows taken as autograd views
    instead (``unbind``) get S separate gradients that autograd stacks: a copy of the
    chunk's whole fp32 block per chunk (3.0 ms of a 1B MHAR step on the H200, session 12).
    Elsewhere (the reference, torch.compile) ``view(i)`` gives the rows through one
    unbind per field."""

    def __init__(self, partial: Partial, grads: _RowGrads | None = None):
        self.partial, self.grads = partial, grads
        self._views = None

    @property
    def direct(self) -> bool:
        return self.grads is not None

    def __len__(self) -> int:
        return self.partial.o.shape[0]

    def __getitem__(self, i: int) -> PhaseOneRow:
        return PhaseOneRow(self, i)

    def view(self, i: int) -> Partial:
        """Row i as a one-row Partial of autograd views (one unbind per field for all rows)."""
        if self._views is None:
            p = self.partial
            self._views = [Partial(m.unsqueeze(0), l.unsqueeze(0), o.unsqueeze(0))
                           for m, l, o in zip(p.m.unbind(0), p.l.unbind(0), p.o.unbind(0))]
        return self._views[i]


class _MergeFn(torch.autograd.Function):
    """Phase 2 fused: the read of ``sources`` merged with a one-row phase-1 partial and
    normalised, in one kernel pass. Backward: the final read's backward over the new
    sources (the softmax statistic lse covers the partial's mass too, so its formulas
    are unchanged), and for the partial, per head, grad_o = e^(m - lse) g and
    grad_l = -e^(m - lse) (g . y), written by the same backward kernel; for a direct row
    only -(g . y), the row then handed over in final form (``_RowGrads``)."""

    @staticmethod
    def forward(ctx, m0, l0, o0, query, norm_weight, heads, eps, sink, row, scales, *sources):
        # row (grads, i): m0, l0, o0 are a whole phase-1 read (route_partial_rows), this
        # site's is row i, and its gradients go into grads (a _RowGrads). scales: a
        # KeyScales to hand the newest source's key-norm scales to (merge_scales), or None
        if row is not None:
            m0, l0, o0 = m0[row[1]], l0[row[1]], o0[row[1]]
        d = query.shape[-1]
        n_tok = o0.shape[-2]
        init = Partial(m0.reshape(n_tok, heads), l0.reshape(n_tok, heads), o0.reshape(n_tok, d))
        ctx.w = _route_weights(query.view(1, d), norm_weight.view(1, d))
        last = None if scales is None else torch.empty(n_tok, dtype=torch.float32, device=o0.device)
        y, lse = _triton_forward(list(sources), query.view(1, d), norm_weight.view(1, d), heads, eps, True, init,
                                 w=ctx.w, last_scale=last)
        if scales is not None:
            scales.put(sources[-1], last, eps)
        ctx.save_for_backward(query, norm_weight, y, lse, m0, *sources)
        ctx.heads, ctx.eps, ctx.sink, ctx.row = heads, eps, sink, row
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        query, norm_weight, y, lse, m0, *sources = ctx.saved_tensors
        heads, d, n_tok = ctx.heads, query.shape[-1], lse.shape[0]
        grad_y = grad_y.reshape(n_tok, d).contiguous()
        if ctx.row is not None:
            # a direct row: handed to phase 1 in final form (g, lse, and -(g . y), which the
            # same kernel writes); None to autograd
            stat, off = ctx.row[0].row(ctx.row[1], grad_y)
            partial = (None, stat, off)  # the kernel copies lse into stat
        else:  # the partial row's gradients, written by the same kernel (PARTIAL)
            grad_o = _new((1, n_tok, d), torch.float32, lse.device)
            grad_l = _new((1, n_tok, heads), torch.float32, lse.device)
            partial = (m0.reshape(n_tok, heads).contiguous(), grad_o, grad_l)
        res = _triton_backward(sources, query.view(1, d), norm_weight.view(1, d), grad_y.view(1, n_tok, d),
                               lse.view(1, n_tok, heads), None, y, heads, ctx.eps, ctx.sink, partial=partial, w=ctx.w)
        if ctx.row is not None:
            grad_l = grad_o = None
        return (None, grad_l, grad_o, res[0].view(query.shape), res[1].view(norm_weight.shape), None, None, None,
                None, None, *res[2:])


def _finalize_on_triton(l: Tensor, dtype: torch.dtype) -> bool:
    """finalize's kernels: where the routing op takes Triton, for fp32 partials and an
    output dtype the kernels write; not while torch.compile traces (it fuses the eager ops
    itself)."""
    return l.dtype == torch.float32 and dtype in KERNEL_DTYPES and not _compiling() and _use_triton(l)


class _FinalizeFn(torch.autograd.Function):
    """``reference.finalize`` (o / l per head), saving l and the output for backward
    instead of the fp32 o: a phase-1 row's o is a view of the whole (S, M, d) fp32 block,
    which saving it would keep alive until backward. grad_o = g / l and grad_l =
    -(g . x) / l per head; for a 16-bit output the second uses the rounded x (as the
    fused phase 2's backward does). On the Triton path one kernel each way; the eager ops
    below (a pass per op over (M, d) fp32 tensors) elsewhere.
    A direct row of a phase-1 read goes to that read's backward in final form
    (``_RowGrads``): g as it is, lse = m + log l and -(g . x) per head."""

    @staticmethod
    def forward(ctx, l, o, shape, dtype, row=None, m=None):
        # row (grads, i): l, o and m are a whole phase-1 read, this site's is row i, and
        # its gradients go into grads (a _RowGrads)
        if row is not None:
            l, o, m = l[row[1]:row[1] + 1], o[row[1]:row[1] + 1], m[row[1]]
        S, M, H = l.shape
        d = o.shape[-1]
        if o.dtype in (l.dtype, torch.bfloat16) and _finalize_on_triton(l, dtype):
            x = _triton_finalize(l, o, dtype).view(S, *shape)
        else:
            x = (o.view(S, M, H, d // H) / l.unsqueeze(-1)).view(S, *shape).to(dtype)
        ctx.save_for_backward(l, x, *([m] if row is not None else []))
        ctx.row = row
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        l, x, *m = ctx.saved_tensors
        S, M, H = l.shape
        d = x.shape[-1]
        if ctx.row is not None:  # the row to phase 1's backward in final form (None to autograd)
            g = g.reshape(M, d).contiguous()
            stat, off = ctx.row[0].row(ctx.row[1], g)
            torch.add(m[0], torch.log(l[0]), out=stat)
            if _finalize_on_triton(l, x.dtype):
                _triton_finalize_backward(g, x, l, None, off)
            else:
                xh = x.reshape(M, H, d // H).to(l.dtype)
                torch.sum(g.view(M, H, d // H).to(l.dtype) * xh, -1, out=off)
                off.neg_()
            return None, None, None, None, None, None
        if _finalize_on_triton(l, x.dtype):
            grad_l = _new((S, M, H), torch.float32, l.device)
            grad_o = _new((S, M, d), torch.float32, l.device)
            _triton_finalize_backward(g, x, l, grad_o, grad_l)
            return grad_l, grad_o, None, None, None, None
        inv = 1 / l.unsqueeze(-1)
        g = g.reshape(S, M, H, d // H)
        g = g.to(l.dtype)
        grad_o = (g * inv).view(S, M, d)
        grad_l = -(g * x.reshape(S, M, H, d // H).to(l.dtype)).sum(-1) * inv.squeeze(-1)
        return grad_l, grad_o, None, None, None, None


def finalize(p: Partial | PhaseOneRow, shape, dtype: torch.dtype) -> Tensor:
    """Normalise a partial read: x = o / l, reshaped to (S, *shape) in ``dtype``. Same
    values as :func:`mhar.routing.reference.finalize`; keeps l and x for backward, not o.
    A PhaseOneRow gives (1, *shape)."""
    if isinstance(p, PhaseOneRow):
        if p.rows.direct:
            part = p.rows.partial
            return _FinalizeFn.apply(part.l, part.o, tuple(shape), dtype, (p.rows.grads, p.index), part.m)
        p = p.rows.view(p.index)
    return _FinalizeFn.apply(p.l, p.o, tuple(shape), dtype)


def _compiling() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # pragma: no cover - old torch
        return False


# ---------------------------------------------------------------- public entry points

def _validate(srcs: list[Tensor], d: int, heads: int) -> None:
    if not srcs:
        raise ValueError("route needs at least one source")
    for i, s in enumerate(srcs):
        if not isinstance(s, Tensor) or s.dim() < 1:
            raise ValueError("every source must be a tensor of shape (..., d); got "
                             + (f"shape {tuple(s.shape)}" if isinstance(s, Tensor) else type(s).__name__))
        if s.shape[-1] != d:  # (named apart: the shape message showed two equal shapes)
            raise ValueError(f"source {i} has width {s.shape[-1]}, the query and norm weight d={d}")
        if s.shape != srcs[0].shape:
            raise ValueError(f"every source must have shape {tuple(srcs[0].shape)}; source {i} has {tuple(s.shape)}")
        if s.device != srcs[0].device or s.dtype != srcs[0].dtype:
            raise ValueError(f"every source must have the same device and dtype: source 0 is {srcs[0].dtype} on "
                             f"{srcs[0].device}, source {i} {s.dtype} on {s.device}")
    check_heads(d, heads)
    if not srcs[0].is_floating_point():
        raise ValueError(f"sources must be floating point; got {srcs[0].dtype}")


def _as_list(sources) -> list[Tensor]:
    if isinstance(sources, Tensor):
        return list(sources.unbind(0))  # views, no copy
    return list(sources)


def _check_sink(sink: SinkSpan | None, srcs: list[Tensor]) -> None:
    if sink is None:
        return
    if _compiling():
        raise RuntimeError("a GradientSink works in eager mode only; under torch.compile pass sink=None")
    if sink.count > len(srcs) or sink.start + sink.count > len(sink.sink.buffers):
        raise ValueError(f"sink span {sink.start}..{sink.start + sink.count - 1} does not fit {len(srcs)} sources "
                         f"and {len(sink.sink.buffers)} registered ones")


def route(sources, query: Tensor, norm_weight: Tensor, heads: int = 1, eps: float = KEY_NORM_EPS,
          sink: SinkSpan | None = None) -> Tensor:
    """One routing site: read N sources with H heads (see :mod:`mhar.routing.reference`).
    ``query``, ``norm_weight``: (d,). Each source (..., d). Returns (..., d) in the
    sources' dtype. Runs the fused kernels on CUDA, the reference elsewhere. ``sink``
    (eager only): the call's first sources are registered with a :class:`GradientSink`,
    which receives their gradients."""
    srcs = _as_list(sources)
    if query.dim() != 1 or norm_weight.shape != query.shape:
        raise ValueError(f"query and norm_weight must both be (d,); got {tuple(query.shape)} and {tuple(norm_weight.shape)}")
    _validate(srcs, query.shape[0], heads)
    _check_sink(sink, srcs)
    if _compiling():
        return route_op(srcs, query, norm_weight, heads, eps)[0]
    return _RouteFn.apply(query, norm_weight, heads, eps, sink, *srcs)


def route_merge(partial: Partial | PhaseOneRow, sources, query: Tensor, norm_weight: Tensor, heads: int = 1,
                eps: float = KEY_NORM_EPS, sink: SinkSpan | None = None, scales: KeyScales | None = None) -> Tensor:
    """Phase 2 of the two-phase read for one site: the read of ``sources`` merged exactly
    with ``partial`` (one row, a phase-1 read of other sources by the same query; or a
    row of ``route_partial_rows``) and normalised. Equals
    ``finalize(merge_partials(partial, route_partial(sources, ...)))``, which is what runs
    off CUDA and under torch.compile; on CUDA one kernel pass does it. scales: the
    stream's :class:`KeyScales` (the one its phase-1 calls take), where ``sources`` are
    the stream's newest, in order: with config "merge_scales" the kernel hands it the
    last source's key-norm scales."""
    srcs = _as_list(sources)
    if query.dim() != 1 or norm_weight.shape != query.shape:
        raise ValueError(f"query and norm_weight must both be (d,); got {tuple(query.shape)} and {tuple(norm_weight.shape)}")
    _validate(srcs, query.shape[0], heads)
    _check_sink(sink, srcs)
    row = None
    if isinstance(partial, PhaseOneRow):
        if partial.rows.direct:
            row, partial = (partial.rows.grads, partial.index), partial.rows.partial
        else:
            partial = partial.rows.view(partial.index)
    elif partial.o.shape[0] != 1:
        raise ValueError(f"route_merge takes a one-row partial; got {partial.o.shape[0]} rows")
    # the fused kernel reads the row at the sources' tokens: a partial of other tokens, width
    # or heads must not reach it (it would read past the row, or a wrong layout of it)
    d = query.shape[0]
    n_tok = srcs[0].numel() // d
    if partial.o.dim() != 3 or tuple(partial.o.shape[1:]) != (n_tok, d) or \
            tuple(partial.l.shape[1:]) != (n_tok, heads) or tuple(partial.m.shape[1:]) != (n_tok, heads):
        raise ValueError(f"route_merge: the partial read (o {tuple(partial.o.shape)}, l {tuple(partial.l.shape)}) "
                         f"does not match {n_tok} tokens of width {d} with {heads} heads")
    if row is None and (_compiling() or not _use_triton(srcs[0])):
        new = route_partial(srcs, query.view(1, -1), norm_weight.view(1, -1), heads, eps, sink)
        return _ref.finalize(_ref.merge_partials(partial, new), srcs[0].shape, srcs[0].dtype)[0]
    if scales is not None and not _cfg(padded_width(query.shape[0], heads), heads > 1)["merge_scales"]:
        scales = None
    return _MergeFn.apply(partial.m, partial.l, partial.o, query, norm_weight, heads, eps, sink, row, scales, *srcs)


def route_partial(sources, queries: Tensor, norm_weights: Tensor, heads: int = 1,
                  eps: float = KEY_NORM_EPS, sink: SinkSpan | None = None, scales: KeyScales | None = None) -> Partial:
    """Phase 1 of the two-phase read: S queries (S, d) over the same N sources, each
    source read once per call. Returns a :class:`Partial` (m, l, o) in fp32. scales: a
    :class:`KeyScales` shared by a forward's calls (eager Triton path; ignored elsewhere)."""
    srcs = _as_list(sources)
    if queries.dim() != 2 or norm_weights.shape != queries.shape:
        raise ValueError(f"queries and norm_weights must both be (S, d); got {tuple(queries.shape)} "
                         f"and {tuple(norm_weights.shape)}")
    _validate(srcs, queries.shape[1], heads)
    _check_sink(sink, srcs)
    if _compiling():
        m, l, o = route_partial_op(srcs, queries, norm_weights, heads, eps)
    else:
        m, l, o = _PartialFn.apply(queries, norm_weights, heads, eps, sink, None, scales, *srcs)
    return Partial(m, l, o)


def route_partial_rows(sources, queries: Tensor, norm_weights: Tensor, heads: int = 1,
                       eps: float = KEY_NORM_EPS, sink: SinkSpan | None = None,
                       scales: KeyScales | None = None) -> PhaseOneRows:
    """``route_partial`` for S sites that each take their row (``rows[i]``) to
    ``route_merge`` or ``finalize``: on the eager Triton path their gradients then go
    straight into one buffer for the phase-1 backward (see :class:`PhaseOneRows`), and
    with bf16 sources the read's o is bf16 (config "rows_bf16")."""
    srcs = _as_list(sources)
    if _compiling() or not srcs or not _use_triton(srcs[0]) or \
            not _cfg(padded_width(queries.shape[-1], heads), heads > 1)["direct_rows"]:
        return PhaseOneRows(route_partial(srcs, queries, norm_weights, heads, eps, sink, scales))
    if queries.dim() != 2 or norm_weights.shape != queries.shape:
        raise ValueError(f"queries and norm_weights must both be (S, d); got {tuple(queries.shape)} "
                         f"and {tuple(norm_weights.shape)}")
    _validate(srcs, queries.shape[1], heads)
    _check_sink(sink, srcs)
    S, d = queries.shape
    n_tok = srcs[0].numel() // d
    grads = _RowGrads((S, n_tok, heads), srcs[0].device)
    return PhaseOneRows(Partial(*_PartialFn.apply(queries, norm_weights, heads, eps, sink, grads, scales, *srcs)),
                        grads)
