"""Host time of one routing call (forward + backward) on a GPU: where the CPU spends it.

At small widths a routing call costs more host time (Python, autograd, launches) than
kernel time, so the GPU waits. This measures, per call, over ``--iters`` calls queued
without synchronising:

* host ms: CPU time to issue one call (the GPU never waits when this is below the
  kernel time);
* wall ms: elapsed time per call including the final synchronise;
* the CUDA runtime calls per call (kernel launches, copies, host allocations,
  synchronisations) from torch.profiler;
* the top Python functions by own time (cProfile), written to ``<out>/host_<case>.txt``.

Variants: ``plain`` (leaf sources, autograd returns one gradient per source) and
``sink`` (sources registered with a GradientSink, gradients summed in the backward
kernel). The ``sink`` call registers its N sources on every call, which a stream does
once per source per step, so its host time is an upper bound for a stream's call.

    PYTHONPATH=src python bench/host_overhead.py --shapes 512/25,1024/49 --heads 8 --out $OUT
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import time
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from mhar import routing


def make_call(d, n, tokens, heads, variant):
    g = torch.Generator(device="cuda").manual_seed(0)
    srcs = [torch.randn(tokens, d, device="cuda", generator=g).to(torch.bfloat16).requires_grad_() for _ in range(n)]
    q = (torch.randn(d, device="cuda", generator=g) * (2 / math.sqrt(d))).requires_grad_()
    w = torch.ones(d, device="cuda").requires_grad_()
    gy = torch.randn(tokens, d, device="cuda", generator=g).to(torch.bfloat16)

    def call():
        if variant == "sink":
            sink = routing.GradientSink()
            reg = [sink.register(s) for s in srcs]
            y = routing.route(reg, q, w, heads, sink=sink.span(0, n))
        else:
            y = routing.route(srcs, q, w, heads)
        return torch.autograd.grad(y, [*srcs, q, w], gy)

    return call


def measure(call, iters):
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    host = (time.perf_counter() - t0) / iters
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / iters
    return host * 1e3, wall * 1e3


def runtime_calls(call, iters):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            call()
        torch.cuda.synchronize()
    counts, cpu_us, gpu_us = Counter(), Counter(), 0.0
    for e in prof.key_averages():
        if e.key.startswith("cuda") or e.key.startswith("cu"):
            counts[e.key] += e.count
            cpu_us[e.key] += e.cpu_time_total
        gpu_us += getattr(e, "self_device_time_total", 0.0) or 0.0
    per = {k: (counts[k] / iters, cpu_us[k] / iters) for k in counts}
    return per, gpu_us / iters / 1e3


def python_profile(call, iters, rows=25):
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(iters):
        call()
    torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(rows)
    return s.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="512/25,1024/49")
    ap.add_argument("--heads", default="8")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--variants", default="plain,sink")
    ap.add_argument("--out", default="bench/results/host")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for shape in args.shapes.split(","):
        d, n = map(int, shape.split("/"))
        for heads in map(int, args.heads.split(",")):
            for variant in args.variants.split(","):
                call = make_call(d, n, args.tokens, heads, variant)
                host, wall = measure(call, args.iters)
                per, gpu_ms = runtime_calls(call, args.iters)
                text = python_profile(call, args.iters)
                name = f"{d}_{n}_h{heads}_{variant}"
                calls = "\n".join(f"  {k}: {c:.1f} calls, {us:.0f} us CPU per routing call"
                                  for k, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1]))
                (out / f"host_{name}.txt").write_text(
                    f"{name}: host {host:.3f} ms, wall {wall:.3f} ms, GPU {gpu_ms:.3f} ms per call\n"
                    f"CUDA runtime per call:\n{calls}\n\n{text}")
                row = dict(d=d, n=n, heads=heads, variant=variant, host_ms=host, wall_ms=wall, gpu_ms=gpu_ms,
                           launches=sum(c for k, (c, _) in per.items() if "Launch" in k))
                rows.append(row)
                print(json.dumps(row), flush=True)
    (out / "host_overhead.json").write_text(json.dumps(rows, indent=1))
    print("| d/N/H | variant | host ms | wall ms | GPU ms | launches |")
    for r in rows:
        print(f"| {r['d']}/{r['n']}/H{r['heads']} | {r['variant']} | {r['host_ms']:.3f} | {r['wall_ms']:.3f} | "
              f"{r['gpu_ms']:.3f} | {r['launches']:.0f} |")


if __name__ == "__main__":
    main()
