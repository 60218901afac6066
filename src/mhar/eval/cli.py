"""`mhar eval`: evaluate a run folder or any Hugging Face causal LM, and compare two
evaluations with paired statistics.

  mhar eval MODEL --tasks hellaswag,arc_easy:500 [--limit N] [--out DIR]
  mhar eval MODEL --val DATASET_DIR | --ppl FILE...       loss / perplexity
  mhar eval MODEL --ppl wiki.test.raw --wikitext          WikiText as lm-eval's wikitext task
  mhar eval compare DIR_A DIR_B [--tasks ...]             paired bootstrap CI + exact McNemar
  mhar eval tail RUN_A [RUN_B] [--k 11]                   tail-mean validation loss (+ paired)
  mhar eval export RUN OUT_DIR                            a run as a Hugging Face folder (lm-eval)
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from mhar.cli import stderr_is_terminal


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="evaluate a model (loss, downstream tasks) or compare two evaluations",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="+", metavar="MODEL | compare A B | tail RUN [RUN] | export RUN OUT",
                   help="a run folder, a Hugging Face model folder, a .gguf file or 'smollm2-135m-instruct'; "
                        "or 'compare DIR_A DIR_B'; or 'tail RUN_A [RUN_B]'; or 'export RUN OUT_DIR' (a run as a "
                        "Hugging Face folder)")
    p.add_argument("--tasks", default="", help="comma-separated tasks, each optionally NAME:LIMIT "
                   "(hellaswag, arc_easy, arc_challenge, piqa, mmlu, mmlu_cloze, lambada, gsm8k, gpqa)")
    p.add_argument("--limit", type=int, default=None, help="a deterministic subset of N items per task "
                   "(the same items for every model; also caps loss windows, or --wikitext articles)")
    p.add_argument("--shots", type=int, default=None, help="few-shot examples (default 0; gsm8k 8)")
    p.add_argument("-o", "--out", default=None, help="folder for results.json and per-item <task>.jsonl")
    p.add_argument("--val", default=None, metavar="DATASET_DIR", help="validation loss on a dataset folder")
    p.add_argument("--ppl", nargs="+", default=None, metavar="FILE", help="loss/perplexity on text files")
    p.add_argument("--wikitext", action="store_true", help="score the --ppl files (WikiText .raw) as lm-eval's "
                   "wikitext task: per article, detokenised, word/byte perplexity over the original text")
    p.add_argument("--seq-len", type=int, default=None, help="window for loss/perplexity (default: a run's "
                   "seq_len for --val, else the model's maximum; --val on another model caps it at 2048)")
    p.add_argument("--data-file", action="append", default=[], metavar="NAME=PATH",
                   help="a local file for a gated task (gpqa=gpqa_diamond.csv) or a custom MC task")
    p.add_argument("--batch-tokens", type=int, default=4096, help="token budget per forward batch")
    p.add_argument("--max-new-tokens", type=int, default=None, help="generation cap (gsm8k default 256)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    p.add_argument("--checkpoint", default=None, help="run folders: which checkpoint (default: the latest)")
    p.add_argument("--tokenizer", default=None, help="run folders: tokenizer.json or dataset folder")
    p.add_argument("--seed", type=int, default=1234, help="seed of the --limit subset and the bootstrap")
    p.add_argument("-q", "--quiet", "--no-progress", dest="no_progress", action="store_true",
                   help="no progress output (where stderr is not a terminal, plain lines replace the bars)")
    # compare / tail
    p.add_argument("--metric", default=None, help="compare: per-item field to pair (default: correct; "
                   "loss for loss tasks); also correct_norm, correct_per_char")
    p.add_argument("--bootstrap", type=int, default=10000, help="compare: bootstrap resamples")
    p.add_argument("--k", type=int, default=11, help="tail: number of last evaluations to average")
    p.add_argument("--key", default=None, help="tail: metric name in metrics.jsonl (default: val loss)")
    p.set_defaults(func=main)


def _progress(args) -> bool | str:
    """Bars on a terminal, plain lines in a log or a pipe, nothing with --quiet."""
    if args.no_progress:
        return False
    return True if stderr_is_terminal() else "lines"


def _data_files(items: list[str]) -> dict[str, str]:
    """--data-file NAME=PATH options as {name: path} (mhar eval and mhar midtrain)."""
    out = {}
    for it in items:
        if "=" not in it:
            raise ValueError(f"--data-file {it!r} must look like NAME=PATH (e.g. gpqa=gpqa_diamond.csv)")
        k, v = it.split("=", 1)
        # `gpqa=~/x.csv`: only bash expands a tilde after '='; sh and zsh pass it through
        out[k.strip().lower()] = os.path.expanduser(v)
    return out


def _check_counts(args) -> None:
    """Counts must be at least 1 (a negative --seq-len scored nothing and printed ppl 1.0)."""
    for flag in ("seq_len", "limit", "max_new_tokens", "batch_tokens", "k", "bootstrap"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1; got {value}")


def main(args) -> int:
    _check_counts(args)
    if args.out and os.path.isfile(args.out):
        raise ValueError(f"--out {args.out} is a file; --out names the folder for results.json and the records")
    head = args.target[0]
    if head == "compare":
        return _compare(args)
    if head == "tail":
        return _tail(args)
    if head == "export":
        if len(args.target) != 3:
            raise ValueError("usage: mhar eval export RUN OUT_DIR")
        from mhar.eval.export import export_run_to_hf
        out = export_run_to_hf(args.target[1], args.target[2], checkpoint=args.checkpoint, tokenizer=args.tokenizer)
        print(f"wrote {out} (load with AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True))")
        return 0
    if len(args.target) != 1:
        raise ValueError(f"give one model (got {len(args.target)}: {' '.join(args.target)}); "
                         f"to pair two evaluations use `mhar eval compare A B`")
    from mhar.eval.adapter import load_for_eval
    from mhar.eval.runner import parse_task_list, run_tasks, wikitext_note
    tasks = parse_task_list(args.tasks)
    if not tasks and not args.val and not args.ppl:
        raise ValueError("nothing to evaluate: give --tasks, --val DATASET_DIR or --ppl FILE")
    if args.wikitext and not args.ppl:
        raise ValueError("--wikitext scores the --ppl files as WikiText: give --ppl wiki.test.raw")
    note = None if args.wikitext else wikitext_note(args.ppl)
    if note:
        print(note, file=sys.stderr)
    from mhar.eval.tasks import check_task
    data_files = _data_files(args.data_file)
    for name, _ in tasks:  # refuse unknown names and absent gated files before loading a model
        check_task(name, data_files)
    model = load_for_eval(head, device=args.device, dtype=args.dtype, checkpoint=args.checkpoint,
                          tokenizer=args.tokenizer)
    print(f"evaluating {model.name} ({model.info.get('kind', '?')}) on {args.device}", file=sys.stderr)
    if args.seq_len and args.seq_len > model.max_len:
        print(f"note: --seq-len {args.seq_len} is longer than the model's {model.max_len} positions; windows of "
              f"{model.max_len} are scored", file=sys.stderr)
    run_tasks(model, tasks, out_dir=args.out, limit=args.limit, shots=args.shots, batch_tokens=args.batch_tokens,
              data_files=data_files, ppl_files=args.ppl, val_dataset=args.val, seq_len=args.seq_len,
              seed=args.seed, progress=_progress(args), max_new_tokens=args.max_new_tokens, wikitext=args.wikitext,
              command="mhar eval " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else None)
    return 0


def _compare(args) -> int:
    from mhar.eval.compare import compare_dirs, format_comparison
    if len(args.target) != 3:
        raise ValueError("usage: mhar eval compare DIR_A DIR_B (two folders written by `mhar eval --out`)")
    tasks = [n for n, _ in __import__("mhar.eval.runner", fromlist=["x"]).parse_task_list(args.tasks)] or None
    rows = compare_dirs(args.target[1], args.target[2], tasks=tasks, metric=args.metric,
                        n_boot=args.bootstrap, seed=args.seed)
    print(format_comparison(rows, args.target[1], args.target[2]))
    return 0


def _tail(args) -> int:
    from mhar.eval.compare import format_tail, tail_from_runs
    if len(args.target) not in (2, 3):
        raise ValueError("usage: mhar eval tail RUN_A [RUN_B] [--k 11]")
    res = tail_from_runs(args.target[1:], k=args.k, key=args.key)
    print(format_tail(res))
    return 0
