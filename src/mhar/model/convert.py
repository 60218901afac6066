"""Identity-preserving conversion of pretrained Llama / Qwen2 / Qwen3 models into
delta-routed mhar models (SPEC.md section 3).

The converted model keeps every pretrained weight and the standard residual stream;
the delta stream adds ``gate_i * route_i(sources)`` to each sublayer's input, with the
gates and the null source zero at init, so at step 0 its logits equal the original's
exactly (max |difference| = 0 in fp32)::

    from mhar.model.convert import convert
    model, report = convert("path/to/llama", heads=8, blocks=8)   # or a .gguf file
    model.save_pretrained("out")

``mhar convert SRC DST --heads 8 --blocks 8`` is the command-line form.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mhar.model.config import ROPE_LLAMA3_KEYS, ModelConfig, StreamConfig
from mhar.streams import build_stream

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")


class ConversionError(ValueError):
    """The source model cannot be converted exactly (unsupported architecture or feature)."""


def _rope(hf_config) -> tuple[float, dict | None]:
    """(theta, scaling) from a transformers config of any version (4.x: rope_theta and
    rope_scaling; 5.x: rope_parameters)."""
    params = getattr(hf_config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        theta = params["rope_theta"]
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    else:
        theta = getattr(hf_config, "rope_theta", 10000.0)
        scaling = dict(getattr(hf_config, "rope_scaling", None) or {})
    kind = scaling.pop("rope_type", scaling.pop("type", "default"))
    if kind == "default" and all(v in (None, 1.0) for k, v in scaling.items()
                                 if k in ("factor", "partial_rotary_factor", "attention_factor")):
        return float(theta), None
    return float(theta), {"rope_type": kind, **scaling}


def _supported_rope_scaling(scaling: dict) -> dict | None:
    """The ModelConfig.rope_scaling of a transformers rope config, or None if unsupported."""
    kind = scaling.get("rope_type")
    keep = {"linear": ("factor",), "llama3": ROPE_LLAMA3_KEYS}.get(kind)
    if keep is None or any(scaling.get(k) is None for k in keep):
        return None
    extra = {k: v for k, v in scaling.items() if k not in keep and k != "rope_type"}
    if any(v not in (None, 1.0) for k, v in extra.items() if k in ("partial_rotary_factor", "attention_factor")):
        return None
    if any(k not in ("partial_rotary_factor", "attention_factor") for k in extra):
        return None
    return {"rope_type": kind, **{k: scaling[k] for k in keep}}


def delta_block_size(layers: int, blocks: int) -> int:
    """Sublayers per delta block for ``blocks`` blocks over ``layers`` layers (blocks share
    one length, the last may be shorter, so not every count exists)."""
    return 2 * math.ceil(layers / blocks)


def config_from_hf(hf_config, heads: int = 8, blocks: int = 8, method: str = "delta") -> ModelConfig:
    """The mhar :class:`ModelConfig` of a Llama / Qwen2 / Qwen3 ``transformers`` config,
    with a delta stream of ``heads`` routing heads over ``blocks`` blocks of layers
    (``blocks`` may not divide the layer count: the last block is then shorter).
    ``method="standard"`` gives the plain model (the schedule-matched control)."""
    arch = getattr(hf_config, "model_type", None)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ConversionError(f"cannot convert model_type={arch!r}: supported architectures are "
                              f"{', '.join(SUPPORTED_ARCHITECTURES)} (Hugging Face folders) and GGUF files of them")
    problems = []
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act={hf_config.hidden_act!r} (only silu/SwiGLU)")
    if getattr(hf_config, "mlp_bias", False):
        problems.append("mlp_bias=True (the MLP has no biases)")
    if arch in ("llama", "qwen3") and getattr(hf_config, "attention_bias", False):
        problems.append("attention_bias=True (o_proj bias is not supported)")
    if getattr(hf_config, "use_sliding_window", False):
        problems.append("use_sliding_window=True (sliding-window attention is not supported)")
    if getattr(hf_config, "pretraining_tp", 1) not in (1, None):
        problems.append(f"pretraining_tp={hf_config.pretraining_tp} (only 1)")
    theta, scaling = _rope(hf_config)
    rope_scaling = None
    if scaling is not None:
        rope_scaling = _supported_rope_scaling(scaling)
        if rope_scaling is None:
            problems.append(f"rope scaling {scaling!r} (supported: plain RoPE, 'linear' and 'llama3')")
    if problems:
        raise ConversionError(f"cannot convert this {arch} model exactly: " + "; ".join(problems))

    d, L = hf_config.hidden_size, hf_config.num_hidden_layers
    n_heads = hf_config.num_attention_heads
    head_dim = getattr(hf_config, "head_dim", None) or d // n_heads
    if method == "delta":
        if heads < 1 or d % heads:
            raise ConversionError(f"--heads={heads} must divide the hidden size {d}")
        if blocks < 1 or blocks > L:
            raise ConversionError(f"--blocks={blocks} must be between 1 and the number of layers ({L})")
        stream = StreamConfig(method="delta", heads=heads, block_size=delta_block_size(L, blocks))
    elif method == "standard":
        stream = StreamConfig(method="standard")
    else:
        raise ConversionError(f"method={method!r}: conversion gives 'delta' (or 'standard', the control)")
    tie = getattr(hf_config, "tie_word_embeddings", None)
    if tie is None and hasattr(hf_config, "get_text_config"):
        tie = getattr(hf_config.get_text_config(), "tie_word_embeddings", False)
    return ModelConfig(
        vocab_size=hf_config.vocab_size, d_model=d, n_layers=L, n_heads=n_heads,
        n_kv_heads=getattr(hf_config, "num_key_value_heads", None) or n_heads, d_ff=hf_config.intermediate_size,
        max_seq_len=hf_config.max_position_embeddings, head_dim=head_dim, rope_theta=theta,
        norm_eps=float(hf_config.rms_norm_eps), init_std=float(getattr(hf_config, "initializer_range", 0.02)),
        qk_norm=(arch == "qwen3"), attention_bias=(arch == "qwen2"), tie_embeddings=bool(tie),
        rope_scaling=rope_scaling, stream=stream)


_LAYER_MAP = {
    "input_layernorm.weight": (0, "norm.weight"),
    "self_attn.q_proj.weight": (0, "attn.q_proj.weight"),
    "self_attn.k_proj.weight": (0, "attn.k_proj.weight"),
    "self_attn.v_proj.weight": (0, "attn.v_proj.weight"),
    "self_attn.o_proj.weight": (0, "attn.o_proj.weight"),
    "self_attn.q_proj.bias": (0, "attn.q_proj.bias"),
    "self_attn.k_proj.bias": (0, "attn.k_proj.bias"),
    "self_attn.v_proj.bias": (0, "attn.v_proj.bias"),
    "self_attn.q_norm.weight": (0, "attn.q_norm.weight"),
    "self_attn.k_norm.weight": (0, "attn.k_norm.weight"),
    "post_attention_layernorm.weight": (1, "norm.weight"),
    "mlp.gate_proj.weight": (1, "mlp.gate_proj.weight"),
    "mlp.up_proj.weight": (1, "mlp.up_proj.weight"),
    "mlp.down_proj.weight": (1, "mlp.down_proj.weight"),
}


def map_state_dict(hf_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Rename a Llama/Qwen2/Qwen3 ``*ForCausalLM`` state dict into :class:`Decoder` names.
    Unknown keys raise (nothing is silently dropped); rotary buffers are skipped."""
    out: dict[str, Tensor] = {}
    unknown = []
    for key, value in hf_state.items():
        k = key[len("model."):] if key.startswith("model.") else key
        if k.endswith("rotary_emb.inv_freq"):
            continue
        if k == "embed_tokens.weight":
            out["embed.weight"] = value
        elif k == "norm.weight":
            out["final_norm.weight"] = value
        elif key == "lm_head.weight":
            out["lm_head.weight"] = value
        elif k.startswith("layers."):
            _, index, rest = k.split(".", 2)
            if rest not in _LAYER_MAP:
                unknown.append(key)
                continue
            which, name = _LAYER_MAP[rest]
            out[f"sublayers.{2 * int(index) + which}.{name}"] = value
        else:
            unknown.append(key)
    if unknown:
        raise ConversionError(f"unexpected weights in the source model: {unknown[:8]}"
                              + (f" (+{len(unknown) - 8} more)" if len(unknown) > 8 else ""))
    return out


def load_weights(decoder: nn.Module, hf_state: dict[str, Tensor]) -> None:
    """Copy the pretrained weights into ``decoder`` (which may live on the meta device:
    the weights are assigned, as copies); every non-stream weight must be provided, and
    the stream's parameters keep their (identity) initialisation."""
    mapped = map_state_dict(hf_state)
    if decoder.lm_head is None:
        mapped.pop("lm_head.weight", None)  # tied: the source's head is the embedding
    own = decoder.state_dict()
    missing = [k for k in own if not k.startswith("residual.") and k not in mapped]
    extra = [k for k in mapped if k not in own]
    if missing or extra:
        raise ConversionError(f"weights do not match the converted architecture: missing {missing[:8]}, "
                              f"unexpected {extra[:8]}")
    full = {}
    for k, t in own.items():
        if k in mapped:
            v = mapped[k]
            if t.shape != v.shape:
                raise ConversionError(f"shape mismatch for {k}: source {tuple(v.shape)}, model {tuple(t.shape)}")
            full[k] = v.detach().clone()
        else:
            full[k] = t
    decoder.load_state_dict(full, strict=True, assign=True)


# -- sources ------------------------------------------------------------------------

@dataclass
class Source:
    """A loaded source model: the transformers model, its tokenizer (or None) and a label."""

    model: Any
    tokenizer: Any
    label: str


def load_source(src: str | os.PathLike, dtype: torch.dtype = torch.float32) -> Source:
    """Load a Llama/Qwen2/Qwen3 Hugging Face folder or a GGUF file (dequantised) as a
    ``transformers`` model. Raises ConversionError for anything else."""
    path = Path(src)
    if path.suffix.lower() == ".gguf":
        from mhar.model.gguf import load_gguf

        model, tokenizer = load_gguf(path, dtype=dtype)
        return Source(model, tokenizer, str(path))
    if not path.is_dir():
        raise FileNotFoundError(f"{src}: not a Hugging Face model folder or a .gguf file")
    if not (path / "config.json").exists():
        raise ConversionError(f"{src}: no config.json (expected a Hugging Face model folder or a .gguf file)")
    from transformers import AutoConfig, AutoModelForCausalLM

    import json

    model_type = json.loads((path / "config.json").read_text()).get("model_type")
    if model_type not in SUPPORTED_ARCHITECTURES:
        raise ConversionError(f"cannot convert model_type={model_type!r}: supported architectures are "
                              f"{', '.join(SUPPORTED_ARCHITECTURES)} (Hugging Face folders) and GGUF files of them")
    hf_config = AutoConfig.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, config=hf_config, dtype=dtype) \
        if _transformers_major() >= 5 else AutoModelForCausalLM.from_pretrained(path, config=hf_config, torch_dtype=dtype)
    tokenizer = None
    if any((path / n).exists() for n in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    return Source(model, tokenizer, str(path))


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


# -- conversion -----------------------------------------------------------------------

def from_hf_model(hf_model, heads: int = 8, blocks: int = 8, method: str = "delta"):
    """An :class:`~mhar.model.hf.MharForCausalLM` with ``hf_model``'s weights and a delta
    stream at its identity initialisation (or ``method="standard"``: the plain control)."""
    from mhar.model.hf import MharConfig, MharForCausalLM

    cfg = config_from_hf(hf_model.config, heads=heads, blocks=blocks, method=method)
    extra = {k: getattr(hf_model.config, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
             if getattr(hf_model.config, k, None) is not None}
    mcfg = MharConfig.from_model_config(cfg, **extra)
    dtype = next(hf_model.parameters()).dtype
    with torch.device("meta"):  # no random init of weights that are about to be replaced
        model = MharForCausalLM(mcfg)
    model.model.residual = build_stream(cfg.stream, cfg.d_model, cfg.num_sublayers)  # real, identity init
    load_weights(model.model, hf_model.state_dict())
    model.to(dtype)
    model.config.mhar_source = {"model_type": hf_model.config.model_type,
                                "name_or_path": str(getattr(hf_model.config, "_name_or_path", "") or "")}
    return model.eval()


@torch.no_grad()
def logit_difference(a, b, input_ids: Tensor) -> float:
    """max |logits_a - logits_b| over ``input_ids`` (both models called with use_cache=False)."""
    la = a(input_ids=input_ids, use_cache=False).logits
    lb = b(input_ids=input_ids, use_cache=False).logits
    return (la.float() - lb.float()).abs().max().item()


def check_identity(source_model, converted, input_ids: Tensor | None = None, seed: int = 0,
                   batch: int = 2, seq_len: int = 16) -> float:
    """max |logit difference| between the source and the converted model on ``input_ids``
    (default: random tokens). 0.0 is the conversion's promise in fp32."""
    if input_ids is None:
        g = torch.Generator().manual_seed(seed)
        input_ids = torch.randint(0, source_model.config.vocab_size, (batch, seq_len), generator=g)
    return logit_difference(source_model.eval(), converted.eval(), input_ids)


def convert(src, dst=None, heads: int = 8, blocks: int = 8, check: bool = True,
            text: str | None = None, dtype: torch.dtype = torch.float32, log=print):
    """Convert ``src`` (folder or GGUF) into a delta-routed model; save it to ``dst`` when
    given (safetensors, config, tokenizer, remote code). Returns (model, report)."""
    if dst is not None:
        dst = Path(dst)
        if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
            raise ValueError(f"{dst} exists and is not an empty folder; choose a new folder (nothing was written)")
    source = load_source(src, dtype=torch.float32)
    model = from_hf_model(source.model, heads=heads, blocks=blocks)
    cfg = model.config.to_model_config()
    report: dict[str, Any] = {
        "source": source.label, "model_type": source.model.config.model_type, "layers": cfg.n_layers,
        "d_model": cfg.d_model, "heads": cfg.stream.heads, "blocks": math.ceil(cfg.num_sublayers / cfg.stream.block_size),
        "block_size_sublayers": cfg.stream.block_size, "parameters": sum(p.numel() for p in model.parameters()),
        "routing_parameters": model.model.residual.overhead_parameters(),
    }
    if report["blocks"] != blocks:  # blocks share one length (the last may be shorter): not every count exists
        per = cfg.stream.block_size // 2
        last = cfg.n_layers - per * (report["blocks"] - 1)
        log(f"note: --blocks {blocks} cannot be made from {cfg.n_layers} layers in blocks of one length; using "
            f"{report['blocks']} blocks of {per} layers" + (f" (the last of {last})" if last != per else ""))
    if check:
        report["max_abs_diff_random"] = check_identity(source.model, model)
        if text and source.tokenizer is not None:
            ids = torch.tensor([source.tokenizer(text)["input_ids"]])
            report["max_abs_diff_text"] = check_identity(source.model, model, input_ids=ids)
        log(f"identity check (fp32): max |logit difference| = {report['max_abs_diff_random']}"
            + (f" random, {report['max_abs_diff_text']} on text" if "max_abs_diff_text" in report else ""))
    if dtype != torch.float32:
        model.to(dtype)
    if dst is not None:
        model.save_pretrained(dst)
        if source.tokenizer is not None:
            source.tokenizer.save_pretrained(dst)
        log(f"saved the converted model to {dst}")
    return model, report


__all__ = ["SUPPORTED_ARCHITECTURES", "ConversionError", "delta_block_size", "config_from_hf", "map_state_dict", "load_weights",
           "load_source", "from_hf_model", "check_identity", "logit_difference", "convert"]
