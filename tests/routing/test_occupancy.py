"""Persistent grids in whole waves (mhar.routing.occupancy, op's _n_programs and
_note_fit): CUDA's occupancy rule against what ncu reported on the H200, other GPUs'
limits, and the op's sizing of a launch once its compiled kernel has told what an SM holds
of it. No GPU: the device is faked where the op asks torch about it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mhar.routing import occupancy, op

H200 = SimpleNamespace(major=9, minor=0, multi_processor_count=132, shared_memory_per_multiprocessor=233472,
                       max_threads_per_multi_processor=2048, warp_size=32)
L40S = SimpleNamespace(major=8, minor=9, multi_processor_count=142, shared_memory_per_multiprocessor=102400,
                       max_threads_per_multi_processor=1536, warp_size=32)


def fit(registers, shared, warps, sm=occupancy.H100):
    return occupancy.resident_per_sm(registers, shared, warps, sm)["fit"]


def test_resident_per_sm_matches_the_h200():
    """The rule against what ncu reported on the H200, and the cases it explains."""
    assert fit(89, 0, 2) == 10  # phase 2's forward: ncu, 10 two-warp programs an SM (session 42)
    assert fit(232, 32, 1) == 8  # phase 2's backward into sums: ncu, 8 one-warp programs (session 42)
    assert fit(168, 12352, 1) == 12  # phase 1's forward at 1024, capped at 168 for twelve
    assert fit(224, 23360, 1) == 8  # session 40's nine an SM at a cap of 224: the ninth ran as a second wave
    # no register count gives 9-11 one-warp programs: 169-256 registers hold 2 a sub-partition
    assert {occupancy.resident_per_sm(r, 0, 1)["registers"] for r in range(169, 257)} == {8}
    assert fit(128, 8192, 1) == 16
    assert occupancy.resident_per_sm(128, 19776, 1)["shared"] == 11  # the fused COEF pass's 2 stages at 1024
    assert fit(32, 0, 1) == 32  # at most 32 programs an SM on sm_90


def test_other_gpus_hold_what_their_limits_allow():
    """An L40S (sm_89: 100 KB of shared memory, 24 programs and 48 warps an SM) from its
    device properties; the fused COEF pass at 1024 as sm_86 compiles it (240 registers,
    19,776 shared bytes) holds 4 there, 8 on an H200."""
    assert occupancy.sm_limits(H200) == occupancy.H100
    l40s = occupancy.sm_limits(L40S)
    assert (l40s.shared, l40s.programs, l40s.warps) == (102400, 24, 48)
    assert fit(240, 19776, 1, l40s) == 4 and fit(240, 19776, 1) == 8
    # 32 registers: 64 warps by registers; 24 programs and 48 warps bound it
    assert fit(32, 0, 1, l40s) == 24 and fit(32, 0, 2, l40s) == 24 and fit(32, 0, 4, l40s) == 12
    unknown = occupancy.sm_limits(SimpleNamespace(**{**vars(L40S), "major": 7, "minor": 1}))
    assert unknown.programs == 16 and unknown.shared_reserved == 0
    # torch before 2.7 does not report the shared memory per SM: no limits, the config stands
    assert occupancy.sm_limits(SimpleNamespace(major=9, minor=0, max_threads_per_multi_processor=2048)) is None


@pytest.mark.parametrize("asked,held,launched", [(16, 8, 16), (16, 12, 12), (12, 7, 7), (8, 12, 8), (9, 8, 8),
                                                 (24, 12, 24), (16, 0, 16), (2, 1, 2), (3, 2, 2)])
def test_whole_waves(asked, held, launched):
    assert occupancy.whole_waves(asked, held) == launched


@pytest.fixture
def cuda0(monkeypatch):
    """A fake H200 as cuda:0 for the op's host logic: its properties, fresh caches."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda idx: H200)
    for cache in ("_FIT", "_SM_LIMITS", "_SM_COUNT"):
        monkeypatch.setattr(op, cache, {})
    return torch.device("cuda", 0)


def test_a_launch_is_sized_by_what_its_compiled_kernel_holds(cuda0):
    key = op._launch_key(SimpleNamespace(fn=SimpleNamespace(__name__="_bwd_kernel")), cuda0, torch.bfloat16,
                         {"d": 512, "ACCUM": True}, 2, None)
    assert op._n_programs(cuda0, 10**6, 16, launch=key) == 132 * 16  # nothing known yet: as configured
    # triton 3.9's phase 2 backward at 512: 168 registers, 12 held, 16 asked (a partial wave)
    op._note_fit(key, SimpleNamespace(n_regs=168, metadata=SimpleNamespace(shared=64, num_warps=1)), cuda0)
    assert op._FIT[key] == 12
    assert op._n_programs(cuda0, 10**6, 16, launch=key) == 132 * 12
    assert op._n_programs(cuda0, 10**6, 16, share=8, launch=key) == 132 * 12 // 8  # a grid's second axis shares it
    assert op._n_programs(cuda0, 100, 16, launch=key) == 100  # never more programs than tiles
    assert op._n_programs(cuda0, 10**6, 24, launch=key) == 132 * 24  # two whole waves: as asked
    assert op._n_programs(cuda0, 10**6, 16) == 132 * 16  # another launch, no key
    # noted once: a later compile under the same key does not change it
    op._note_fit(key, SimpleNamespace(n_regs=240, metadata=SimpleNamespace(shared=64, num_warps=1)), cuda0)
    assert op._FIT[key] == 12


def test_a_kernel_that_does_not_tell_keeps_the_config(cuda0):
    key = ("_fwd_dot_kernel",)
    op._note_fit(key, None, cuda0)  # e.g. a triton whose launch returns no compiled kernel
    assert op._FIT[key] == 0 and op._n_programs(cuda0, 10**6, 12, launch=key) == 132 * 12
    op._note_fit(("x",), SimpleNamespace(n_regs=168, metadata=SimpleNamespace(shared=0, num_warps=1)),
                 torch.device("cpu"))
    assert ("x",) not in op._FIT  # the CPU's interpreter: no SMs


def test_a_torch_without_shared_memory_per_sm_keeps_the_config(cuda0, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda idx: SimpleNamespace(
        major=9, minor=0, multi_processor_count=132, max_threads_per_multi_processor=2048))
    op._note_fit(("k",), SimpleNamespace(n_regs=168, metadata=SimpleNamespace(shared=64, num_warps=1)), cuda0)
    assert op._FIT[("k",)] == 0 and op._n_programs(cuda0, 10**6, 16, launch=("k",)) == 132 * 16
