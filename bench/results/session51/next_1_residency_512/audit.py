"""Each entry of sweep_512.json audited offline at 512 with 8 heads (run with triton 3.6, the GPU's):
every persistent launch's registers, stack, shared bytes and waves under that entry's settings.

    PYTHONPATH=src python bench/results/session51/next_1_residency_512/audit.py"""
import json, sys
sys.path.insert(0, "bench")
import triton, compile_sm90 as c
from mhar.routing import op
sweep = json.load(open("bench/results/session51/next_1_residency_512/sweep_512.json"))
known = set(op._DEFAULTS[True])
print(f"triton {triton.__version__}")
for name, entry in sweep.items():
    assert set(entry) <= known, set(entry) - known
    op.TUNE = entry or None
    print(f"\n{name}")
    for lname, fn, cst, ptr, warps, cap, asked in c.persistent_launches(512, 8):
        r = c.resources(fn, cst, warps, ptr, cap, sass=False)
        f = c.resident_per_sm(r["regs"], r["shared"], warps)
        print(f"  {lname}: cap {cap or '-'}, {r['regs']} registers, {r['stack']} stack, {r['shared']} shared, "
              f"holds {f['fit']}, asked {asked}, waves {c.waves(asked, f['fit'])}", flush=True)
