"""The fused COEF pass at 1024 with each head's lanes split over LS programs (offline
sm_90 compile of a variant; not a correct kernel as a whole, only its registers): every
program forms the head's logits and g.x over all 128 lanes, then d(q*g) and the sources'
gradients for its 128 / LS lanes only. The grid's second axis becomes heads x LS. Its
d(q*g) reads its lanes of the source rows a second time (an L1 hit on a GPU), also at LS 1,
so the LS 1 rows are not the library's pass (that is in fused_pass_1024_triton360.md).

    PYTHONPATH=src python bench/results/session51/offline/lane_split_1024.py   # triton 3.6: the GPU's
"""
import importlib.util
import os
import sys
import tempfile

import triton

sys.path.insert(0, "bench")
import compile_sm90 as c  # noqa: E402
from mhar.routing import triton_kernels as tk  # noqa: E402

EDITS = [
    ("                     GL: tl.constexpr = 64, W_LO: tl.constexpr = True):",
     "                     GL: tl.constexpr = 64, W_LO: tl.constexpr = True, LS: tl.constexpr = 1):"),
    ("    if SPLIT:\n        rh = tl.program_id(1) + tl.arange(0, HP)",
     "    half = tl.program_id(1) % LS\n    hid = tl.program_id(1) // LS\n    if SPLIT:\n        rh = hid + tl.arange(0, HP)"),
    ("    if SCALES:\n        dw_a = tl.zeros([HP, SP, DA], tl.float32)",
     "    if SCALES:\n        dw_a = tl.zeros([HP, SP, DA // LS], tl.float32)\n"
     "        cxh, cmxh = _dot_cols(rh, half * (DA // LS) + tl.arange(0, DA // LS), dh, H, 0, 2)"),
    ("                    for piece in tl.static_range(DA // GL):\n"
     "                        cg, cmg = _dot_cols(rh, tl.arange(0, GL), dh, H, piece * GL, 2)\n"
     "                        _coef_grads(G, gref, WB, GT, CT, a, rdz, c, k, k < n_src, t, row, tl.program_id(1), cg, cmg,",
     "                    for piece in tl.static_range(DA // GL // LS):\n"
     "                        cg, cmg = _dot_cols(rh, half * (DA // LS) + piece * GL + tl.arange(0, GL), dh, H, 0, 2)\n"
     "                        _coef_grads(G, gref, WB, GT, CT, a, rdz, c, k, k < n_src, t, row, hid, cg, cmg,"),
    ("                dw_a = _dot_split_left(r_hi, r_lo, xa, dw_a, PREC)\n                if DB > 0:",
     "                srch = tl.multiple_of(tl.load(table + k, mask=k < n_src, other=0).to(tl.pointer_type(elem)), ALIGN)\n"
     "                xh = tl.load((srch + row)[None, :, None] + cxh, mask=(k < n_src)[None, :, None] & cmxh, other=0.0)\n"
     "                dw_a = _dot_split_left(r_hi, r_lo, xh, dw_a, PREC)\n                if DB > 0:"),
    ("        tl.store(DW + dwrow + cxa, dw_a, mask=cmxa & q_on)", "        tl.store(DW + dwrow + cxh, dw_a, mask=cmxh & q_on)"),
]

src = open(tk.__file__).read()
at = src.index("def _coef_dot_kernel")
body = src[at:]
for old, new in EDITS:
    assert body.count(old) == 1, old
    body = body.replace(old, new)
path = os.path.join(tempfile.mkdtemp(), "kernels_lane_split.py")
open(path, "w").write(src[:at] + body)
spec = importlib.util.spec_from_file_location("kernels_lane_split", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

print(f"triton {triton.__version__}; LS 1 rows: the variant, not the library's pass (see the docstring)\n")
print("| lane split (programs a head) | stages | lanes a piece | registers | stack | shared bytes | programs an SM holds "
      "| SASS loop: instructions / barriers (one program) |")
print("|---|---|---|---|---|---|---|---|")
for ls in (1, 2, 4):
    for stages, lanes in ((2, 64), (2, 32), (2, 16), (1, 32), (1, 16)):
        if lanes > 128 // ls:
            continue
        cst = dict(d=1024, dh=128, H=8, HP=1, DA=128, DB=0, KS=16, SP=8, ALIGN=16, PREC="bf16x2", STAGES=stages,
                   SS_DOT=True, VH=False, SPLIT=True, SCALES=True, TOK=1, GRAD=True, GL=lanes, W_LO=False, G_EXACT=True,
                   PARTS=True, LS=ls)
        r = c.resources(mod._coef_dot_kernel, cst, 1, c.PARTS_POINTERS)
        fit = c.resident_per_sm(r["regs"], r["shared"], 1)
        print(f"| {ls} | {stages} | {lanes} | {r['regs']} | {r['stack']} | {r['shared']} | {fit['fit']} | "
              f"{r['sass_loops']} |", flush=True)
