"""Would memory-bound routing kernels hide behind the matrix products on a second stream? (issue 6)

Routing's kernels are memory-bound (about 18 ms a step at 350M, near their byte floor), the
step's products compute-bound (about 70 ms). Run concurrently on two CUDA streams, the
routing time could hide under the products, if the H200's power cap leaves room: products
back to back already slow the clock (``gemm_rate.py``), and the memory traffic draws power
too. Before any change to the step's schedule, this measures that room with stand-ins:

* products: exactly the matrix products of one baseline step of ``--preset``
  (``gemm_rate.step_products``: every linear's forward, input and weight gradient, and the
  tied LM head's in the loss's chunks);
* memory work: bf16 adds ``c = a + b`` of (tokens, d_model) rows, the size of a routing
  source, over a pool of distinct rows (larger than the L2), as many as take ``--mem-ms``
  alone: the bytes routing moves at copy bandwidth.

Four CUDA graphs, replayed in turn for ``--rounds`` rounds (medians over the rounds, the SM
clock and power sampled per graph):

* ``products``: the products alone; ``memory``: the adds alone;
* ``serial``: both on one stream, the adds spread evenly between the products (as routing's
  kernels sit between a step's sublayers);
* ``overlapped``: the products on one stream and the adds on a second, forked and joined
  inside the graph.

``hidden`` = (serial - overlapped) / memory: the share of the memory work that the second
stream hides (1 = all of it, 0 = none).

    PYTHONPATH=src python3 bench/overlap_probe.py --preset paper-350m --mem-ms 18 --out $OUT/overlap.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch

from attention_bench import capture_graph, replay_times, run_meta  # bench/ is on the path when a script of it runs
from gemm_rate import product_operands, step_products
from mhar.bench_cli import PAPER_MICROBATCH
from mhar.gpu_clock import ClockSampler, summarize
from mhar.model import get_preset


def product_ops(preset: str, loss_chunk: int) -> list:
    """One callable per product of a step, each with its own operands (gemm_rate's)."""
    operands, _ = product_operands(step_products(preset, loss_chunk))
    return [lambda a=a, b=b, c=c: torch.mm(a, b, out=c) for a, b, c in operands]


def memory_ops(tokens: int, d: int, count: int, pool: int = 64) -> list:
    """``count`` adds of (tokens, d) bf16 rows drawn in turn from a pool of ``pool`` rows."""
    rows = [torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16) for _ in range(pool)]
    outs = [torch.empty(tokens, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    return [lambda i=i: torch.add(rows[i % pool], rows[(i + 1) % pool], out=outs[i % 4]) for i in range(count)]


def one_add_ms(tokens: int, d: int) -> float:
    """One add's time (``memory_ops``), from a graph of 200: the calibration for --mem-ms."""
    probe = memory_ops(tokens, d, 200)
    return statistics.median(replay_times(capture_graph(lambda: run_all(probe)), min_reps=10)) / 200


def run_all(ops):
    for op in ops:
        op()


def interleaved(products, memory):
    """The adds spread evenly between the products, on one stream."""
    per = len(memory) / max(len(products), 1)
    done = 0
    for i, op in enumerate(products):
        op()
        while done < round((i + 1) * per):
            memory[done]()
            done += 1
    run_all(memory[done:])


def overlapped(products, memory, side: torch.cuda.Stream):
    """The products on the current stream, the adds on ``side``, forked and joined."""
    main = torch.cuda.current_stream()
    side.wait_stream(main)
    with torch.cuda.stream(side):
        run_all(memory)
    run_all(products)
    main.wait_stream(side)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="paper-350m")
    ap.add_argument("--mem-ms", type=float, default=18.0, help="the adds' time alone, ms (routing's at 350M: 18)")
    ap.add_argument("--loss-chunk", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5, help="replays per graph and round")
    ap.add_argument("--out", default="bench/results/overlap_h200.json")
    args = ap.parse_args()
    meta = run_meta()
    B, T = PAPER_MICROBATCH[args.preset]
    d = get_preset(args.preset, "baseline").d_model
    products = product_ops(args.preset, args.loss_chunk)
    add_ms = one_add_ms(B * T, d)
    count = max(1, round(args.mem_ms / add_ms))
    memory = memory_ops(B * T, d, count)
    side = torch.cuda.Stream()
    graphs = {"products": capture_graph(lambda: run_all(products)),
              "memory": capture_graph(lambda: run_all(memory)),
              "serial": capture_graph(lambda: interleaved(products, memory)),
              "overlapped": capture_graph(lambda: overlapped(products, memory, side))}
    times = {k: [] for k in graphs}
    clocks = {k: [] for k in graphs}
    for _ in range(args.rounds):
        for name, g in graphs.items():
            with ClockSampler(period_ms=20) as sampler:
                times[name].append(statistics.median(replay_times(g, min_reps=args.reps)))
            clocks[name] += sampler.samples
    ms = {k: statistics.median(v) for k, v in times.items()}
    hidden = (ms["serial"] - ms["overlapped"]) / ms["memory"]
    result = {"meta": meta, "preset": args.preset, "tokens": B * T, "d_model": d, "products": len(products),
              "adds": count, "add_ms": add_ms, "add_gb_s": 3 * B * T * d * 2 / add_ms / 1e6,
              "ms": ms, "rounds_ms": times, "clock": {k: summarize(v) for k, v in clocks.items()},
              "hidden": hidden}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{args.preset}: {len(products)} products, {count} adds of ({B * T}, {d}) bf16 "
          f"({add_ms * 1000:.1f} us each, {result['add_gb_s']:.0f} GB/s)")
    print("\n| graph | ms (median of rounds) | SM MHz | W |\n|---|---|---|---|")
    for k in graphs:
        c = result["clock"][k]
        print(f"| {k} | {ms[k]:.2f} | {c.get('sm_mhz', '-')} | {c.get('power_w', '-')} |")
    print(f"\nserial - overlapped = {ms['serial'] - ms['overlapped']:.2f} ms of the adds' {ms['memory']:.2f}: "
          f"hidden {hidden:.2f}")


if __name__ == "__main__":
    main()
