"""Persistent grids in whole waves: how many programs of a compiled kernel one SM holds.

The routing's persistent kernels (phase 1's product kernels, the fused COEF pass, the
backwards that loop over token tiles) launch a configured number of programs per SM,
each looping over its share of the tokens. When an SM holds fewer of them at once than
asked, and not a whole fraction of them, the last wave runs part-full while each of its
programs still holds a full share of the work. On the H200 such launches measured
1.6-1.8x slower (sessions 40 and 41, ``bench/results/step_h200.md``). The configs were
tuned there with triton 3.6, where every launch runs in whole waves
(``bench/compile_sm90.py --kernels residency``). Another triton or another GPU compiles
the same kernels to other registers and shared memory, so the op reads what each
compiled kernel fits on an SM after its first launch, and later launches of it ask for
a whole number of waves (``whole_waves``).

The rule is CUDA's occupancy calculator (``cuda_occupancy.h``, which ships with
triton: ``cudaOccMaxBlocksPerSMRegsLimit`` and ``cudaOccMaxBlocksPerSMSmemLimit``).
Registers go to whole warps in units of 256, and each of the SM's 4 sub-partitions
holds its warps in its own quarter of the register file. Shared memory per program is
its own plus what the driver reserves (1 KB from sm_80 on), in 128-byte units.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SMLimits:
    """What one SM holds. The defaults are sm_90's (H100 / H200)."""

    registers: int = 65536
    sub_partitions: int = 4
    register_unit: int = 256
    shared: int = 233472  # 228 KB
    shared_reserved: int = 1024
    shared_unit: int = 128
    programs: int = 32
    warps: int = 64


H100 = SMLimits()

# resident blocks per SM by compute capability (the CUDA programming guide's table of
# technical specifications); torch's device properties do not report it
_MAX_PROGRAMS = {(7, 0): 32, (7, 2): 32, (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24, (9, 0): 32}


def sm_limits(props) -> SMLimits | None:
    """An SM's limits from ``torch.cuda.get_device_properties``; a compute capability
    missing from the table holds at most 16 programs (the smallest in it). None where
    torch does not report the shared memory per SM (before torch 2.7)."""
    shared = getattr(props, "shared_memory_per_multiprocessor", None)
    if shared is None:
        return None
    major, minor = props.major, props.minor
    return SMLimits(registers=getattr(props, "regs_per_multiprocessor", 65536), shared=shared,
                    shared_reserved=1024 if major >= 8 else 0,
                    programs=_MAX_PROGRAMS.get((major, minor), 16),
                    warps=props.max_threads_per_multi_processor // getattr(props, "warp_size", 32))


def resident_per_sm(registers: int, shared: int, warps: int, sm: SMLimits = H100) -> dict:
    """Programs of ``warps`` warps, ``registers`` per thread and ``shared`` bytes each,
    that one SM holds at once: as limited by registers, by shared memory, and both
    together ("fit"). On sm_90 a one-warp program of 169-256 registers fits 2 a
    sub-partition (8 an SM) whatever the count, 129-168 fit 3 (12), up to 128 fit 4 (16):
    no register count gives 9-11."""
    per_warp = -(-max(registers, 1) * 32 // sm.register_unit) * sm.register_unit
    warps_held = (sm.registers // sm.sub_partitions // per_warp) * sm.sub_partitions
    by_registers = warps_held // warps
    per_program = -(-(shared + sm.shared_reserved) // sm.shared_unit) * sm.shared_unit
    by_shared = sm.shared // per_program
    fit = min(by_registers, by_shared, sm.programs, sm.warps // warps)
    return {"registers": by_registers, "shared": by_shared, "fit": fit}


def whole_waves(asked: int, held: int) -> int:
    """Programs per SM to launch when the config asks for ``asked`` and an SM holds
    ``held`` at once: as asked when that is one wave or a whole number of them (or
    ``held`` is unknown, 0), else the whole waves below it (at least one)."""
    if held <= 0 or asked <= held or asked % held == 0:
        return asked
    return asked // held * held
