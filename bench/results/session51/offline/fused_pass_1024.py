"""Where the fused COEF pass's registers go at 1024 with 8 heads (350M), offline for sm_90:
the library's `_coef_dot_kernel` with GRAD as launched (one warp, w in bf16), and diagnostic
variants made by editing a copy of the kernels file (not correct kernels: each drops or
changes one part to see its registers):
- "no d(q*g)": the loop accumulates no d(q*g);
- "no gradient product": the loop forms no source gradients (no `_coef_grads` pieces);
- "d(q*g) transposed": d(q*g) held as (lanes, queries), from the tile permuted;
- "d(q*g) added into memory each step": not held across the loop, but added into the
  program's row of DW at every step (a load and a store of it a step);
- "d(q*g), one bf16 part": r dz as one bf16 part in its product.
Each over 1 and 2 pipeline stages and 64- and 16-lane pieces, with the programs an SM
holds (compile_sm90.resident_per_sm), and the library's pass under register caps.

    PYTHONPATH=src python bench/results/session51/offline/fused_pass_1024.py   # triton 3.6: the GPU's
"""
import importlib.util
import os
import sys
import tempfile

import triton

sys.path.insert(0, "bench")
import compile_sm90 as c  # noqa: E402
from mhar.routing import triton_kernels as tk  # noqa: E402

SRC = open(tk.__file__).read()
DW = '''            if SCALES:
                r_hi, r_lo = _operand(tl.permute(rdz, (0, 2, 1)), PREC)
                dw_a = _dot_split_left(r_hi, r_lo, xa, dw_a, PREC)'''
EDITS = {
    "no d(q*g)": [(DW, DW.replace("            if SCALES:", "            if GRAD:\n                pass\n            elif SCALES:"))],
    "no gradient product": [("for piece in tl.static_range(DA // GL):", "for piece in tl.static_range(0):")],
    "d(q*g) transposed": [
        ("    if SCALES:\n        dw_a = tl.zeros([HP, SP, DA], tl.float32)",
         "    if SCALES and not GRAD:\n        dw_a = tl.zeros([HP, SP, DA], tl.float32)"),
        (DW, DW.replace("            if SCALES:", "            if GRAD:\n                r_hi, r_lo = _operand(rdz, PREC)\n"
                        "                dw_a = _dot_split(tl.permute(xa, (0, 2, 1)), r_hi, r_lo, dw_a, PREC)\n"
                        "            elif SCALES:")),
        ("    if SCALES:\n        dwrow = (pid", "    if SCALES and not GRAD:\n        dwrow = (pid")],
    "d(q*g) added into memory each step": [
        (DW, DW.replace("            if SCALES:", "            if GRAD:\n"
                        "                r_hi, r_lo = _operand(tl.permute(rdz, (0, 2, 1)), PREC)\n"
                        "                dwp = DW + (pid.to(tl.int64) * n_q + rq[None, :, None]) * d + cxa\n"
                        "                dwm = cmxa & (rq[None, :, None] < n_q)\n"
                        "                acc = tl.load(dwp, mask=dwm, other=0.0)\n"
                        "                tl.store(dwp, _dot_split_left(r_hi, r_lo, xa, acc, PREC), mask=dwm)\n"
                        "            elif SCALES:")),
        ("    # this program's d(q*g) rows: DW[pid, q, h * dh + c]\n    if SCALES:",
         "    # this program's d(q*g) rows: DW[pid, q, h * dh + c]\n    if GRAD:\n        pass\n    elif SCALES:")],
    "d(q*g), one bf16 part": [(DW, DW.replace("            if SCALES:", "            if GRAD:\n                dw_a = tl.dot("
                                              "tl.permute(rdz, (0, 2, 1)).to(tl.bfloat16), xa, dw_a)\n            elif SCALES:"))],
}


def variant(edits):
    src = SRC
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    path = os.path.join(tempfile.mkdtemp(), "kernels_variant.py")
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location("kernels_variant", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row(name, mod, stages, lanes, cap=None):
    cst = dict(d=1024, dh=128, H=8, HP=1, DA=128, DB=0, KS=16, SP=8, ALIGN=16, PREC="bf16x2", STAGES=stages, SS_DOT=True,
               VH=False, SPLIT=True, SCALES=True, TOK=1, GRAD=True, GL=lanes, W_LO=False, G_EXACT=True, PARTS=True)
    r = c.resources(mod._coef_dot_kernel, cst, 1, c.PARTS_POINTERS, cap)
    fit = c.resident_per_sm(r["regs"], r["shared"], 1)
    print(f"| {name} | {stages} | {lanes} | {cap or '-'} | {r['regs']} | {r['stack']} | {r['shared']} | "
          f"{fit['fit']} ({fit['registers']} / {fit['shared']}) | {r['sass_loops']} |", flush=True)


print(f"triton {triton.__version__}\n")
print("| kernel | stages | lanes a piece | cap | registers | stack | shared bytes | programs an SM holds "
      "(registers / shared) | SASS loop: instructions / barriers |")
print("|---|---|---|---|---|---|---|---|---|")
for stages in (2, 1):
    for lanes in (64, 16):
        row("as built", tk, stages, lanes)
for name, edits in EDITS.items():
    mod = variant(edits)
    for stages in (2, 1):
        for lanes in (64, 16):
            row(name, mod, stages, lanes)
for lanes in (64, 32, 16):
    for cap in (200, 192):
        row("as built", tk, 2, lanes, cap)
