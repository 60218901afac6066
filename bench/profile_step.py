"""Where one training step spends its GPU time: torch.profiler over a few steps of
``mhar bench step``'s loop, the top kernels by total CUDA time, per method.

    PYTHONPATH=src python bench/profile_step.py --preset paper-100m --methods baseline,mhar --out $OUT

Writes ``<out>/profile_<preset>_<method>_<compile>.txt`` (the key-averages table) as
each method finishes, and prints a one-line summary per method last.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

from mhar.bench_cli import PAPER_MICROBATCH, build, time_step
from mhar.train.trainer import release_memory


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="paper-100m")
    ap.add_argument("--methods", default="baseline,mhar")
    ap.add_argument("--compile", default="regions", choices=("regions", "full", "off"))
    ap.add_argument("--loss-chunk", type=int, default=4096)
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--rows", type=int, default=30)
    ap.add_argument("--out", default="bench/results/profile")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batch, seq = PAPER_MICROBATCH[args.preset]
    summary = []
    for method in args.methods.split(","):
        release_memory()  # the previous model (compiled modules sit in reference cycles)
        model = build(args.preset, method, seq, [], args.chunk, "cuda")
        timed = time_step(model, batch, seq, steps=4, warmup=3, compile_mode=args.compile,
                          loss_chunk=args.loss_chunk, device="cuda")
        # time_step compiled the model in place (regions) or returns; profile 2 more steps
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            time_step(model, batch, seq, steps=2, warmup=0, compile_mode="off" if args.compile == "regions"
                      else args.compile, loss_chunk=args.loss_chunk, device="cuda")
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows, max_name_column_width=70)
        path = out / f"profile_{args.preset}_{method}_{args.compile}.txt"
        path.write_text(f"{method} {args.preset} compile={args.compile}: {timed['step_ms']:.1f} ms/step, "
                        f"MFU {100 * timed['mfu']:.1f}%, peak {timed['peak_mem_gb']:.1f} GB\n\n{table}\n")
        summary.append(f"{args.preset} {method} compile={args.compile}: {timed['step_ms']:.1f} ms, "
                       f"MFU {100 * timed['mfu']:.1f}%, peak {timed['peak_mem_gb']:.1f} GB")
        print(table, flush=True)
        del model
    print("\n".join(summary))


if __name__ == "__main__":
    main()
