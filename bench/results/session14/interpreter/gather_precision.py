"""The phase-1 gather's products at each precision, on the CPU through Triton's interpreter:
the sources' bf16 gradients of one phase-1 read (19 sources, 64 tokens, d = 160, 8 heads,
S = 8) against an fp64 reference, max relative error over the sources, three draws.
(The interpreter ignores tl.dot's input precision, so "tf32" there equals "tf32x3"; bf16
parts are real.) From the repository root:

    TRITON_INTERPRET=1 PYTHONPATH=src:tests/routing python bench/results/session14/interpreter/gather_precision.py
"""
import torch

from mhar import routing
from mhar.routing import op as rop
from mhar.routing import reference as R
from routing_checks import make_inputs, rel

routing.set_backend("triton")
gen = torch.Generator().manual_seed(0)
for draw in range(3):
    srcs, q, w = make_inputs(19, (64,), 160, torch.bfloat16, "cpu", S=8, gen=gen)
    go = torch.randn(8, 64, 160, generator=gen)
    ref = [s.detach().double().requires_grad_() for s in srcs]
    (R.route_partial(ref, q.detach().double(), w.detach().double(), 8).o * go.double()).sum().backward()
    errs = {}
    for prec in ("tf32x3", "bf16x3"):
        rop.TUNE = dict(gather_precision=prec)
        ours = [s.detach().clone().requires_grad_() for s in srcs]
        (routing.route_partial(ours, q.detach(), w.detach(), 8).o * go).sum().backward()
        errs[prec] = max(rel(a.grad.double(), b.grad) for a, b in zip(ours, ref))
    rop.TUNE = None
    print(f"draw {draw}: " + ", ".join(f"{p} {e:.3e}" for p, e in errs.items()))
