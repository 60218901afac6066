"""Reading run folders for analysis: config, metrics, the trained model and the
validation tokens it was evaluated on. Uses the trainer's own loaders (mhar.train)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

CONFIG_NAMES = ("config.json", "resolved_config.json", "train_config.json")

# keys a metrics record may use for the validation / training loss
_VAL_KEYS = ("val_loss", "eval_loss", "val/loss", "validation_loss")
# config keys that do not change what is compared (how it ran, how often it logged)
_NOT_SETUP = {"method", "threads", "device", "compile", "log_every", "checkpoint_every", "keep_last", "loss_chunk"}
_TRAIN_KEYS = ("loss", "train_loss", "train/loss")


def run_dir(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: a file, not a run folder" if p.exists() else f"{p}: no such run folder")
    return p


def _run_config(p: Path) -> Path | None:
    """The run config of folder ``p``: a JSON object with a ``model`` section (a saved
    Hugging Face model's config.json, which has none, does not count)."""
    for name in CONFIG_NAMES:
        if (p / name).is_file():
            try:
                data = json.loads((p / name).read_text())
            except (OSError, ValueError):
                return p / name  # load_config_dict says what is wrong with it
            if isinstance(data, dict) and isinstance(data.get("model"), dict):
                return p / name
    return None


def is_run_folder(path: str | Path) -> bool:
    p = Path(path).expanduser()
    return p.is_dir() and _run_config(p) is not None


def config_path(run: str | Path) -> Path:
    p = run_dir(run)
    found = _run_config(p)
    if found is not None:
        return found
    if (p / "config.json").is_file():
        raise FileNotFoundError(f"{p}: a Hugging Face model folder (config.json without a training config), not a "
                                "run folder: analyse the run folder that trained it (mhar train / compare / sweep / "
                                "midtrain)")
    raise FileNotFoundError(f"{p}: not a run folder (no {' / '.join(CONFIG_NAMES)})")


def load_config_dict(run: str | Path) -> dict[str, Any]:
    path = config_path(run)
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


def read_metrics(run: str | Path) -> list[dict[str, Any]]:
    """Every record of the run's metrics.jsonl (the trainer's reader: a line cut by a crash is skipped)."""
    from mhar.train.metrics import read_metrics as _read
    return _read(run_dir(run))


def _first(rec: dict, keys: tuple[str, ...]) -> float | None:
    for k in keys:
        v = rec.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


@dataclass
class RunSummary:
    """What the report needs from one run folder."""

    path: Path
    name: str
    method: str
    stream: dict[str, Any]
    preset: str
    seed: int
    tail_k: int
    params: dict[str, Any] = field(default_factory=dict)
    val: list[tuple[int, float]] = field(default_factory=list)     # (step, validation loss)
    train: list[tuple[int, float]] = field(default_factory=list)   # (step, training loss)
    model: dict[str, Any] = field(default_factory=dict)  # the model config
    steps: int = 0  # the configured training budget
    setup: str = ""  # the config without the method: runs with equal setups are paired comparisons
    tokens_per_s: float | None = None  # from the trainer's summary.json, once the run finished
    mfu: float | None = None  # the summary's (its median step's), where the device's peak was known

    @property
    def heads(self) -> int:
        return int(self.stream.get("heads", 1)) if self.routes else 0

    @property
    def routes(self) -> bool:
        return self.stream.get("method") in ("routed", "delta")

    @property
    def block_size(self) -> int:
        return int(self.stream.get("block_size", 0))

    @property
    def final_val(self) -> float | None:
        return self.val[-1][1] if self.val else None

    @property
    def tail_mean(self) -> float | None:
        if not self.val:
            return None
        tail = [v for _, v in self.val[-self.tail_k:]]
        return sum(tail) / len(tail)

    @property
    def last_step(self) -> int:
        steps = [s for s, _ in self.val] + [s for s, _ in self.train]
        return max(steps) if steps else 0


def summarize_run(run: str | Path) -> RunSummary:
    p = run_dir(run)
    cfg = load_config_dict(p)
    model = cfg.get("model", {})
    stream = model.get("stream", {}) if isinstance(model, dict) else {}
    s = RunSummary(p, p.name, str(cfg.get("method", stream.get("method", "?"))), stream, str(cfg.get("preset", "")),
                   int(cfg.get("seed", 0)), int(cfg.get("tail_k", 11)))
    s.model = model if isinstance(model, dict) else {}
    s.steps = int(cfg.get("steps", 0))
    setup = {k: v for k, v in cfg.items() if k not in _NOT_SETUP}
    if isinstance(setup.get("model"), dict):
        setup["model"] = {k: v for k, v in setup["model"].items() if k != "stream"}
    s.setup = json.dumps(setup, sort_keys=True, default=str)
    try:
        from mhar.model import ModelConfig, count_parameters
        s.params = count_parameters(ModelConfig.from_dict(model))
    except (ValueError, TypeError):
        s.params = {}
    summary = p / "summary.json"
    if summary.is_file():
        try:
            data = json.loads(summary.read_text())
            tps, mfu = data.get("tokens_per_s"), data.get("mfu")
            s.tokens_per_s = float(tps) if isinstance(tps, (int, float)) else None
            s.mfu = float(mfu) if isinstance(mfu, (int, float)) else None
        except ValueError:
            pass
    for rec in read_metrics(p):
        step = rec.get("step")
        if not isinstance(step, int):
            continue
        v = _first(rec, _VAL_KEYS)
        if v is not None:
            s.val.append((step, v))
            rec = {k: x for k, x in rec.items() if k not in _VAL_KEYS}
        t = _first(rec, _TRAIN_KEYS)
        if t is not None:
            s.train.append((step, t))
    return s


# ----------------------------------------------------------------------------- model and tokens

def load_run_model(run: str | Path, step: int | None = None):
    """(model in eval mode on the CPU, TrainConfig, checkpoint step): the newest
    checkpoint, or the one of ``step``, through the trainer's own loader
    (:func:`mhar.train.load.load_run_model`)."""
    from mhar.train.checkpoint import list_checkpoints
    from mhar.train.load import load_run_config
    from mhar.train.load import load_run_model as _load
    from mhar.train.metrics import CHECKPOINTS

    p = config_path(run).parent  # a run folder (a saved model folder is refused, with what it is)
    model = _load(p, step)
    cfg = load_run_config(p)
    if step is None:
        found = list_checkpoints(p / CHECKPOINTS)
        step = found[-1][0] if found else -1
    return model, cfg, int(step)


def validation_inputs(cfg, windows: int | None = None, seq_len: int | None = None) -> Tensor:
    """The run's fixed validation windows as model inputs (n, seq_len): the same
    windows its evaluations used (``mhar.train.data.build_data``)."""
    from mhar.train.data import build_data

    T = seq_len or cfg.seq_len
    data = build_data(cfg.data, T, 1, cfg.seed)
    val = data.val[:, :-1]
    if windows is not None:
        if windows < 1:
            raise ValueError(f"windows={windows} must be >= 1")
        val = val[:windows]
    return val


def batches(inputs: Tensor, batch_size: int = 8):
    for i in range(0, inputs.shape[0], batch_size):
        yield inputs[i:i + batch_size]
