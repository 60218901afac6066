"""Phase 1's forward with a head per program (`_fwd_dot_kernel`, SPLIT and SCALES, one warp,
2 stages, as launched at 1024 with 8 heads) compiled offline for sm_90 under register caps:
registers, stack (spills), SASS instructions per loop step; one token a step (more than
4 sources) and four (few sources, dot_tokens).

    PYTHONPATH=src python bench/results/session40/offline/compile_fwd_cap.py

Run with triton 3.9 (this machine's) and 3.6 (the GPU machine's); outputs beside it."""
import sys

import triton

sys.path.insert(0, "bench")
import compile_sm90 as c  # noqa: E402
from mhar.routing import triton_kernels as tk  # noqa: E402

print(f"triton {triton.__version__}")
print("| tokens a step | register cap | registers | stack | SASS loops: instructions / barriers |")
print("|---|---|---|---|---|")
for tok in (1, 4):
    for cap in (None, 168, 160):
        c.OPTIONS.clear()
        if cap:
            c.OPTIONS["maxnreg"] = cap
        cst = dict(d=1024, dh=128, H=8, HP=1, DA=128, DB=0, KS=16, SP=8, ALIGN=16, PREC="bf16x2", STAGES=2,
                   SPLIT=True, SCALES=True, TOK=tok)
        r = c.resources(tk._fwd_dot_kernel, cst, 1)
        print(f"| {tok} | {cap or 'none'} | {r['regs']} | {r['stack']} | {r['sass_loops']} |", flush=True)
