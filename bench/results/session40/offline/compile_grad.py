"""The fused COEF pass (`_coef_dot_kernel` with GRAD, a head per program, one warp, 2
stages, as launched at 1024 / 1280 / 512 with 8 heads) compiled offline for sm_90: registers,
stack, shared memory, 16-byte and 2-byte global memory ops, SASS instructions per loop step.
With a path argument, that file's kernels instead of the library's (the code before
the alignment fix: ``git show 16bcb0c:src/mhar/routing/triton_kernels.py > before.py``;
the output's "kernels from" lines name the copy it ran on, since removed).

    PYTHONPATH=src python bench/results/session40/offline/compile_grad.py [KERNELS.py]

Run with triton 3.9 (this machine's) and 3.6 (the GPU machine's); outputs beside it."""
import importlib.util
import sys

import triton

sys.path.insert(0, "bench")
import compile_sm90 as c  # noqa: E402
from mhar.routing import triton_kernels as tk  # noqa: E402

if len(sys.argv) > 1:
    spec = importlib.util.spec_from_file_location("kernels_under_test", sys.argv[1])
    tk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tk)
print(f"triton {triton.__version__}, kernels from {sys.argv[1] if len(sys.argv) > 1 else 'the library'}")
print("| d | lanes per piece | registers | stack | shared bytes | 16-byte / 2-byte memory ops | SASS loop: instructions / barriers |")
print("|---|---|---|---|---|---|---|")
for d, dh, da, db, gl in ((1024, 128, 128, 0, 64), (1024, 128, 128, 0, 32), (1280, 160, 128, 32, 64), (512, 64, 64, 0, 64)):
    cst = dict(d=d, dh=dh, H=8, HP=1, DA=da, DB=db, KS=16, SP=8, ALIGN=16, PREC="bf16x2", STAGES=2, SPLIT=True,
               SCALES=True, TOK=1, GRAD=True, GL=gl, G_EXACT=True, PARTS=True)
    r = c.resources(tk._coef_dot_kernel, cst, 1, c.PARTS_POINTERS)
    print(f"| {d} | {gl} | {r['regs']} | {r['stack']} | {r['shared']} | {r['v4']} / {r['b16']} | {r['sass_loops']} |",
          flush=True)
