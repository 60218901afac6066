"""The matrix products of one training step alone, under sustained load (issue 6).

The baseline's MFU is bounded by how fast its matrix products run. In the graphed step
they take most of the time (``bench/profile_step.py``'s "matrix products"), and the H200
holds 700 W, so a long run slows them (session 16). This replays exactly the products of
one step of a preset (every ``nn.Linear`` of the decoder forward, input gradient and
weight gradient; the tied LM head in the loss's chunks of ``--loss-chunk`` rows), with
their own inputs per layer as in the step (each product a row-major A against a
transposed B, as ``F.linear``'s forward; the step's backward uses other layouts), from
one CUDA graph, back to back for ``--seconds``. It reports the products' ms per step at the start (median of the first 5
replays) and sustained (median of the last 10), and their rate against the 989 TFLOP/s
peak: the products' measured floor, to set beside the step's profile.

Then each distinct product alone (a graph of its layers' copies, at the start): ms per
step, TFLOP/s.

    PYTHONPATH=src python3 bench/gemm_rate.py --preset paper-1b --seconds 30 --out $OUT/gemm_1b.json
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from torch import nn

from attention_bench import capture_graph, replay_times, run_meta  # bench/ is on the path when a script of it runs
from mhar.bench_cli import PAPER_MICROBATCH, PEAK_FLOPS
from mhar.model import get_preset
from mhar.model.decoder import Decoder


def step_products(preset: str, loss_chunk: int) -> list[tuple[str, int, int, int, int]]:
    """(name, copies, M, N, K) for every product of one step: C[M, N] = A[M, K] @ B[K, N]."""
    tokens = PAPER_MICROBATCH[preset][0] * PAPER_MICROBATCH[preset][1]
    cfg = get_preset(preset, "baseline")
    with torch.device("meta"):
        model = Decoder(cfg)
    shapes: dict[tuple[int, int], int] = {}
    for m in model.modules():
        if isinstance(m, nn.Linear):
            shapes[(m.in_features, m.out_features)] = shapes.get((m.in_features, m.out_features), 0) + 1
    out = []
    for (d_in, d_out), n in shapes.items():
        out += [(f"{d_in}->{d_out} forward", n, tokens, d_out, d_in),
                (f"{d_in}->{d_out} input grad", n, tokens, d_in, d_out),
                (f"{d_in}->{d_out} weight grad", n, d_out, d_in, tokens)]
    chunk = min(loss_chunk or tokens, tokens)
    n_chunks, V, d = -(-tokens // chunk), cfg.vocab_size, cfg.d_model
    out += [(f"LM head forward ({chunk}-row chunks)", n_chunks, chunk, V, d),
            ("LM head input grad", n_chunks, chunk, d, V),
            ("LM head weight grad", n_chunks, V, d, chunk)]
    return out


def product_operands(products, device="cuda") -> tuple[list[tuple[torch.Tensor, ...]], int]:
    """(a, b, c) for every copy of the products, each copy with its own operands (as a
    step's layers have), for ``c = a @ b``; and their FLOPs."""
    ops, flops = [], 0
    for _, n, M, N, K in products:
        c = torch.empty(M, N, device=device, dtype=torch.bfloat16)  # outputs shared: they are only written
        for _ in range(n):
            a = torch.randn(M, K, device=device, dtype=torch.bfloat16)
            b = torch.randn(N, K, device=device, dtype=torch.bfloat16).t()  # a weight seen transposed, as F.linear does
            ops.append((a, b, c))
            flops += 2 * M * N * K
    return ops, flops


def build_graph(products, device="cuda"):
    """A CUDA graph of the products (``product_operands``), its FLOPs and operands."""
    ops, flops = product_operands(products, device)

    def run():
        for a, b, c in ops:
            torch.mm(a, b, out=c)

    return capture_graph(run, warmup=2), flops, ops


def median(xs):
    return sorted(xs)[len(xs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="paper-1b")
    ap.add_argument("--loss-chunk", type=int, default=4096, help="as mhar bench step's --loss-chunk")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the whole step's products replay")
    ap.add_argument("--out", default="bench/results/gemm_rate.json")
    args = ap.parse_args()
    meta = run_meta()
    products = step_products(args.preset, args.loss_chunk)
    per_product = []
    for p in products:  # each alone first, before the sustained run heats the GPU
        g, flops, ops = build_graph([p])
        ms = median(replay_times(g, min_reps=15))
        row = {"product": p[0], "copies": p[1], "mnk": p[2:], "ms_step": ms, "tflops": flops / ms / 1e9}
        per_product.append(row)
        print(json.dumps(row), flush=True)
        del g, ops
        torch.cuda.empty_cache()
    g, flops, ops = build_graph(products)
    times = replay_times(g, args.seconds, min_reps=15)
    start, sustained = median(times[:5]), median(times[-10:])
    whole = {"tflop_step": flops / 1e12, "replays": len(times), "start_ms": start, "sustained_ms": sustained,
             "start_tflops": flops / start / 1e9, "sustained_tflops": flops / sustained / 1e9,
             "sustained_of_peak": flops / sustained / 1e9 / (PEAK_FLOPS / 1e12)}
    print(json.dumps(whole), flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "preset": args.preset, "whole_step": whole, "products": per_product}, f, indent=1)
    print(f"\n{args.preset}: the step's products ({whole['tflop_step']:.1f} TFLOP), {len(times)} replays in "
          f"{args.seconds:.0f} s: {start:.2f} ms at the start ({whole['start_tflops']:.0f} TFLOP/s), "
          f"{sustained:.2f} ms sustained ({whole['sustained_tflops']:.0f} TFLOP/s, "
          f"{100 * whole['sustained_of_peak']:.1f}% of peak)")
    print("\n| product | copies | M x N x K | ms per step (alone) | TFLOP/s |\n|---|---|---|---|---|")
    for r in per_product:
        m, n, k = r["mnk"]
        print(f"| {r['product']} | {r['copies']} | {m} x {n} x {k} | {r['ms_step']:.2f} | {r['tflops']:.0f} |")


if __name__ == "__main__":
    main()
