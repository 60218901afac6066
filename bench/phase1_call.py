"""One phase-1 read at one shape, forward and backward, for a profiler to look at.

S queries over N sources (``route_partial``, the two-phase schedule's batched read), the
sources registered with a gradient sink that a one-query read over them has already
written (as in training, where later sites' backwards run first), so the phase-1
backward adds into running sums. Prints each routing kernel's time per call; under
``ncu`` pass ``--iters 1`` and filter by kernel name, e.g.::

    ncu --clock-control none --set full -k regex:'_fwd_dot|_coef_dot|_bwd_gather' \\
        python3 bench/phase1_call.py --d 1280 --n 41 --heads 8 --iters 1
"""

import argparse
import math

import torch

from mhar import routing


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=1280)
    ap.add_argument("--n", type=int, default=41, help="sources the S queries read")
    ap.add_argument("--queries", type=int, default=8, help="S, the chunk's sites")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=20, help="timed calls (1 under a profiler)")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "bench/phase1_call.py needs a CUDA GPU"
    routing.set_backend("auto")
    gen = torch.Generator(device="cuda").manual_seed(0)
    d, S = args.d, args.queries
    srcs = [torch.randn(args.tokens, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
            for _ in range(args.n)]
    q = (torch.randn(S + 1, d, device="cuda", generator=gen) * (2 / math.sqrt(d))).requires_grad_()
    g = (1 + 0.1 * torch.randn(S + 1, d, device="cuda", generator=gen)).requires_grad_()
    gy = torch.randn(args.tokens, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    go = torch.randn(S, args.tokens, d, device="cuda", generator=gen)

    def call():
        sink = routing.GradientSink()
        reg = [sink.register(s) for s in srcs]
        # with the sources' key-norm scales as a stream keeps them (computed here for all n
        # sources per call; a stream computes each source's once per step)
        part = routing.route_partial(reg, q[:S], g[:S], args.heads, sink=sink.span(0, args.n),
                                     scales=routing.KeyScales())
        # created after the phase-1 read, so its backward runs first and writes the sums
        y = routing.route(reg, q[S], g[S], args.heads, sink=sink.span(0, args.n))
        loss = (part.o * go).sum() + part.l.sum() + (y.float() * gy).sum()
        torch.autograd.grad(loss, [*srcs, q, g])

    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(args.iters):
            call()
        torch.cuda.synchronize()
    print(f"d={d} N={args.n} S={S} H={args.heads} tokens={args.tokens}: ms per call")
    for ev in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
        if "kernel" in ev.key and ev.device_time_total > 0:
            print(f"  {ev.device_time_total / 1e3 / args.iters:8.3f}  {ev.key[:90]}")


if __name__ == "__main__":
    main()
