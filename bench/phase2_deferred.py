"""One chunk of phase-2 backward reads, as each read's own kernel against deferred to its
sources (config "phase2_deferred"): the same numbers from both, and their times.

A chunk of S sites whose read k (1 <= k < S) merges the chunk's first k outputs: today
each read's backward (``_triton_backward``, one query, running sums) adds its share into
every source's sum; deferred, each read writes only its lse and -(g . y), and each source's
backward sums all its reads' shares at once (``_deferred_reads_backward``).

    python3 bench/phase2_deferred.py --d 1024 --heads 8 --tokens 16384 --sites 8 \
        --sweep '{"4096/4w/4": {}, "2048/4w/8": {"pending_elems": 2048, "pending_progs_per_sm": 8}}'
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from mhar.routing import op as rop


def chunk(d, heads, n_tok, sites, dev, seed=0):
    gen = torch.Generator(device=dev).manual_seed(seed)
    srcs = [torch.randn(n_tok, d, device=dev, generator=gen).bfloat16() for _ in range(sites - 1)]
    sums = [torch.randn(n_tok, d, device=dev, generator=gen).bfloat16() * 0.1 for _ in srcs]
    q = torch.randn(sites, d, device=dev, generator=gen) * 0.05
    g = torch.ones(sites, d, device=dev)
    grads = [torch.randn(n_tok, d, device=dev, generator=gen).bfloat16() for _ in range(sites)]
    reads = [None] + [rop._triton_forward(srcs[:k], q[k:k + 1], g[k:k + 1], heads, 1e-6, True) for k in range(1, sites)]
    return srcs, sums, q, g, grads, reads


def per_read(c, heads, out):
    """Today: each read's backward in turn, last site first."""
    srcs, sums, q, g, grads, reads = c
    n_tok, d = srcs[0].shape
    sink = rop.GradientSink()
    for s in srcs:
        sink.register(s)
    sink.buffers[:] = out["sums"]
    stat, off = out["stat"], out["off"]
    dw = out["dw"]
    for k in range(len(grads) - 1, 0, -1):
        y, lse = reads[k]
        res = rop._triton_backward(srcs[:k], q[k:k + 1], g[k:k + 1], grads[k].view(1, n_tok, d),
                                   lse.view(1, n_tok, heads), None, y, heads, 1e-6, sink.span(0, k),
                                   partial=(None, stat[k], off[k]))
        dw[k] = res[0][0].float()


def deferred(c, heads, out):
    srcs, sums, q, g, grads, reads = c
    stat, off = out["stat"], out["off"]
    S = len(grads)
    for k in range(S - 1, 0, -1):
        y, lse = reads[k]
        rop._triton_finalize_backward(grads[k], y, lse, None, off[k])
        stat[k].copy_(lse)
    w = (q * g).contiguous()
    dw = torch.zeros_like(w)
    for p in range(S - 2, -1, -1):
        total, part = rop._deferred_reads_backward(srcs[p], out["sums"][p], None, w[p + 1:], grads[p + 1:],
                                                   stat[p + 1:], off[p + 1:], heads, 1e-6)
        dw[p + 1:] += part
    out["dw"].copy_(dw)


def fresh(c, heads):
    srcs, sums, q, *_ = c
    n_tok, d = srcs[0].shape
    S = q.shape[0]
    return {"sums": [s.clone() for s in sums], "stat": torch.zeros(S, n_tok, heads, device=q.device),
            "off": torch.zeros(S, n_tok, heads, device=q.device), "dw": torch.zeros(S, d, device=q.device)}


def timed(fn, c, heads, iters):
    """ms per call, replayed from a CUDA graph (the GPU's time, not the host's launches)."""
    out = fresh(c, heads)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up (compiles) outside the capture
        fn(c, heads, out)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(c, heads, out)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--sites", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sweep", default='{"default": {}}', help="JSON: name -> config overrides (rop.TUNE)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    c = chunk(a.d, a.heads, a.tokens, a.sites, dev)
    ref = fresh(c, a.heads)
    per_read(c, a.heads, ref)
    print(f"d={a.d} H={a.heads} tokens={a.tokens} sites={a.sites}: one chunk's phase-2 backward, ms "
          f"(median of {a.rounds} rounds of {a.iters} calls, the variants interleaved)")
    variants = {"per read (today)": None, **{f"deferred {k}": v for k, v in json.loads(a.sweep).items()}}
    errs, times = {}, {name: [] for name in variants}
    for name, cfg in variants.items():
        if cfg is None:
            continue
        rop.TUNE = cfg or None
        out = fresh(c, a.heads)
        deferred(c, a.heads, out)
        errs[name] = (max((x.float() - y.float()).abs().max().item() for x, y in zip(out["sums"], ref["sums"])),
                      ((out["dw"] - ref["dw"]).abs().max() / ref["dw"].abs().max()).item())
        rop.TUNE = None
    for _ in range(a.rounds):
        for name, cfg in variants.items():
            rop.TUNE = cfg or None
            times[name].append(timed(per_read if cfg is None else deferred, c, a.heads, a.iters))
            rop.TUNE = None
    print("| variant | ms | rounds | sums max err | dw max rel err |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        e = errs.get(name)
        errs_s = "- | -" if e is None else f"{e[0]:.3g} | {e[1]:.3g}"
        print(f"| {name} | {statistics.median(ts):.3f} | {' '.join(f'{t:.3f}' for t in ts)} | {errs_s} |", flush=True)

if __name__ == "__main__":
    main()
