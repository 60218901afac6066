"""Why `Trainer.fit`'s steps take longer than the same trainer's `train_step` called in a
plain loop (session 60: 39.5 against 35.0 ms, 100M baseline 8 x 2048 on an H100, with
the same kernels). Each variant builds a fresh trainer and runs ``fit`` for ``--steps``
steps, every step logged; a step's time is what ``fit`` measures (its metrics' tokens/s).

    PYTHONPATH=src python bench/fit_loop_probe.py --preset paper-100m --method baseline --batch 8 --out $OUT

Variants: ``as is``; ``no TensorBoard`` (the metrics log without its writer);
``constant lr`` (``lr_at`` returns the peak: the optimiser's lr never changes);
``gc off`` (Python's cyclic collector disabled during fit); and, on the last trainer,
``train_step loop`` (its ``train_step`` called directly, timed as ``fit`` times it).
Then cProfile over ``fit`` for the ``as is`` trainer's steps (``--cprofile``): the host's
own functions by cumulative time, in ``fit_loop_probe.txt``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path

import torch

import mhar.train.metrics as metrics_module
import mhar.train.trainer as trainer_module
from mhar.train import Trainer, apply_train_overrides, train_preset
from mhar.train.metrics import read_metrics


def fit_ms(cfg, steps: int, profile: bool = False) -> tuple[list[float], Trainer, str]:
    run = tempfile.mkdtemp()
    trainer = Trainer(cfg, run, quiet=True, progress=False)
    text = ""
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        trainer.fit()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
        text = buf.getvalue()
    else:
        trainer.fit()
    rates = [r["tokens_per_s"] for r in read_metrics(run)][1:]
    return [1e3 * cfg.tokens_per_step / r for r in rates], trainer, text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="paper-100m")
    ap.add_argument("--method", default="baseline")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg0 = train_preset(args.preset, args.method)
    overrides = ["data.source=synthetic", f"data.vocab_size={cfg0.model.vocab_size}", f"batch_size={args.batch}",
                 f"steps={args.steps}", "log_every=1", "eval_every=100000", "checkpoint_every=100000"]
    rows, texts = {}, []

    def record(name, ms):
        rows[name] = {"median_ms": statistics.median(ms), "steps_ms": [round(x, 2) for x in ms]}
        print(f"{name}: {statistics.median(ms):.2f} ms", flush=True)
        (out / "fit_loop_probe.json").write_text(json.dumps(rows, indent=1))

    cfg = lambda: apply_train_overrides(train_preset(args.preset, args.method), overrides)  # noqa: E731
    ms, trainer, text = fit_ms(cfg(), args.steps, profile=args.cprofile)
    record("as is" + (" (under cProfile)" if args.cprofile else ""), ms)
    texts.append(text)
    del trainer
    ms, trainer, _ = fit_ms(cfg(), args.steps)
    record("as is", ms)
    del trainer

    writer = metrics_module.MetricsLog.__init__

    def no_tb(self, run_dir, resume_step=None, tensorboard=True):
        writer(self, run_dir, resume_step, tensorboard=False)
    metrics_module.MetricsLog.__init__ = no_tb
    ms, trainer, _ = fit_ms(cfg(), args.steps)
    record("no TensorBoard", ms)
    metrics_module.MetricsLog.__init__ = writer
    del trainer

    lr_at = trainer_module.lr_at
    trainer_module.lr_at = lambda step, lr, *a, **k: lr
    ms, trainer, _ = fit_ms(cfg(), args.steps)
    record("constant lr", ms)
    trainer_module.lr_at = lr_at
    del trainer

    gc.disable()
    ms, trainer, _ = fit_ms(cfg(), args.steps)
    gc.enable()
    record("gc off", ms)

    trainer.graphed = None  # fit's finish dropped it; the loop below captures again
    steps = []
    for _ in range(args.steps + 3):
        t0 = time.perf_counter()
        trainer.train_step()
        torch.cuda.synchronize()
        steps.append(1e3 * (time.perf_counter() - t0))
    record("train_step loop", steps[3:])
    (out / "fit_loop_probe.txt").write_text(
        "\n".join(f"{k}: {v['median_ms']:.2f} ms  {v['steps_ms']}" for k, v in rows.items()) + "\n\n" + texts[0])


if __name__ == "__main__":
    main()
