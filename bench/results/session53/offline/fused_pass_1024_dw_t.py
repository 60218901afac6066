"""Offline, sm_90: the fused COEF pass at 1024 with 8 heads (350M), as built and with
d(q*g) held transposed, (lanes, queries), from a second, transposed load of the source
tile (``_coef_dot_kernel``'s DW_T, config "coef_grads_dw_t"), over pipeline stages, lane
pieces and the cap of 168 that lets 12 one-warp programs fit an SM. Session 51's
"transposed" variant (../../session51/offline/) permuted the loaded tile instead.

    PYTHONPATH=src python bench/results/session53/offline/fused_pass_1024_dw_t.py   # triton 3.6
"""
import sys

import triton

sys.path.insert(0, "bench")
import compile_sm90 as c  # noqa: E402
from mhar.routing import triton_kernels as tk  # noqa: E402


def row(dw_t, stages, lanes, cap=None):
    cst = dict(d=1024, dh=128, H=8, HP=1, DA=128, DB=0, KS=16, SP=8, ALIGN=16, PREC="bf16x2", STAGES=stages, SS_DOT=True,
               VH=False, SPLIT=True, SCALES=True, TOK=1, GRAD=True, GL=lanes, W_LO=False, G_EXACT=True, PARTS=True,
               DW_T=dw_t)
    r = c.resources(tk._coef_dot_kernel, cst, 1, c.PARTS_POINTERS, cap)
    fit = c.resident_per_sm(r["regs"], r["shared"], 1)
    name = "d(q*g) transposed, from a transposed load" if dw_t else "as built"
    print(f"| {name} | {stages} | {lanes} | {cap or '-'} | {r['regs']} | {r['stack']} | {r['shared']} | "
          f"{fit['fit']} ({fit['registers']} / {fit['shared']}) | {r['sass_loops']} |", flush=True)


print(f"triton {triton.__version__}\n")
print("| kernel | stages | lanes a piece | cap | registers | stack | shared bytes | programs an SM holds "
      "(registers / shared) | SASS loop: instructions / barriers |")
print("|---|---|---|---|---|---|---|---|---|")
for stages in (2, 1):
    for lanes in (64, 16):
        row(False, stages, lanes)
        row(True, stages, lanes)
for lanes in (64, 32, 16):
    row(False, 1, lanes, 168)
    row(True, 1, lanes, 168)
