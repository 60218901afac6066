"""A run is a folder (DESIGN.md): ``config.json`` (the resolved TrainConfig),
``metrics.jsonl`` (one JSON object per logged step), ``tb/`` (TensorBoard event
files), ``checkpoints/``, ``loss.png`` and, once finished, ``summary.json``."""

from __future__ import annotations

import json
import math
import os
import resource
from pathlib import Path
from typing import Any, Iterable

import torch

CONFIG = "config.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
PLOT = "loss.png"


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a crash
                continue
    return rows


def tail_mean(values: list[float], k: int) -> float:
    """The paper's tail-mean: the mean of the last ``k`` evaluations (all when fewer)."""
    if not values:
        return math.nan
    tail = values[-k:]
    return sum(tail) / len(tail)


def memory_mb(device: torch.device) -> float:
    """Peak memory: allocated CUDA memory on a GPU, the process's peak RSS on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 if os.uname().sysname != "Darwin" else rss / 2**20


class MetricsLog:
    """Appends rows to ``metrics.jsonl`` (flushed each row) and mirrors scalars to TensorBoard."""

    def __init__(self, run_dir: str | Path, resume_step: int | None = None, tensorboard: bool = True):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS
        if resume_step is not None:
            # drop rows logged after the checkpoint we resume from: they will be redone
            rows = [r for r in read_metrics(self.run_dir) if r.get("step", 0) <= resume_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        elif self.path.exists():
            self.path.unlink()
        self.file = open(self.path, "a")
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # pragma: no cover - tensorboard is a dependency
                pass
            else:
                # TensorBoard hides the earlier events at purge_step and after: the steps that
                # will be logged again, from the one after the checkpoint's
                purge = None if resume_step is None else resume_step + 1
                self.tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=purge)

    def log(self, row: dict[str, Any]) -> None:
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        if self.tb is not None:
            step = row["step"]
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.tb.add_scalar(_tb_name(key), value, step)

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def throughput_text(summary: dict[str, Any]) -> str:
    """A run summary's speed for one line: tokens/s over the whole run, then the median
    step's rate (no compiling) and its MFU where the summary has them."""
    text = f"{summary.get('tokens_per_s', 0):.0f} tokens/s"
    steady, mfu = summary.get("steady_tokens_per_s"), summary.get("mfu")
    extra = ([f"{steady:.0f} a median step"] if steady else []) + ([f"MFU {100 * mfu:.1f}%"] if mfu else [])
    return text + (f" ({', '.join(extra)})" if extra else "")


def _tb_name(key: str) -> str:
    return {"loss": "train/loss", "val_loss": "val/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
            "tokens_per_s": "perf/tokens_per_s", "memory_mb": "perf/memory_mb", "mfu": "perf/mfu",
            "tokens": "train/tokens"}.get(key, f"misc/{key}")


# ----------------------------------------------------------------- plots

def _smooth(values: list[float], alpha: float = 0.9) -> list[float]:
    out, acc = [], None
    for v in values:
        acc = v if acc is None else alpha * acc + (1 - alpha) * v
        out.append(acc)
    return out


# A method keeps its colour in every plot (compare's curves.png, a run's loss.png, the
# report's figures), whatever order or company it comes in: index into the colour cycle.
METHOD_COLOUR_INDEX = {"baseline": 0, "hyper": 1, "attnres": 2, "mhar": 3, "attnres-block": 4,
                       "mhar-block": 5, "delta": 6}


def method_colours(methods: list[str]) -> list[str]:
    """One colour per entry of ``methods`` (method names, e.g. a run's ``cfg.method``): the
    methods of METHOD_COLOUR_INDEX get their own, the others (``mhar-h4``, a repeated name)
    the cycle's remaining colours in order."""
    import matplotlib.pyplot as plt

    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    first = {m: i for i, m in reversed(list(enumerate(methods)))}  # a repeat gets a colour of its own
    fixed = {i: cycle[METHOD_COLOUR_INDEX[m] % len(cycle)] for m, i in first.items() if m in METHOD_COLOUR_INDEX}
    free = [c for c in cycle if c not in fixed.values()] or cycle
    out, k = [], 0
    for i in range(len(methods)):
        if i in fixed:
            out.append(fixed[i])
        else:
            out.append(free[k % len(free)])
            k += 1
    return out


def plot_runs(runs: dict[str, str | Path], out: str | Path, title: str = "", reference: str | None = None,
              methods: dict[str, str] | None = None) -> Path:
    """One PNG. Left: validation loss (markers) and smoothed training loss (faint)
    against tokens, one colour per run. Right (two runs or more): each run's
    validation loss minus the reference run's at the same step (``reference``:
    'baseline' when present, else the first run): below zero is better. ``methods`` maps a
    label to its method name for the colours (default: the label is the method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {label: read_metrics(d) for label, d in runs.items()}
    if reference is None:
        reference = "baseline" if "baseline" in data else next(iter(data), None)
    paired = len(data) > 1
    fig, axes = plt.subplots(1, 2 if paired else 1, figsize=(12 if paired else 7.5, 4.5), dpi=120, squeeze=False)
    ax = axes[0][0]
    colours = method_colours([methods.get(label, label) for label in data] if methods else list(data))
    vals = []
    for i, (label, rows) in enumerate(data.items()):
        c = colours[i]
        train = [(r["tokens"], r["loss"]) for r in rows if "loss" in r and math.isfinite(r["loss"])]
        val = [(r["tokens"], r["val_loss"]) for r in rows if "val_loss" in r]
        if train:
            xs, ys = zip(*train)
            ax.plot(xs, _smooth(list(ys)), color=c, alpha=0.3, linewidth=1)
        if val:
            xs, ys = zip(*val)
            ax.plot(xs, ys, color=c, marker="o", markersize=3, linewidth=1.5, label=label)
            vals += ys
    if vals:
        lo, hi = min(vals), max(vals)
        ax.set_ylim(lo - 0.05 * (hi - lo) - 0.01, hi + 0.05 * (hi - lo) + 0.01)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("loss (validation: markers; training: smoothed)")
    ax.set_title(title or "loss")
    ax.grid(alpha=0.3)
    ax.legend()
    if paired:
        ax = axes[0][1]
        ref = {r["step"]: r["val_loss"] for r in data[reference] if "val_loss" in r}
        for i, (label, rows) in enumerate(data.items()):
            pts = [(r["tokens"], r["val_loss"] - ref[r["step"]]) for r in rows if "val_loss" in r and r["step"] in ref]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, color=colours[i], marker="o", markersize=3, linewidth=1.5,
                        label=label, linestyle="--" if label == reference else "-")
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel("training tokens")
        ax.set_ylabel(f"validation loss minus {reference}'s")
        ax.set_title(f"paired difference to {reference} (lower is better)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON via a temporary file and a rename, so readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def summaries(run_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    out = []
    for d in run_dirs:
        p = Path(d) / SUMMARY
        out.append(json.loads(p.read_text()) if p.exists() else {})
    return out
