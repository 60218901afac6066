"""`mhar midtrain`: continued pretraining of a delta-converted model against a
schedule-matched plain control (SPEC.md section 3)."""

from __future__ import annotations

import argparse


def run_midtrain(args: argparse.Namespace) -> int:
    from mhar.cli import stderr_is_terminal
    from mhar.eval.cli import _data_files
    from mhar.train.midtrain import MidtrainOptions, midtrain

    opts = MidtrainOptions(
        steps=args.steps, lr=args.lr, min_lr_ratio=args.min_lr_ratio, warmup=args.warmup,
        weight_decay=args.weight_decay, ema=args.ema, z_loss=args.z_loss, batch_size=args.batch_size,
        grad_accum=args.grad_accum, seq_len=args.seq_len, eval_every=args.eval_every, val_windows=args.val_windows,
        seed=args.seed, data=args.data, max_mb=args.max_mb, heads=args.heads, blocks=args.blocks,
        control=not args.no_control, device=args.device, dtype=args.dtype, threads=args.threads,
        loss_chunk=args.loss_chunk, save_models=not args.no_save, tasks=args.tasks, task_limit=args.task_limit,
        data_files=_data_files(args.data_file),
    )
    result = midtrain(args.model, args.out, opts, overrides=args.overrides, resume=args.resume,
                      progress=not args.quiet and stderr_is_terminal())
    print(result["table"])
    return 0


def register(sub) -> None:
    m = sub.add_parser(
        "midtrain", help="continued pretraining of a converted model and of a schedule-matched plain control",
        description="Mid-train a delta-converted model (SPEC.md section 3) and, with the same data order, schedule "
                    "and budget, the plain model it came from (the control), then tabulate validation loss. MODEL: "
                    "a folder made by `mhar convert`, or a source model (HF folder or .gguf) converted on the fly. "
                    "Data: the built-in corpus tokenised with MODEL's tokenizer (or --data DATASET made by "
                    "`mhar data build --tokenizer MODEL`). OUT gets delta/ and control/ run folders, "
                    "comparison.md and comparison.json.")
    m.add_argument("model", help="converted mhar folder, HF Llama/Qwen2/Qwen3 folder or .gguf file")
    m.add_argument("-o", "--out", required=True, help="output folder")
    m.add_argument("--steps", type=int, default=200, help="optimiser steps of each run")
    m.add_argument("--lr", type=float, default=4e-4, help="peak learning rate after re-warm-up (paper: 4e-4)")
    m.add_argument("--min-lr-ratio", type=float, default=0.01, help="cosine floor as a fraction of --lr "
                   "(paper: 4e-4 -> 4e-6, i.e. 0.01)")
    m.add_argument("--warmup", type=int, default=20, help="re-warm-up steps (linear from 0)")
    m.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay")
    m.add_argument("--ema", type=float, default=0.999, help="EMA decay of the weights (0: off); evaluation and "
                   "the saved model use the EMA weights")
    m.add_argument("--z-loss", type=float, default=1e-4, help="z-loss coefficient (0: off)")
    m.add_argument("--batch-size", type=int, default=8, help="sequences per microbatch")
    m.add_argument("--grad-accum", type=int, default=1, help="microbatches per optimiser step")
    m.add_argument("--seq-len", type=int, default=256, help="tokens per sequence")
    m.add_argument("--eval-every", type=int, default=20, help="steps between validation evaluations")
    m.add_argument("--val-windows", type=int, default=32, help="validation windows (the same for both runs)")
    m.add_argument("--seed", type=int, default=0, help="seed of the data order")
    m.add_argument("--data", default="builtin", help="'builtin', a dataset folder tokenised with MODEL's tokenizer, "
                   "or 'synthetic' (smoke tests)")
    m.add_argument("--max-mb", type=float, default=0.0, help="cap on the built-in text (MB; 0: the whole corpus, "
                   "about 188 MB of text, tokenised once and cached)")
    m.add_argument("--heads", type=int, default=8, help="when MODEL is a source model: routing heads")
    m.add_argument("--blocks", type=int, default=8, help="when MODEL is a source model: blocks")
    m.add_argument("--no-control", action="store_true", help="train only the converted model")
    m.add_argument("--no-save", action="store_true", help="do not save the final models as HF folders")
    m.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="auto: cuda when available")
    m.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                   help="auto: bfloat16 autocast on CUDA, float32 on the CPU")
    m.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    m.add_argument("--loss-chunk", type=int, default=0, help="LM head + loss in chunks of this many tokens")
    m.add_argument("--tasks", default="", help="downstream tasks evaluated after training with mhar eval "
                   "(e.g. gsm8k,gpqa; paired bootstrap and McNemar in the table)")
    m.add_argument("--task-limit", type=int, default=0, help="items per task (0: all)")
    m.add_argument("--data-file", action="append", default=[], metavar="NAME=PATH",
                   help="a local file for a gated task (gpqa=gpqa_diamond.csv) or a custom MC task, as for mhar eval")
    m.add_argument("--resume", action="store_true", help="continue interrupted runs in OUT")
    m.add_argument("-q", "--quiet", "--no-progress", action="store_true", help="no progress bars: plain lines (for logs; the default when stderr is not a terminal)")
    m.add_argument("overrides", nargs="*", help="extra training overrides (key=value), applied to both runs")
    m.set_defaults(func=run_midtrain)
