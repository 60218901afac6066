"""Typed training configuration: a :class:`TrainConfig` with the :class:`ModelConfig`
nested under ``model``, named presets and dotted overrides.

Overrides use the same ``key=value`` syntax as the model config (SPEC.md section 4
defaults): ``lr=1e-3``, ``steps=200``, ``data.source=synthetic``; model keys may be
written with or without the ``model.`` prefix (``stream.heads=4`` is
``model.stream.heads=4``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mhar.model.config import (ModelConfig, _dotted_keys, apply_overrides, config_from_dict, get_preset,
                               with_method)

DATA_SOURCES = ("builtin", "synthetic")  # or a path to a dataset folder
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16")
PARALLEL = ("none", "ddp", "fsdp")  # multi-process training: mhar.train.distributed
CUDA_GRAPHS = ("auto", "on", "off")  # mhar.train.graphs
COMPILE = ("auto", "regions", "full", "off")
ADAMW = ("auto", "torch", "triton")  # mhar.train.optim.build_optimizer
_LEGACY_COMPILE = {True: "full", False: "off", "true": "full", "false": "off"}  # compile was a bool


@dataclass
class DataConfig:
    """Where tokens come from.

    source: ``builtin`` (the built-in corpus, built and cached on first use),
        ``synthetic`` (a deterministic generated stream, for tests and benchmarks),
        or a path to a dataset folder made by ``mhar data build``.
    tokenizer, vocab_size, max_mb: passed to the built-in dataset builder.
    val_windows: number of fixed validation windows; val_seed: their seed.
    """

    source: str = "builtin"
    tokenizer: str = "bpe"
    vocab_size: int = 8192
    max_mb: float = 0.0  # 0: the builder's default
    val_windows: int = 64
    val_seed: int = 1234

    def validate(self) -> None:
        if self.source not in DATA_SOURCES and not Path(self.source).expanduser().exists():
            raise ValueError(f"data.source={self.source!r} is not one of {', '.join(DATA_SOURCES)} "
                             "and is not an existing dataset folder")
        if self.vocab_size < 2:
            raise ValueError(f"data.vocab_size={self.vocab_size} must be >= 2")
        if self.val_windows < 1:
            raise ValueError(f"data.val_windows={self.val_windows} must be >= 1")
        if self.max_mb < 0:
            raise ValueError(f"data.max_mb={self.max_mb} must be >= 0 (0: default)")


@dataclass
class TrainConfig:
    """One training run. SPEC.md section 4: AdamW (0.9, 0.95), weight decay 0.1 on
    every parameter (``decay_all=false`` exempts norms, biases, embeddings and
    routing parameters), grad clip 1.0, linear warm-up then cosine to
    ``min_lr_ratio`` x peak, tail-mean over the last ``tail_k`` evaluations.

    batch_size is the micro-batch per process; one optimiser step sees
    ``batch_size * grad_accum * world_size`` sequences of ``seq_len`` tokens.
    """

    model: ModelConfig = field(default_factory=lambda: get_preset("tiny"))
    data: DataConfig = field(default_factory=DataConfig)
    preset: str = "tiny"
    method: str = "baseline"
    seed: int = 0
    steps: int = 200
    batch_size: int = 8
    grad_accum: int = 1
    seq_len: int = 128
    lr: float = 5e-4
    warmup: int = 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    decay_all: bool = True
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    eval_every: int = 20
    tail_k: int = 11
    checkpoint_every: int = 100
    keep_last: int = 2
    log_every: int = 1
    device: str = "auto"
    dtype: str = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU
    # auto: regions on CUDA (one process, DDP or FSDP2), off on the CPU; regions: each sublayer kind
    # compiled once (Decoder.compile_regions); full: the whole loss module (slow to compile
    # at depth, measured no faster); off. true / false (older configs) mean full / off.
    compile: str = "auto"
    # replay each micro-batch's forward+backward as a CUDA graph (mhar.train.graphs):
    # auto = on for one process on a CUDA device, off otherwise; on: also under DDP (no DDP
    # wrapper: the gradients are summed across ranks after the step, docs/distributed.md)
    cuda_graphs: str = "auto"
    # torch: torch's AdamW (fused on CUDA) after clip_grad_norm_; triton: one Triton
    # kernel with the clip's scale folded in (mhar.train.adamw_kernel; plain tensors: one
    # process or DDP, not FSDP2); auto = triton on CUDA except under FSDP2 (on an H200 the
    # baseline's steps were 1.5-2.6% shorter with it at 350M and 1B:
    # bench/results/step_h200.md, session 10), torch otherwise
    adamw: str = "auto"
    # recompute each sublayer in backward instead of keeping its activations: less
    # memory for about a third more compute (the stream's sources are kept either way).
    # It composes with CUDA graphs (at 350M on an H200, graphed steps were 12-14% faster
    # than eager ones with it: bench/results/step_h200.md)
    activation_checkpointing: bool = False
    loss_chunk: int = 0  # >0: LM head + loss in chunks of this many tokens
    threads: int = 0  # >0: torch.set_num_threads on the CPU
    vocab_from_data: bool = True  # set model.vocab_size to the dataset's vocabulary
    parallel: str = "none"  # ddp | fsdp: one process per GPU under torchrun (docs/distributed.md)
    # the device's peak TFLOP/s for the logged MFU; 0: the GPU's dense bf16 peak from
    # mhar.gpu_peak's table (or MHAR_PEAK_TFLOPS), none on the CPU
    peak_tflops: float = 0.0

    def __post_init__(self):
        if isinstance(self.model, dict):
            self.model = ModelConfig.from_dict(self.model)
        if isinstance(self.data, dict):
            self.data = DataConfig(**self.data)
        self.validate()

    def validate(self) -> None:
        positive = ("steps", "batch_size", "grad_accum", "seq_len", "eval_every", "tail_k", "checkpoint_every",
                    "log_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("warmup", "keep_last", "threads", "loss_chunk"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0")
        # written as "not (ok)" so that NaN fails too
        if not 0 < self.lr < math.inf:
            raise ValueError(f"lr={self.lr} must be > 0 and finite")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")
        if not 0 <= self.weight_decay < math.inf:
            raise ValueError(f"weight_decay={self.weight_decay} must be >= 0 and finite")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be in [0, 1)")
        if not 0 <= self.eps < math.inf:
            raise ValueError(f"eps={self.eps} must be >= 0 and finite")
        if not 0 <= self.peak_tflops < math.inf:
            raise ValueError(f"peak_tflops={self.peak_tflops} must be >= 0 and finite (0: the device's own)")
        if not self.grad_clip >= 0:  # inf: no clipping, as 0
            raise ValueError(f"grad_clip={self.grad_clip} must be >= 0 (0: no clipping)")
        if self.device not in DEVICES:
            raise ValueError(f"device={self.device!r} is not one of {', '.join(DEVICES)}")
        if self.parallel not in PARALLEL:
            raise ValueError(f"parallel={self.parallel!r} is not one of {', '.join(PARALLEL)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is not one of {', '.join(DTYPES)}")
        self.compile = _LEGACY_COMPILE.get(self.compile, self.compile)
        if self.compile not in COMPILE:
            raise ValueError(f"compile={self.compile!r} is not one of {', '.join(COMPILE)}")
        if self.cuda_graphs not in CUDA_GRAPHS:
            raise ValueError(f"cuda_graphs={self.cuda_graphs!r} is not one of {', '.join(CUDA_GRAPHS)}")
        if self.adamw not in ADAMW:
            raise ValueError(f"adamw={self.adamw!r} is not one of {', '.join(ADAMW)}")
        if self.adamw == "triton" and self.parallel == "fsdp":
            raise ValueError("adamw=triton updates plain tensors; parallel=fsdp shards them (DTensors): "
                             "use adamw=torch or auto")
        if self.cuda_graphs == "on" and self.parallel == "fsdp":
            raise ValueError("cuda_graphs=on runs in one process or under DDP; parallel='fsdp' is not supported "
                             "with it (use cuda_graphs=auto or off)")
        if self.seq_len > self.model.max_seq_len:
            raise ValueError(f"seq_len={self.seq_len} exceeds model.max_seq_len={self.model.max_seq_len}")
        self.data.validate()
        self.model.validate()

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.grad_accum * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        return config_from_dict(cls, d, "train")

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        try:
            d = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not a training config: invalid JSON ({err})") from None
        return cls.from_dict(d)


# Named training presets. The model shape comes from the model preset of the same
# family; these set the optimisation budget. ``tiny`` is the CPU demo.
TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    # The CPU demo: 300 steps of 8 x 128 tokens per method (about 1.5 minutes each on 2 cores), on a 16 MB
    # subset of the built-in corpus (4.7 M tokens: no method sees a token twice; quick to build).
    "tiny": dict(model_preset="tiny", steps=300, batch_size=8, seq_len=128, lr=2e-3, warmup=20, eval_every=25,
                 tail_k=4, checkpoint_every=100, log_every=1, data=dict(val_windows=32, max_mb=16.0)),
    "paper-100m": dict(model_preset="paper-100m", steps=20000, batch_size=64, seq_len=2048, lr=5e-4, warmup=1000,
                       eval_every=200, tail_k=11, checkpoint_every=1000, log_every=10, loss_chunk=8192),
    "paper-350m": dict(model_preset="paper-350m", steps=20000, batch_size=32, seq_len=1024, lr=5e-4, warmup=1000,
                       eval_every=200, tail_k=11, checkpoint_every=1000, log_every=10, loss_chunk=8192),
    "paper-1b": dict(model_preset="paper-1b", steps=20000, batch_size=32, seq_len=1024, lr=5e-4, warmup=1000,
                     eval_every=200, tail_k=11, checkpoint_every=1000, log_every=10, loss_chunk=8192),
}


def train_preset(name: str = "tiny", method: str = "baseline") -> TrainConfig:
    """The TrainConfig of a named preset with the model's residual stream set to ``method``."""
    if name not in TRAIN_PRESETS:
        close = difflib.get_close_matches(name, list(TRAIN_PRESETS), n=3)
        raise ValueError(f"unknown preset {name!r}; allowed: {', '.join(TRAIN_PRESETS)}"
                         + (f"; did you mean {', '.join(close)}?" if close else ""))
    p = dict(TRAIN_PRESETS[name])
    model = get_preset(p.pop("model_preset"), method=method)
    data = DataConfig(**p.pop("data", {}))
    return TrainConfig(model=model, data=data, preset=name, method=method, **p)


def normalise_key(key: str) -> str:
    """Model keys may be given without the ``model.`` prefix."""
    head = key.split(".", 1)[0]
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    if head not in train_fields and head in model_fields:
        return "model." + key
    return key


def apply_train_overrides(cfg: TrainConfig, overrides: list[str] | dict[str, Any]) -> TrainConfig:
    """Dotted overrides on a TrainConfig (``lr=1e-3``, ``stream.heads=4``,
    ``model.d_model=256``, ``data.source=synthetic``). Unknown keys raise a
    ValueError that lists close matches; the result is re-validated."""
    if isinstance(overrides, list):
        pairs: dict[str, Any] = {}
        for item in overrides:
            if "=" not in item:
                raise ValueError(f"override {item!r} must look like key=value (e.g. lr=1e-3 or stream.heads=4)")
            k, v = item.split("=", 1)
            pairs[k.strip()] = v
        overrides = pairs
    if not overrides:
        return cfg
    overrides = dict(overrides)
    if "preset" in overrides:
        raise ValueError("preset cannot be overridden; pass --preset NAME")
    method = str(overrides.pop("method")) if "method" in overrides else None  # sets the whole residual stream
    normalised = {}
    for key, value in overrides.items():
        nk = normalise_key(key)
        valid = _dotted_keys(dataclasses.asdict(cfg))
        fields = [k for k in valid if k.startswith(nk + ".")]
        if fields:  # a section (model, stream, data): name its fields
            short = [k[len("model."):] if k.startswith("model.") and not key.startswith("model.") else k
                     for k in fields]
            raise ValueError(f"config key {key!r} is a section; set one of its fields: {', '.join(short)}")
        if nk not in valid:
            short = [k[len("model."):] if k.startswith("model.") else k for k in valid]
            close = difflib.get_close_matches(key, short, n=3, cutoff=0.5)
            raise ValueError(f"unknown config key {key!r}" + (f"; did you mean {', '.join(close)}?" if close
                             else f"; valid keys: {', '.join(short)}"))
        normalised[nk] = value
    if method is not None:  # the method's stream follows the model overrides (with_method)
        on_model = {k[len("model."):]: v for k, v in normalised.items() if k.startswith("model.")}
        cfg = dataclasses.replace(cfg, method=method, model=with_method(cfg.model, method, on_model))
        normalised = {k: v for k, v in normalised.items() if not k.startswith("model.")}
    return apply_overrides(cfg, normalised)


def config_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two nested config dicts: ``key: old -> new``."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<missing>"), new.get(key, "<missing>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_diff(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return out
