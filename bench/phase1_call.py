"""One phase-1 read at one shape, forward and backward, for a profiler to look at.

S queries over N sources (``route_partial``, the two-phase schedule's batched read), the
sources registered with a gradient sink that a one-query read over them has already
written (as in training, where later sites' backwards run first), so the phase-1
backward adds into running sums. Prints each routing kernel's time per call; under
``ncu`` pass ``--iters 1`` and filter by kernel name, e.g.::

    ncu --clock-control none --set full -k regex:'_fwd_dot|_coef_dot|_bwd_gather' \\
        python3 bench/phase1_call.py --d 1280 --n 41 --heads 8 --iters 1

``--direct-rows`` reads as the training step's two-phase schedule does: each site's row
finalized from ``route_partial_rows`` (bf16 rows for bf16 sources, their gradients handed
straight to the phase-1 backward in bf16: the gather's exact products and the COEF pass's
coefficient parts). Without it the read is ``route_partial``'s fp32 partial, whose fp32
gradients take the other kernel variants.

``--sweep FILE`` times the same read under several routing configs in one process: FILE
is a JSON object of named overrides (each applied as ``mhar.routing.op.TUNE``), and
``--n`` may list several source counts. One row per (sources, config) with phase 1's three
kernels (forward, COEF pass, gather) and all routing kernels, ms per call.
"""

import argparse
import json
import math

import torch

from mhar import routing


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=1280)
    ap.add_argument("--n", default="41", help="sources the S queries read (a comma list with --sweep)")
    ap.add_argument("--queries", type=int, default=8, help="S, the chunk's sites")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=20, help="timed calls (1 under a profiler)")
    ap.add_argument("--direct-rows", action="store_true", help="rows as training takes them (see above)")
    ap.add_argument("--sweep", help="JSON file of named routing-config overrides to time side by side")
    args = ap.parse_args()
    counts = [int(n) for n in args.n.split(",")]
    if len(counts) > 1 and not args.sweep:
        ap.error("several --n need --sweep")
    assert torch.cuda.is_available(), "bench/phase1_call.py needs a CUDA GPU"
    routing.set_backend("auto")
    gen = torch.Generator(device="cuda").manual_seed(0)
    d, S = args.d, args.queries
    srcs = [torch.randn(args.tokens, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
            for _ in range(max(counts))]
    q = (torch.randn(S + 1, d, device="cuda", generator=gen) * (2 / math.sqrt(d))).requires_grad_()
    g = (1 + 0.1 * torch.randn(S + 1, d, device="cuda", generator=gen)).requires_grad_()
    gy = torch.randn(args.tokens, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    go = torch.randn(S, args.tokens, d, device="cuda", generator=gen)
    if args.direct_rows:
        go = go.bfloat16()

    def call(n):
        sink = routing.GradientSink()
        reg = [sink.register(s) for s in srcs[:n]]
        # with the sources' key-norm scales as a stream keeps them (computed here for all n
        # sources per call; a stream computes each source's once per step)
        if args.direct_rows:
            rows = routing.route_partial_rows(reg, q[:S], g[:S], args.heads, sink=sink.span(0, n),
                                              scales=routing.KeyScales())
            loss = sum((routing.finalize(rows[i], (args.tokens, d), torch.bfloat16)[0].float() * go[i]).sum()
                       for i in range(S))
        else:
            part = routing.route_partial(reg, q[:S], g[:S], args.heads, sink=sink.span(0, n),
                                         scales=routing.KeyScales())
            loss = (part.o * go).sum() + part.l.sum()
        # created after the phase-1 read, so its backward runs first and writes the sums
        y = routing.route(reg, q[S], g[S], args.heads, sink=sink.span(0, n))
        loss = loss + (y.float() * gy).sum()
        torch.autograd.grad(loss, [*srcs[:n], q, g])

    def kernel_times(n):
        """{kernel name: ms per call} over args.iters calls, after one untimed call."""
        call(n)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(args.iters):
                call(n)
            torch.cuda.synchronize()
        return {ev.key: ev.device_time_total / 1e3 / args.iters for ev in prof.key_averages()
                if "kernel" in ev.key and ev.device_time_total > 0}

    rows = "direct rows (the training step's)" if args.direct_rows else "fp32 partial (not the training step's variant)"
    if not args.sweep:
        print(f"d={d} N={counts[0]} S={S} H={args.heads} tokens={args.tokens}, {rows}: ms per call")
        for key, ms in sorted(kernel_times(counts[0]).items(), key=lambda kv: -kv[1]):
            print(f"  {ms:8.3f}  {key[:90]}")
        return
    from mhar.routing import op

    with open(args.sweep) as f:
        configs = json.load(f)
    print(f"d={d} S={S} H={args.heads} tokens={args.tokens}, {rows}, {args.iters} calls: ms per call")
    print("| sources | config | forward | COEF pass | gather | routing kernels |")
    print("|---|---|---|---|---|---|")
    for n in counts:
        for name, cfg in configs.items():
            op.TUNE = cfg or None
            try:
                times = kernel_times(n)
            finally:
                op.TUNE = None
            parts = [sum(ms for key, ms in times.items() if part in key)
                     for part in ("_fwd_dot", "_coef_dot", "_bwd_gather")]
            routed = sum(ms for key, ms in times.items() if key.startswith("_"))  # triton kernels
            print(f"| {n} | {name} | " + " | ".join(f"{ms:.3f}" for ms in parts) + f" | {routed:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
