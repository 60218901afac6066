"""Phase 2's backward into running sums at 512 with 8 heads under bwd24.json, offline
(run with triton 3.6 and 3.9): registers, programs an SM holds, waves.

    PYTHONPATH=src python bench/results/session51/next_2_bwd_waves_512/audit.py"""
import sys
sys.path.insert(0, "bench")
import triton, compile_sm90 as c
from mhar.routing import op
op.load_config_table("bench/results/session51/next_2_bwd_waves_512/bwd24.json")
for name, fn, cst, ptr, warps, cap, asked in c.persistent_launches(512, 8):
    if "phase 2" in name:
        r = c.resources(fn, cst, warps, ptr, cap, sass=False)
        f = c.resident_per_sm(r["regs"], r["shared"], warps)
        print(f"triton {triton.__version__}: {name}: {r['regs']} registers, holds {f['fit']}, asked {asked}, "
              f"waves {c.waves(asked, f['fit'])}")
