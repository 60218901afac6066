"""``mhar train``, ``mhar compare`` and ``mhar sweep``."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from mhar.cli import stderr_is_terminal
from mhar.train.checkpoint import saved_config
from mhar.train.compare import DEFAULT_METHODS, comparison_table, default_out, method_config, run_methods, write_report
from mhar.train.config import TRAIN_PRESETS, TrainConfig, apply_train_overrides, train_preset
from mhar.train.errors import TrainingError
from mhar.train.metrics import CHECKPOINTS, CONFIG, throughput_text

OVERRIDES_HELP = ("dotted config overrides, e.g. steps=400 lr=1e-3 batch_size=16 stream.heads=4 d_model=256 "
                  "data.source=synthetic (model keys may omit the 'model.' prefix)")


def config_keys_help() -> str:
    """Every KEY=VALUE key, with the tiny preset's value, for the help's epilog (the keys are
    otherwise listed only in docs/training.md)."""
    import textwrap

    def flat(d: dict, prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict):
                out += flat(v, f"{prefix}{k}.")
            elif f"{prefix}{k}" not in ("preset", "method"):  # --preset and --method set these
                out.append(f"{prefix}{k}={'null' if v is None else str(v).lower() if isinstance(v, bool) else v}")
        return out

    d = train_preset("tiny").to_dict()
    model = d.pop("model")
    text = ("keys (KEY=VALUE; the tiny preset's values; docs/training.md explains them):\n"
            + textwrap.fill("  ".join(flat(d)), 88, initial_indent="  ", subsequent_indent="  ",
                            break_on_hyphens=False)
            + "\nmodel keys ('model.' may be left out):\n"
            + textwrap.fill("  ".join(flat(model)), 88, initial_indent="  ", subsequent_indent="  ",
                            break_on_hyphens=False))
    return text


def _epilog(*examples: str) -> str:
    return "examples:\n" + "\n".join(f"  {e}" for e in examples) + "\n\n" + config_keys_help()


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)
    p.add_argument("--preset", default=None, help=f"training preset: {', '.join(TRAIN_PRESETS)} (default tiny)")
    p.add_argument("-o", "--out", default=None, help="output folder (default runs/<kind>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue the run(s) in --out from the last checkpoint")
    p.add_argument("-q", "--quiet", "--no-progress", action="store_true",
                   help="no progress bar: one plain line per evaluation (for logs; the default when stderr is "
                        "not a terminal)")


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train one model (a preset, a method, dotted overrides)",
                              description="Train one model into a run folder (config.json, metrics.jsonl, "
                                          "TensorBoard events, checkpoints/, loss.png, summary.json).",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=_epilog("mhar train --method mhar --out runs/mhar steps=400 lr=1e-3",
                                             "mhar train --out runs/mhar --resume",
                                             "mhar train --preset paper-100m --method mhar-h4 --out runs/100m"))
    _common(p)
    p.add_argument("--config", default=None,
                   help="start from a saved TrainConfig JSON (e.g. another run's config.json) instead of a preset")
    p.add_argument("--method", default=None,
                   help="residual stream: baseline, hyper, attnres, mhar, attnres-block, mhar-block, delta, "
                        "or NAME-hH for H heads (default baseline)")
    p.add_argument("--parallel", default=None, choices=("none", "ddp", "fsdp"),
                   help="multi-process training under torchrun: ddp or fsdp (FSDP2); default: the config's "
                        "'parallel' (none; ddp when torchrun starts several processes). See docs/distributed.md")
    p.set_defaults(func=cmd_train)

    p = subparsers.add_parser("compare", help="train several methods on the same data and budget, then tabulate",
                              description="Train each method with the same seed, data order, validation windows and "
                                          "budget; print a table, write curves.png and report.md.",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=_epilog("mhar compare steps=300               # the README's CPU demo",
                                             "mhar compare --methods baseline,mhar-h4,mhar-block --out runs/cmp",
                                             "mhar compare --methods baseline,mhar-h4,mhar-block --out runs/cmp "
                                             "--resume  # after Ctrl-C: the same command plus --resume"))
    _common(p)
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help=f"comma-separated methods (default {','.join(DEFAULT_METHODS)}); any NAME-hH and the "
                        "block variants are allowed")
    p.set_defaults(func=cmd_compare)

    p = subparsers.add_parser("sweep", help="compare one routed method over several head counts H",
                              description="Like compare, over H: trains METHOD-hH for each H (and the baseline).",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=_epilog("mhar sweep --heads 1,2,4,8 --out runs/sweep steps=300",
                                             "mhar report runs/sweep              # the H-sweep plot"))
    _common(p)
    p.add_argument("--heads", default="1,2,4,8,16", help="comma-separated head counts (default 1,2,4,8,16)")
    p.add_argument("--method", default="mhar", help="routed method to sweep (mhar, mhar-block, delta; default mhar)")
    p.add_argument("--no-baseline", action="store_true", help="do not train the baseline alongside")
    p.set_defaults(func=cmd_sweep)

    from mhar.train.distributed import register as register_distributed  # mhar consolidate

    register_distributed(subparsers)


def _command_line(kind: str, args, extra: list[str]) -> str:
    """The command, rebuilt from the parsed arguments (for the report)."""
    parts = ["mhar", kind, *extra]
    if args.preset:
        parts += ["--preset", args.preset]
    if args.out:
        parts += ["--out", str(args.out)]
    return " ".join(shlex.quote(p) for p in parts + list(args.overrides))


def _split(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"{what} is empty")
    return items


def _base_config(args) -> TrainConfig:
    """--config or --preset, then --method and the overrides (the method's stream follows the shape they set)."""
    if args.config:
        if args.preset:
            raise ValueError("give --config or --preset, not both")
        cfg = TrainConfig.load(args.config)
    else:
        cfg = train_preset(args.preset or "tiny")
    return apply_train_overrides(cfg, ([f"method={args.method}"] if args.method else []) + list(args.overrides))


def _refuse_dropped_overrides(run: Path, cfg: TrainConfig, args) -> None:
    """--resume with --preset, --method or --config builds the config afresh: a setting of the
    run that this command does not set would go back to the preset's (steps, lr, ...). Refuse
    it, as `mhar compare --resume` does; keys the command sets may change."""
    from mhar.train.compare import dropped_settings

    also = {"parallel"} | ({"method"} if args.method else set()) | ({"preset"} if args.preset else set())
    dropped = dropped_settings(run, cfg, list(args.overrides), also)
    if dropped:
        raise ValueError(f"{run} was trained with settings this command does not set ({'; '.join(dropped)}); "
                         f"resume with `mhar train --out {run} --resume` (its saved config, plus any overrides) "
                         "or give them again")


def _check_out_folder(out: str | None) -> None:
    if out and Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"--out {out} is a file; --out names the run folder")


def cmd_train(args) -> int:
    from mhar.train.trainer import Trainer

    _check_out_folder(args.out)
    if args.resume:
        if not args.out:
            raise ValueError("--resume needs --out RUN_FOLDER")
        saved = Path(args.out) / CONFIG
        if args.preset or args.method or args.config:
            cfg = _base_config(args)
            if saved.exists():
                _refuse_dropped_overrides(Path(args.out), cfg, args)
        elif saved.exists():
            cfg = apply_train_overrides(TrainConfig.load(saved), args.overrides)
        else:  # e.g. a folder made for `mhar consolidate`'s file: the config inside the checkpoint
            found = saved_config(Path(args.out) / CHECKPOINTS)
            if found is None:
                raise FileNotFoundError(f"cannot resume: {saved} does not exist")
            print(f"mhar train: {saved} does not exist; using the config saved in {found[0]}", file=sys.stderr)
            cfg = apply_train_overrides(TrainConfig.from_dict(found[1]), args.overrides)
    else:
        cfg = _base_config(args)
    from mhar.train import distributed  # torchrun / DDP / FSDP2 (docs/distributed.md)

    parallel = distributed.resolve_parallel(cfg, getattr(args, "parallel", None))
    if parallel != cfg.parallel:
        cfg = apply_train_overrides(cfg, {"parallel": parallel})
    if parallel != "none":
        return distributed.train_distributed(cfg, Path(args.out) if args.out else None, resume=args.resume,
                                             quiet=args.quiet, progress=not args.quiet and stderr_is_terminal())
    out = Path(args.out) if args.out else default_out(f"{cfg.preset}-{cfg.method}")
    try:
        trainer = Trainer(cfg, out, resume=args.resume, quiet=args.quiet or not stderr_is_terminal())
        if trainer.resumed_from is not None and not args.quiet:
            print(f"resuming from {trainer.resumed_from} (step {trainer.step})", file=sys.stderr)
        s = trainer.fit()
    except TrainingError as err:
        print(f"mhar train: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nmhar train: interrupted; continue with: mhar train --out {out} --resume", file=sys.stderr)
        return 130
    print(f"{s['label']}: final val loss {s['final_val_loss']:.4f}, tail-mean {s['tail_mean_val_loss']:.4f} "
          f"(last {s['tail_k']}), {throughput_text(s)}, {s['params'].get('total', 0):,} parameters")
    print(f"run folder: {out}")
    return 0


def _compare(args, methods: list[str], kind: str, title: str, extra: list[str]) -> int:
    from mhar.train.distributed import refuse_multi_process

    refuse_multi_process(kind)  # torchrun: one `mhar train --parallel` per method instead
    _check_out_folder(args.out)
    preset = args.preset or "tiny"
    out = Path(args.out) if args.out else default_out(kind)
    if args.resume and not out.is_dir():
        raise FileNotFoundError(f"cannot resume: {out} does not exist")
    try:
        results = run_methods(preset, methods, out, args.overrides, resume=args.resume,
                              quiet=args.quiet or not stderr_is_terminal())
    except TrainingError as err:
        print(f"mhar {kind}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nmhar {kind}: interrupted; continue with the same command plus --out {out} --resume",
              file=sys.stderr)
        return 130
    saved = out / methods[0] / CONFIG  # the resolved config (vocabulary from the data)
    cfg = TrainConfig.load(saved) if saved.exists() else method_config(preset, methods[0], args.overrides)
    md, png = write_report(out, results, title, _command_line(kind, args, extra), cfg)
    print()
    print(comparison_table(results))
    print()
    print(f"plot: {png}\nreport: {md}")
    return 0


def cmd_compare(args) -> int:
    methods = _split(args.methods, "--methods")
    return _compare(args, methods, "compare", f"Comparison: {', '.join(methods)}", ["--methods", args.methods])


def cmd_sweep(args) -> int:
    try:
        heads = [int(h) for h in _split(args.heads, "--heads")]
    except ValueError:
        raise ValueError(f"--heads must be comma-separated integers; got {args.heads!r}") from None
    if any(h < 1 for h in heads):
        raise ValueError(f"--heads must be positive; got {args.heads!r}")
    methods = ([] if args.no_baseline else ["baseline"]) + [f"{args.method}-h{h}" for h in heads]
    extra = ["--method", args.method, "--heads", args.heads] + (["--no-baseline"] if args.no_baseline else [])
    return _compare(args, methods, "sweep", f"Sweep of {args.method} over H = {', '.join(map(str, heads))}", extra)
