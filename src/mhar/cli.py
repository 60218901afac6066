"""The one `mhar` command. Each subcommand lives beside its module, in a `cli.py`
that defines ``register(subparsers)``; this file only collects them."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Modules that add subcommands, in the order `mhar --help` lists them.
SUBCOMMAND_MODULES = [
    "mhar.model.cli",      # params
    "mhar.data.cli",       # data build / data info
    "mhar.train.cli",      # train, compare, sweep
    "mhar.eval.cli",       # eval
    "mhar.eval.generate",  # generate
    "mhar.analysis.cli",   # probe, maps, report
    "mhar.model.hf_cli",   # convert
    "mhar.train.midtrain_cli",  # midtrain
    "mhar.bench_cli",      # bench step
]


def stderr_is_terminal() -> bool:
    """Progress bars only on a terminal: in a log file or a pipe their carriage-return redraws
    pile up, one per step, so the commands write plain lines there (as with --quiet). (A
    Trainer or evaluation used from Python, a notebook's included, keeps its bars.)"""
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mhar", description="Depth routing for Transformers (MHAR).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # that part of the toolkit is not there (yet)
                continue
            raise
        module.register(sub)
    _state_defaults(parser)
    return parser


def _state_defaults(parser: argparse.ArgumentParser) -> None:
    """Append '(default: X)' to every option's help that has a default and does not say it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _state_defaults(child)
        elif (action.option_strings and action.help and action.help is not argparse.SUPPRESS
              and action.default not in (None, "", [], False, argparse.SUPPRESS)
              and "default" not in action.help.lower()):
            action.help += f" (default: {str(action.default).replace('%', '%%')})"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse fills a command's positionals in one go (`midtrain MODEL [KEY=VALUE ...]`), so
        # KEY=VALUE overrides written after the options arrive here: they are overrides too.
        if isinstance(getattr(args, "overrides", None), list) and all("=" in e and not e.startswith("-")
                                                                      for e in extra):
            args.overrides = args.overrides + extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if not stderr_is_terminal():  # transformers' and the Hub's bars too (loading, saving shards)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `mhar ... | head`: the reader has gone; stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141
    except (ValueError, OSError) as err:  # errors users can cause (a bad path, --out a file): one clear line
        if isinstance(err, OSError) and err.filename is not None and err.strerror:
            err = f"{err.filename}: {err.strerror}"  # not Python's '[Errno 17] File exists: ...'
        print(f"mhar {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's code for SIGINT, no traceback
        print(f"\nmhar {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
