"""Paired comparisons: train several methods with the same seed, data order,
validation windows and budget, then tabulate, plot and report.

A comparison is a folder: one run folder per method (``<out>/<method>/``), plus
``curves.png``, ``report.md`` and ``compare.json``.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from mhar.train import checkpoint as ckpt
from mhar.train.config import TrainConfig, normalise_key, apply_train_overrides, config_diff, train_preset
from mhar.train.metrics import CHECKPOINTS, CONFIG, SUMMARY, plot_runs, write_json
from mhar.train.trainer import Trainer, release_memory

DEFAULT_METHODS = ("baseline", "hyper", "attnres", "mhar")


def method_config(preset: str, method: str, overrides: list[str] | None = None) -> TrainConfig:
    """The config of one method: the preset with its stream set to ``method``, then
    the user's overrides (which apply to every method alike; the method's stream follows the shape they set)."""
    return apply_train_overrides(train_preset(preset), [f"method={method}", *(overrides or [])])


def _finished(run_dir: Path, cfg: TrainConfig) -> dict[str, Any] | None:
    """The summary of a finished run with the same config, if there is one."""
    import json

    summary = run_dir / SUMMARY
    if not (summary.exists() and (run_dir / CONFIG).exists()):
        return None
    old, new = _saved_and_new(run_dir, cfg)
    return json.loads(summary.read_text()) if old == new else None


def _saved_and_new(run_dir: Path, cfg: TrainConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run folder's saved config and ``cfg``, as dicts to compare."""
    saved, new = TrainConfig.load(run_dir / CONFIG).to_dict(), cfg.to_dict()
    for d in (saved, new):
        d["model"].pop("vocab_size", None)  # resolved from the data at run time
    return saved, new


def dropped_settings(run_dir: Path, cfg: TrainConfig, overrides: list[str], also: set[str] = frozenset()) -> list[str]:
    """The differences between a run folder's saved config and ``cfg`` (built afresh for a
    --resume) in keys that neither ``overrides`` (KEY=VALUE) nor ``also`` set: settings a
    resume would silently drop back to the defaults (``steps`` back to the preset's)."""
    explicit = {normalise_key(item.split("=", 1)[0].strip()) for item in overrides if "=" in item} | set(also)
    return [d for d in config_diff(*_saved_and_new(run_dir, cfg)) if d.split(":", 1)[0] not in explicit]


def _check_resumable(out: Path, methods: list[str], configs: list[TrainConfig], overrides: list[str]) -> None:
    """--resume continues the comparison in ``out``. A plain ``--resume`` must not train its
    runs under the defaults: other methods than its runs', or a saved run whose config differs
    in a key this command does not set (a dropped override: ``steps`` back to the preset's),
    are refused. Keys the command sets may change, as in ``mhar train --resume steps=800``."""
    import json

    info = json.loads((out / "compare.json").read_text()) if (out / "compare.json").exists() else {}
    again = "resume with the command that made it plus --resume" + (
        f" ({info['command']} --resume)" if info.get("command") else "")
    runs = sorted(p.name for p in out.iterdir() if (p / CONFIG).exists()) if out.is_dir() else []
    done = [r.get("label") for r in info.get("results", [])]  # a finished comparison's methods, in order
    if (done and done != methods) or not set(runs) <= set(methods):
        raise ValueError(f"{out} compares {','.join(done or runs)}, not {','.join(methods)}: {again}")
    for method, cfg in zip(methods, configs):
        if method not in runs:
            continue
        dropped = dropped_settings(out / method, cfg, overrides)
        if dropped:
            raise ValueError(f"{out / method} was trained with another config, which this command does not "
                             f"set ({'; '.join(dropped)}): {again}")


def run_methods(preset: str, methods: list[str], out: str | Path, overrides: list[str] | None = None, *,
                resume: bool = False, quiet: bool = False, progress: bool = True,
                trainer_cls: Callable[..., Trainer] = Trainer) -> list[dict[str, Any]]:
    """Train each method into ``out/<method>``; returns their summaries, in order.
    With ``resume``, finished runs with an identical config are reused and
    interrupted ones continue from their last checkpoint."""
    if not methods:
        raise ValueError("no methods to compare")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods must be distinct; got {', '.join(methods)}")
    configs = [method_config(preset, m, overrides) for m in methods]  # every config is checked before any training
    out = Path(out)
    if resume:
        _check_resumable(out, methods, configs, overrides or [])
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for i, (method, cfg) in enumerate(zip(methods, configs)):
        run_dir = out / method
        label = f"{method} ({i + 1}/{len(methods)})"
        done = _finished(run_dir, cfg) if resume else None
        if done is not None:
            print(f"{method}: reusing the finished run in {run_dir}", file=sys.stderr)
            results.append(done)
            continue
        again = resume and bool(ckpt.list_checkpoints(run_dir / CHECKPOINTS))
        trainer = trainer_cls(cfg, run_dir, resume=again, quiet=quiet, progress=progress, label=method)
        trainer.desc = label
        results.append(trainer.fit())
        del trainer
        release_memory()  # this method's weights, optimiser state and graph, before the next one
    return results


# ----------------------------------------------------------------- table and report

def _fmt(x: float, digits: int = 4) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _heads(summary: dict[str, Any]) -> str:
    s = summary.get("stream", {})
    if s.get("method") in ("routed", "delta"):
        size = s.get("block_size") or 0  # named, so that blocks of 1 (full routing) are seen as such
        return str(s.get("heads", "-")) + (f", blocks of {size}" if size else "")
    if s.get("method") == "hyper":
        return f"n={s.get('hyper_n')}"
    return "-"


def comparison_table(results: list[dict[str, Any]]) -> str:
    """A Markdown table: final and tail-mean validation loss, delta to the baseline
    (tail-means; the first run when there is no 'baseline'), tokens/s (and MFU where a run
    has one: on a GPU of known peak), parameters. The
    lowest tail-mean is in bold; the cells are padded so that the columns line up in a
    terminal too (numbers right-aligned)."""
    ref = next((r for r in results if r.get("label") == "baseline"), results[0])
    ref_tail = ref.get("tail_mean_val_loss", math.nan)
    k = max((r.get("tail_k", 0) for r in results), default=0)
    head = ["method", "H", "params", "routing params", "final val loss", f"tail-mean val loss (last {k})",
            f"delta vs {ref.get('label')}", "tokens/s", "train time"]
    with_mfu = any(r.get("mfu") for r in results)
    if with_mfu:
        head.insert(-1, "MFU")
    tails = [r.get("tail_mean_val_loss", math.nan) for r in results]
    finite = [t for t in tails if t is not None and math.isfinite(t)]
    best = min(finite) if len(results) > 1 and finite else None
    body = []
    for r, tail in zip(results, tails):
        p = r.get("params", {})
        delta = "0 (ref)" if r is ref else f"{tail - ref_tail:+.4f}"
        body.append([str(r.get("label")), _heads(r), f"{p.get('total', 0):,}",
                     f"{p.get('routing', 0):,} ({p.get('routing_pct', 0.0):.2f}%)", _fmt(r.get("final_val_loss")),
                     f"**{_fmt(tail)}**" if best is not None and tail == best else _fmt(tail), delta,
                     f"{r.get('tokens_per_s', 0):,.0f}", f"{r.get('train_time_s', 0):.1f} s"])
        if with_mfu:
            body[-1].insert(-1, f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-")
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    right = [False, False] + [True] * (len(head) - 2)  # numbers line up on their last digit

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(cells, widths, right)) + " |"
    rule = "|" + "|".join("-" * (w + 1) + ":" if rt else "-" * (w + 2) for w, rt in zip(widths, right)) + "|"
    return "\n".join([line(head), rule] + [line(row) for row in body])


def write_report(out: str | Path, results: list[dict[str, Any]], title: str, command: str,
                 cfg: TrainConfig) -> tuple[Path, Path]:
    """Write ``curves.png``, ``report.md`` and ``compare.json`` into ``out``."""
    out = Path(out)
    png = plot_runs({r["label"]: out / r["label"] for r in results}, out / "curves.png", title=title,
                    methods={r["label"]: r.get("method", r["label"]) for r in results})
    table = comparison_table(results)
    first = results[0]
    lines = [
        f"# {title}",
        "",
        f"- command: `{command}`",
        f"- date: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- preset: `{cfg.preset}`; {cfg.steps} steps of {cfg.tokens_per_step:,} tokens "
        f"({first.get('tokens', 0):,} tokens per method), seq_len {cfg.seq_len}, peak lr {cfg.lr:g}, "
        f"warm-up {cfg.warmup}, seed {cfg.seed}",
        f"- model: d_model {cfg.model.d_model}, {cfg.model.n_layers} layers, vocab {cfg.model.vocab_size}",
        f"- data: `{cfg.data.source}`; {cfg.data.val_windows} fixed validation windows, "
        f"evaluation every {cfg.eval_every} steps; tail-mean = mean of the last {cfg.tail_k} evaluations",
        f"- device: {first.get('device')} ({first.get('dtype')}), torch {torch.__version__}, "
        f"{platform.machine()}, {torch.get_num_threads()} threads",
        "",
        "Every method saw the same initial weights for shared parameters, the same batches in the same "
        "order and the same validation windows. One seed only: small deltas are within noise.",
        "",
        table,
        "",
        "![validation curves](curves.png)",
        "",
        "Run folders (config, metrics.jsonl, TensorBoard events, checkpoints): "
        + ", ".join(f"`{r['label']}/`" for r in results),
        "",
    ]
    md = out / "report.md"
    md.write_text("\n".join(lines))
    write_json(out / "compare.json", {"title": title, "command": command, "results": results})
    return md, png


def default_out(kind: str) -> Path:
    return Path("runs") / f"{kind}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
