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


def test_waves_tells_whole_from_partial(compiler):
    assert compiler.waves(16, 8) == "2" and compiler.waves(9, 8) == "1.12: a partial wave"


# Partial waves that a triton other than the GPU machine's (3.6, where the settings were
# measured) compiles into, found offline and not yet measured on a GPU; any other partial
# wave fails, and so does one of these that goes away (update this then). Triton 3.9 compiles
# phase 2's backward at 512 to 168 registers (3.6: 240, 8 held, two whole waves). The op
# launches whole waves of it after its first launch (12; occupancy.whole_waves), but the
# configs are meant to be what runs where they were measured.
KNOWN_PARTIAL = {((3, 9), 512, "phase 2 backward into running sums"): "12 held, 16 asked"}


@pytest.mark.parametrize("d", [512, 1024, 1280])
def test_persistent_launches_run_in_whole_waves(compiler, d):
    """Every persistent routing launch at the paper widths with 8 heads, as the library
    configures it, asks for a whole number of the waves an SM holds: a partial last wave
    runs its programs at a fraction of the SM's occupancy, each with a full share of the
    work (session 40: nine one-warp programs an SM at 224 registers, 1.7-1.8x slower;
    session 41: the fused COEF pass at 1280 with 29,504 shared bytes, 7 held and 8 asked,
    4.54 against 2.84 ms)."""
    version = tuple(int(v) for v in triton.__version__.split(".")[:2])
    partial = {}
    for name, fn, constexprs, pointers, warps, cap, asked in compiler.persistent_launches(d, 8):
        r = compiler.resources(fn, constexprs, warps, pointers, cap, sass=False)
        held = compiler.resident_per_sm(r["regs"], r["shared"], warps)["fit"]
        assert held > 0, f"{name}: no program fits an SM ({r['regs']} registers, {r['shared']} shared bytes)"
        if asked > held and asked % held:
            partial[(version, d, name)] = f"{held} held, {asked} asked"
    known = {k: v for k, v in KNOWN_PARTIAL.items() if k[:2] == (version, d)}
    assert partial == known, f"partial last waves at d={d} on triton {triton.__version__}: {partial}"
