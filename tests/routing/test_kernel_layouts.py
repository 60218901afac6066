"""The per-query routing kernels compiled offline for sm_90 (no GPU): their source loops
convert no register layouts. A conversion there is a shared-memory round trip per source;
at d = 1280 with 8 heads they cost the one-pass call 11% over one head before session 13
(docs/kernels.md, "Tiles"). The tiles' axis order follows triton's order for tied axes,
which changed in 3.7, so the check runs on the triton versions it was written against
(3.6-3.9) and skips on others, whose layouts nobody has looked at yet."""

from __future__ import annotations

import os
import sys

import pytest

triton = pytest.importorskip("triton")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

KNOWN_TRITON = {(3, 6), (3, 7), (3, 8), (3, 9)}


@pytest.fixture(scope="module")
def compiler():
    version = tuple(int(v) for v in triton.__version__.split(".")[:2])
    if version not in KNOWN_TRITON:
        pytest.skip(f"triton {triton.__version__}: the tiles' layouts were checked on 3.6-3.9 only")
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        pytest.skip("this triton has no bundled NVIDIA toolchain")
    import compile_sm90

    return compile_sm90


@pytest.mark.parametrize("d,heads", [(1280, 8), (1280, 1), (1024, 8)])
def test_source_loops_convert_no_layouts(compiler, d, heads):
    from mhar.routing import triton_kernels as tk

    tile = dict(compiler.tile(d, heads), BM=1, PF=1)
    # (kernel, constexprs, pointer types, how deep its source loop is nested): the
    # backward's runs inside its loop over token tiles; phase 2's backward (PARTIAL) also
    # stores the phase-1 row's gradients once per tile, outside the source loop
    kernels = {"forward": (tk._fwd_kernel, dict(tile, FINAL=True), None, 1)}
    for accum in (False, True):
        kernels[f"backward{' into sums' if accum else ''}"] = (
            tk._bwd_kernel, dict(tile, SINGLE=True, FINAL=True, ACCUM=accum, COEF=False, PARTIAL=True),
            {"G": "*bf16"}, 2)
    for name, (fn, constexprs, pointers, nesting) in kernels.items():
        ttgir = compiler.resources(fn, constexprs, 1, pointers)["ttgir"]
        found = compiler.loop_conversions(ttgir, nesting)
        assert found == "0", f"{name} at d={d}, H={heads}: {found} layout conversions in its source loop"
