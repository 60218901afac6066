"""Does `mhar train` step as fast as `mhar bench step` times it? One preset and method,
the trainer's own step (``Trainer.train_step``: data, graphed forward and backward, the
norm, AdamW, the host's reads of the loss and norm) against the bench's, with each one's
kernel time by kind from torch.profiler.

    PYTHONPATH=src python bench/trainer_probe.py --preset paper-100m --method baseline --batch 8 --out $OUT

Rows, each timed over ``--steps`` steps after ``--warmup`` (median ms, a CUDA sync after
every step as ``Trainer.fit`` does):
- ``trainer, synthetic``: the trainer on ``data.source=synthetic`` (a Zipf stream over a
  lexicon of 2,048 words, so few distinct token ids);
- ``trainer, uniform``: the same trainer and model, its loader swapped for uniformly
  random token ids, as the bench feeds;
- ``bench``: ``mhar bench step``'s ``time_step`` for a fresh model of the same config.
With ``--fit N`` first a row ``trainer, fit``: ``Trainer.fit`` for N steps (as ``mhar
train`` runs them, each logged), its steps after the first.
Then ``--profile`` steps of each under torch.profiler: kernel ms per step by kind
(bench/profile_step.py's kinds) and the step's wall time less its kernels. Writes
``<out>/trainer_probe_<preset>_<method>.json`` / ``.txt``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_step import kernel_kinds, top_names  # noqa: E402

from mhar.bench_cli import build, time_step  # noqa: E402
from mhar.train import Trainer, apply_train_overrides, train_preset  # noqa: E402
from mhar.train.metrics import read_metrics  # noqa: E402


class UniformLoader:
    """Uniformly random token ids in the trainer's loader's place (as the bench's batches)."""

    def __init__(self, vocab: int, batch: int, seq_len: int, device: torch.device):
        self.vocab, self.batch, self.seq_len = vocab, batch, seq_len
        self.gen = torch.Generator().manual_seed(0)

    def next_batch(self):
        w = torch.randint(0, self.vocab, (self.batch, self.seq_len + 1), generator=self.gen)
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def timed_steps(step, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def profiled(step, n: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
            torch.cuda.synchronize()
        wall = 1e3 * (time.perf_counter() - t0) / n
    kinds, names = kernel_kinds(prof, n)
    return {"wall_ms": wall, "kinds": kinds, "top": top_names(names, 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="paper-100m")
    ap.add_argument("--method", default="baseline")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile", type=int, default=3)
    ap.add_argument("--fit", type=int, default=0, help="first run Trainer.fit for this many steps")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = train_preset(args.preset, args.method)
    seq = args.seq_len or cfg.seq_len
    cfg = apply_train_overrides(cfg, ["data.source=synthetic", f"data.vocab_size={cfg.model.vocab_size}",
                                      f"batch_size={args.batch}", f"seq_len={seq}",
                                      f"steps={args.fit or 100000}", "log_every=1", "checkpoint_every=100000"])
    rows, report = {}, []
    with tempfile.TemporaryDirectory() as run:
        trainer = Trainer(cfg, run, quiet=True, progress=False)
        if args.fit:
            trainer.fit()
            rates = [r["tokens_per_s"] for r in read_metrics(run)][1:]
            ms = [1e3 * cfg.tokens_per_step / r for r in rates]
            rows["trainer, fit"] = {"step_ms": statistics.median(ms), "steps_ms": ms,
                                    "kinds": {}, "top": ""}
            print(f"trainer, fit: {statistics.median(ms):.2f} ms", flush=True)
        step = trainer.train_step
        timed_steps(step, args.warmup)
        for data in ("synthetic", "uniform"):
            if data == "uniform":
                trainer.data.loader = UniformLoader(cfg.model.vocab_size, args.batch, seq, trainer.device)
                timed_steps(step, 2)
            ms = timed_steps(step, args.steps)
            rows[f"trainer, {data}"] = {"step_ms": statistics.median(ms), "steps_ms": ms,
                                        **profiled(step, args.profile)}
            print(f"trainer, {data}: {statistics.median(ms):.2f} ms", flush=True)
        flops = trainer.flops_per_token
        del trainer, step
    torch._dynamo.reset()
    model = build(args.preset, args.method, seq, [], 8, "cuda")
    r = time_step(model, args.batch, seq, args.steps, args.warmup, "regions", cfg.loss_chunk, "cuda",
                  cuda_graphs=True, trace_steps=args.profile, adamw="triton")
    kinds, names = kernel_kinds(r.pop("profiler"), args.profile)
    rows["bench"] = {"step_ms": r["step_ms"], "steps_ms": r["step_times_ms"], "kinds": kinds,
                     "top": top_names(names, 4)}
    print(f"bench: {r['step_ms']:.2f} ms", flush=True)
    kinds_order = list(rows["bench"]["kinds"])
    report.append(f"{args.preset} {args.method}, {args.batch} x {seq}, {torch.cuda.get_device_name()}; "
                  f"FLOPs a token {flops:.4g}")
    report.append("| row | step ms (median) | profiled wall ms | " + " | ".join(kinds_order) + " |")
    report.append("|---|---|---|" + "---|" * len(kinds_order))
    for name, row in rows.items():
        report.append(f"| {name} | {row['step_ms']:.2f} | {row.get('wall_ms', float('nan')):.2f} | "
                      + " | ".join(f"{row['kinds'].get(k, float('nan')):.2f}" for k in kinds_order) + " |")
    for name, row in rows.items():
        report += ["", f"{name}: top kernels (ms a step)", row["top"]]
    text = "\n".join(report)
    stem = out / f"trainer_probe_{args.preset}_{args.method}"
    stem.with_suffix(".txt").write_text(text + "\n")
    stem.with_suffix(".json").write_text(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "top"}
                                                     for k, v in rows.items()}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
