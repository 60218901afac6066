"""Offline sm_90 compile (no GPU) of the few-source kernels of 196b982, reverted in 2fe7c9a:
registers, SASS instructions per loop iteration and warp, opcodes (bench/compile_sm90.py's
resources()). Run from a checkout of 196b982: git worktree add /tmp/few 196b982 && cd /tmp/few &&
PYTHONPATH=src python <this file>. Ran with triton 3.9.0 (this machine's); output in
compile_few_sm90.txt."""
import sys
sys.argv=["x"]
sys.path.insert(0, "bench")
import compile_sm90 as c
from mhar.routing import triton_kernels as tk
for name, fn, extra in [("fwd", tk._fwd_few_kernel, {}), ("coef", tk._coef_few_kernel, {}), ("gather", tk._gather_few_kernel, {"ACCUM": True})]:
    for BT, w in [(4, 4), (2, 4), (4, 8)]:
        r = c.resources(fn, dict(d=1024, dh=128, H=8, DH=128, SP=8, BT=BT, ALIGN=16, **extra), w)
        print(name, BT, w, {k: v for k, v in r.items() if k not in ("sass", "ttgir")})
