"""Typed model configuration, named presets and dotted overrides."""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from mhar.streams.base import SCHEDULES

STREAM_METHODS = ("standard", "routed", "delta", "hyper")
ATTENTION_KERNELS = ("sdpa", "fa4")
ROPE_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@dataclass
class StreamConfig:
    """How information is carried across depth.

    method: standard | routed | delta | hyper.
    heads: routing heads H (routed, delta). H = 1 is attention residuals, H > 1 is MHAR.
    block_size: sublayers per block S. routed: 0 means full routing (every sublayer
        output is a source); S >= 1 is block routing (S = 1 equals full routing).
        delta: sublayers per delta block (required >= 1).
    schedule: one-pass (each site reads all its sources) or two-phase (batched read of
        the sources that exist when a chunk/block starts, then an exact online-softmax
        merge with those created inside it). Identical results; auto (the default)
        is two-phase where it measured faster on an H200 (CUDA; full routing at
        d >= 512, block routing at d >= 1024 from its fourth block on, see
        phase1_min_sources) and one-pass elsewhere (streams.base.uses_two_phase).
    chunk: for full routing with the two-phase schedule, sublayers per scheduling chunk.
    phase1_min_sources: with the two-phase schedule, a chunk (or block) whose phase 1
        would read fewer sources than this reads one-pass instead (0: every chunk
        two-phase); unset (None), 4 for block routing under 'auto' and 0 otherwise.
        Phase 1's kernels cost much the same for 1 to 8 sources (0.73-0.89 ms a read
        at 350M's shape, session 36), so the first blocks lose to one-pass.
    sum_in_product: block routing: a block's later sublayers form its running sum in
        their last product (the output projection adds into the sum as cuBLAS's C operand,
        ``model.layers.project_into``: one read of the sum instead of a pass of its own
        over three tensors, and one bf16 rounding instead of two). Off by default: on an
        H100 and an H200 it measured the separate add's step time, within the spread, at
        100M and 350M (sessions 56-57, bench/results/step_h200.md), and the separate
        add calls any sublayer as it is.
    hyper_n: number of parallel streams for hyper-connections.
    hyper_recompute: hyper-connections with the Triton glue (CUDA): recompute the n
        streams in backward instead of keeping them for every sublayer (0: keep them
        all). The sublayers fall into segments whose first keeps its input streams and
        whose others are recomputed from there: each segment covers half of the
        sublayers still left, down to a last one of at most hyper_recompute
        (streams.hyper.recompute_starts; 24 sublayers with 6: 12, 6 and 6). Costs one
        more forward pass of the glue for most sublayers; values and gradients are the
        same (the glue's kernels are deterministic). The default, 6, keeps
        hyper-connections within 1.05x the baseline's peak memory on an H200 (session
        47, bench/results/step_h200.md).
    """

    method: str = "standard"
    heads: int = 1
    block_size: int = 0
    schedule: str = "auto"
    chunk: int = 8
    phase1_min_sources: int | None = None
    sum_in_product: bool = False
    hyper_n: int = 4
    hyper_recompute: int = 6

    # How the stream is computed, not what: the same function and parameters either way
    # (values equal up to rounding), so a run may resume with any of these changed.
    COMPUTATION_ONLY = ("schedule", "chunk", "phase1_min_sources", "sum_in_product", "hyper_recompute")

    def validate(self, d_model: int, num_sublayers: int) -> None:
        if self.method not in STREAM_METHODS:
            raise ValueError(f"stream.method={self.method!r} is not one of {', '.join(STREAM_METHODS)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"stream.schedule={self.schedule!r} is not one of {', '.join(SCHEDULES)}")
        if self.method in ("routed", "delta"):
            if self.heads < 1 or d_model % self.heads:
                raise ValueError(f"stream.heads={self.heads} must divide d_model={d_model} "
                                 f"(allowed: positive divisors of {d_model})")
        if self.block_size < 0 or (self.method == "delta" and self.block_size < 1):
            allowed = ">= 1" if self.method == "delta" else "0 (full) or >= 1"
            raise ValueError(f"stream.block_size={self.block_size} is invalid for {self.method}: allowed {allowed}")
        if self.chunk < 1:
            raise ValueError(f"stream.chunk={self.chunk} must be >= 1")
        m = self.phase1_min_sources
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 0):
            raise ValueError(f"stream.phase1_min_sources={m!r} must be an integer >= 0 (0: every chunk two-phase), "
                             "or null (the schedule's default)")
        if not isinstance(self.sum_in_product, bool):
            raise ValueError(f"stream.sum_in_product={self.sum_in_product!r} must be true or false")
        if self.hyper_n < 1:
            raise ValueError(f"stream.hyper_n={self.hyper_n} must be >= 1")
        if self.hyper_recompute < 0:
            raise ValueError(f"stream.hyper_recompute={self.hyper_recompute} must be >= 0 (0: off)")


@dataclass
class ModelConfig:
    """A Qwen3-style decoder (SPEC.md section 4). The extra switches (qk_norm,
    attention_bias, head_dim, tie_embeddings) let converted Llama/Qwen2 models run
    through the same code."""

    vocab_size: int = 151936
    d_model: int = 512
    n_layers: int = 12
    n_heads: int = 8
    n_kv_heads: int = 4
    d_ff: int = 1536
    max_seq_len: int = 2048
    head_dim: int = 0  # 0: d_model // n_heads
    rope_theta: float = 1e4
    norm_eps: float = 1e-6
    init_std: float = 0.02
    qk_norm: bool = True
    attention_bias: bool = False
    tie_embeddings: bool = True
    # RoPE frequency scaling of converted models, as transformers writes it: None (plain
    # RoPE), {"rope_type": "linear", "factor": f} or {"rope_type": "llama3", "factor",
    # "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}.
    rope_scaling: dict | None = None
    # The causal attention's kernel in training: "sdpa" (PyTorch's scaled_dot_product_attention,
    # cuDNN's on an H100 / H200), or "fa4" (FlashAttention-4's kernels from the flash-attn-4
    # package, on compute capability 9 or 10; mhar.model.fa4), SDPA where FA4 cannot run. The
    # same function either way: a run may resume with it changed.
    attention_kernel: str = "sdpa"
    stream: StreamConfig = field(default_factory=StreamConfig)

    def __post_init__(self):
        if isinstance(self.stream, dict):
            self.stream = StreamConfig(**self.stream)
        self.validate()

    @property
    def num_sublayers(self) -> int:
        return 2 * self.n_layers

    @property
    def attn_head_dim(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    def validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} "
                             f"(allowed: divisors of {self.n_heads})")
        if not self.head_dim and self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} must divide d_model={self.d_model} unless head_dim is set")
        if self.attn_head_dim % 2:
            raise ValueError(f"head_dim={self.attn_head_dim} must be even for RoPE")
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(f"attention_kernel={self.attention_kernel!r} is not one of {', '.join(ATTENTION_KERNELS)}")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type") if isinstance(self.rope_scaling, dict) else None
            needed = {"linear": ("factor",), "llama3": ROPE_LLAMA3_KEYS}.get(kind)
            if needed is None:
                raise ValueError(f"rope_scaling={self.rope_scaling!r}: rope_type must be 'linear' or 'llama3' "
                                 "(or rope_scaling None for plain RoPE)")
            missing = [k for k in needed if k not in self.rope_scaling]
            if missing:
                raise ValueError(f"rope_scaling={self.rope_scaling!r} lacks {', '.join(missing)}")
        self.stream.validate(self.d_model, self.num_sublayers)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        return config_from_dict(cls, d, "model")


def config_from_dict(cls, d: dict[str, Any], what: str) -> Any:
    """Build the dataclass ``cls`` from a plain dict, refusing keys it does not have."""
    unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown {what} config keys: {sorted(unknown)}")
    return cls(**d)


# Shapes from SPEC.md section 4; vocab is the Qwen3 tokenizer's, padded.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(vocab_size=8192, d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=384, max_seq_len=256),
    "paper-100m": dict(vocab_size=151936, d_model=512, n_layers=12, n_heads=8, n_kv_heads=4, d_ff=1536, max_seq_len=2048),
    "paper-350m": dict(vocab_size=151936, d_model=1024, n_layers=24, n_heads=16, n_kv_heads=8, d_ff=4096, max_seq_len=1024),
    "paper-1b": dict(vocab_size=151936, d_model=1280, n_layers=36, n_heads=16, n_kv_heads=8, d_ff=5120, max_seq_len=1024),
}

# The method names used across the toolkit and in the paper's tables.
METHODS: dict[str, dict[str, Any]] = {
    "baseline": dict(method="standard"),
    "hyper": dict(method="hyper", hyper_n=4),
    "attnres": dict(method="routed", heads=1),
    "mhar": dict(method="routed", heads=8),
    "attnres-block": dict(method="routed", heads=1, block_size=-1),   # -1: about 8 blocks
    "mhar-block": dict(method="routed", heads=8, block_size=-1),
    "delta": dict(method="delta", heads=8, block_size=-1),
}


def _blocks_of_eight(num_sublayers: int) -> int:
    return max(1, -(-num_sublayers // 8))


def method_stream(name: str, num_sublayers: int, d_model: int | None = None, **overrides: Any) -> StreamConfig:
    """A StreamConfig for a named method ('baseline', 'hyper', 'attnres', 'mhar',
    'mhar-block', ...; also 'mhar-h4' style names for any H)."""
    base = name
    heads = None
    if "-h" in name and name.rsplit("-h", 1)[1].isdigit():
        base, h = name.rsplit("-h", 1)
        heads = int(h)
    if base not in METHODS:
        close = difflib.get_close_matches(base, list(METHODS), n=3)
        raise ValueError(f"unknown method {name!r}; allowed: {', '.join(METHODS)} (or NAME-hH for H heads)"
                         + (f"; did you mean {', '.join(close)}?" if close else ""))
    kw = dict(METHODS[base])
    if heads is not None:
        if kw["method"] not in ("routed", "delta"):  # would train the same model under another name
            routed = ", ".join(m for m, k in METHODS.items() if k["method"] in ("routed", "delta"))
            raise ValueError(f"method {name!r}: -hH (routing heads) applies to routed methods only ({routed})")
        kw["heads"] = heads
    if kw.get("block_size") == -1:
        kw["block_size"] = _blocks_of_eight(num_sublayers)
    kw.update(overrides)  # before the check: an override of heads is what must divide d_model
    if d_model is not None and kw.get("heads", 1) > 1 and d_model % kw["heads"]:
        raise ValueError(f"method {name!r} needs heads={kw['heads']} to divide d_model={d_model}")
    return StreamConfig(**kw)


def with_method(cfg: ModelConfig, method: str, overrides: dict[str, Any] | list[str]) -> ModelConfig:
    """``cfg`` with ``method``'s residual stream and the overrides (as ``apply_overrides``
    takes them): the shape ones first, so the method's stream is resolved against the final
    shape (mhar-block keeps about 8 blocks at n_layers=16, mhar-h3 is valid at d_model=96),
    then the ``stream.*`` ones on top of it."""
    pairs = _as_pairs(overrides)
    on_stream = {k: v for k, v in pairs.items() if k.startswith("stream.")}
    shape = {k: v for k, v in pairs.items() if k not in on_stream}
    cfg = apply_overrides(dataclasses.replace(cfg, stream=StreamConfig()), shape)
    cfg = dataclasses.replace(cfg, stream=method_stream(method, cfg.num_sublayers, cfg.d_model))
    return apply_overrides(cfg, on_stream)


def get_preset(name: str, method: str = "baseline") -> ModelConfig:
    if name not in PRESETS:
        close = difflib.get_close_matches(name, list(PRESETS), n=3)
        raise ValueError(f"unknown preset {name!r}; allowed: {', '.join(PRESETS)}"
                         + (f"; did you mean {', '.join(close)}?" if close else ""))
    p = dict(PRESETS[name])
    p["stream"] = method_stream(method, 2 * p["n_layers"], p["d_model"])
    return ModelConfig(**p)


def _parse_value(text: str, current: Any) -> Any:
    if isinstance(current, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got {text!r}")
    if isinstance(current, int):
        return int(text)
    if isinstance(current, float):
        return float(text)
    if current is None:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return type(current)(text)


def _as_pairs(overrides: dict[str, Any] | list[str]) -> dict[str, Any]:
    """``["stream.heads=4"]`` as ``{"stream.heads": "4"}``; a dict as it is."""
    if not isinstance(overrides, list):
        return dict(overrides)
    pairs = {}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like key=value (e.g. stream.heads=4)")
        k, v = item.split("=", 1)
        pairs[k.strip()] = v
    return pairs


def apply_overrides(obj: Any, overrides: dict[str, Any] | list[str]) -> Any:
    """Return a copy of a dataclass config with dotted overrides applied
    (``{"stream.heads": 4}`` or ``["stream.heads=4"]``). Unknown keys raise a
    ValueError listing close matches; the result is re-validated."""
    overrides = _as_pairs(overrides)
    data = dataclasses.asdict(obj)
    for key, value in overrides.items():
        node, parts = data, key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                valid = _dotted_keys(dataclasses.asdict(obj))
                close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
                raise ValueError(f"unknown config key {key!r}" + (f"; did you mean {', '.join(close)}?" if close
                                 else f"; valid keys: {', '.join(valid)}"))
            if i == len(parts) - 1:
                current = node[part]
                if isinstance(current, dict):
                    raise ValueError(f"config key {key!r} is a section; set one of its fields")
                try:
                    node[part] = _parse_value(value, current) if isinstance(value, str) else value
                except ValueError as err:
                    raise ValueError(f"bad value for {key}: {err}") from None
            else:
                node = node[part]
    return _rebuild(type(obj), data)


def _dotted_keys(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _dotted_keys(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}")
    return out


def _rebuild(cls, data: dict) -> Any:
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        v = data[f.name]
        if dataclasses.is_dataclass(f.default_factory() if callable(f.default_factory) else None) and isinstance(v, dict):
            v = _rebuild(type(f.default_factory()), v)
        kwargs[f.name] = v
    return cls(**kwargs)
