"""Bytes and bandwidth of each compiled-region kernel in one training step (issue 6).

The baseline's step spends its non-matmul, non-attention time mostly in the Triton
kernels that torch.compile generates for each sublayer (norms, rotary, SwiGLU, the
fused residual add). This measures how far those are from their bytes: it runs the
decoder's forward and backward eagerly (no CUDA graph) with inductor's bandwidth
profiler on (``TORCHINDUCTOR_PROFILE=1``), which times every generated kernel alone
(with a sync, once per kernel; later calls repeat that measurement) and takes its bytes
from inductor's own count (each input and output buffer once). One warm-up step compiles; the next is recorded.

Prints, per kernel name (summed over its calls in the step): calls, ms, GB, GB/s and
% of the copy bandwidth given; then the totals and the step's floor for these kernels
(their GB at that bandwidth). Markdown last; JSON to --out.

    PYTHONPATH=src python3 bench/region_bytes.py --preset paper-1b --copy-gbs 4246 --out $OUT/regions_1b.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

def summarise(calls) -> dict[str, dict]:
    """Per kernel name: calls, ms and GB summed over inductor's (ms, GB, GB/s, name) records."""
    out: dict[str, dict] = {}
    for ms, gb, _, name in calls:
        k = out.setdefault(name, {"calls": 0, "ms": 0.0, "gb": 0.0})
        k["calls"] += 1
        k["ms"] += float(ms)
        k["gb"] += float(gb)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="paper-1b")
    ap.add_argument("--method", default="baseline")
    ap.add_argument("--copy-gbs", type=float, default=4246.0, help="device-to-device copy bandwidth (GB/s)")
    ap.add_argument("--loss-chunk", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--out", default="bench/results/region_bytes.json")
    args = ap.parse_args()
    # read by inductor's config when it is first imported: set before torch. (Not
    # TORCHINDUCTOR_PROFILE_OUTPUT: with it, torch 2.11 benchmarks each compiled module at
    # compile time and fails there.)
    os.environ["TORCHINDUCTOR_PROFILE"] = "1"
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # compile afresh, with the profiling wrappers

    import torch
    from torch._inductor.runtime import triton_heuristics

    # Each kernel call appends (ms, GB, GB/s, name) to collected_calls, which every
    # compiled module's call clears first (start_graph): keep them for the whole step.
    # The generated modules import start_graph when they load, after this.
    triton_heuristics.start_graph = lambda: None

    from mhar.bench_cli import PAPER_MICROBATCH, build
    from mhar.model.loss import linear_cross_entropy
    from mhar.provenance import source_commit

    assert torch.cuda.is_available(), "bench/region_bytes.py needs a CUDA GPU"
    batch, seq = PAPER_MICROBATCH[args.preset]
    model = build(args.preset, args.method, seq, [], 8, "cuda")
    model.compile_regions()
    data = torch.randint(0, model.config.vocab_size, (batch, seq + 1), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model.hidden_states(data[:, :-1]).flatten(0, 1)
            loss = linear_cross_entropy(h, model.output_weight, data[:, 1:].flatten(), args.loss_chunk)
        loss.backward()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    step()  # compiles
    triton_heuristics.collected_calls.clear()
    step()
    kernels = summarise(triton_heuristics.collected_calls)
    if not kernels:
        raise SystemExit("inductor recorded no kernel calls (its bandwidth profiler did not run)")
    total_ms = sum(k["ms"] for k in kernels.values())
    total_gb = sum(k["gb"] for k in kernels.values())
    floor_ms = total_gb / args.copy_gbs * 1e3
    rows = sorted(kernels.items(), key=lambda kv: -kv[1]["ms"])
    meta = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "preset": args.preset,
            "method": args.method, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": source_commit(), "copy_gbs": args.copy_gbs,
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "total_ms": total_ms, "total_gb": total_gb, "floor_ms": floor_ms,
                   "kernels": dict(rows)}, f, indent=1)
    print(json.dumps(meta))
    print(f"\n{args.preset} {args.method}: {len(kernels)} compiled kernels, {sum(k['calls'] for k in kernels.values())} "
          f"calls per step: {total_ms:.2f} ms alone, {total_gb:.2f} GB, {total_gb / total_ms * 1e3:.0f} GB/s; "
          f"at {args.copy_gbs:.0f} GB/s the bytes take {floor_ms:.2f} ms\n")
    print("| kernel | calls | ms | GB | GB/s | % of copy |\n|---|---|---|---|---|---|")
    for name, k in rows[:args.rows]:
        bw = k["gb"] / k["ms"] * 1e3 if k["ms"] else 0.0
        print(f"| {name} | {k['calls']} | {k['ms']:.2f} | {k['gb']:.2f} | {bw:.0f} | {100 * bw / args.copy_gbs:.0f}% |")


if __name__ == "__main__":
    main()
