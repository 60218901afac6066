"""Registers of the deferred reads kernel (_deferred_bwd_kernel, code at 9aed8e5), compiled
offline for sm_90 at 1024 with 8 heads and 8 reads, by tokens per tile, warps and dw form.
Run from a checkout of 9aed8e5:  PYTHONPATH=src python <this file>"""
import sys

sys.path.insert(0, "bench")
import compile_sm90 as c  # noqa: E402
from mhar.routing import triton_kernels as tk  # noqa: E402

ptrs = {"X": "*bf16", "DEST": "*bf16", "RDZ": "*bf16"}
print("| dw form | tokens | warps | registers | stack | 2-byte global accesses |")
print("|---|---|---|---|---|---|")
for dw in (1, 2, 3, 0):
    for bm, w in [(1, 8), (2, 8), (4, 8), (1, 4), (2, 4), (4, 4)]:
        r = c.resources(tk._deferred_bwd_kernel, dict(d=1024, H=8, DH=128, BM=bm, SP=8, ALIGN=16, ACCUM=True,
                                                      CLAIM=False, DW_ON=dw), w, ptrs)
        print(f"| {dw} | {bm} | {w} | {r['regs']} | {r['stack']} | {r['b16']} |", flush=True)
r = c.resources(tk._deferred_dw_kernel, dict(d=1024, H=8, DH=128, SP=8, M=16, BT=64), 4, {"X": "*bf16", "RDZ": "*bf16"})
print(f"\n_deferred_dw_kernel, 64 tokens, 4 warps: {r['regs']} registers, {r['stack']} stack")
