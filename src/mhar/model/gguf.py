"""Read a GGUF file (llama.cpp's format) of a Llama / Qwen2 / Qwen3 model into a plain
``transformers`` ``*ForCausalLM`` in fp32, dequantising every tensor (Q4_0, Q4_1, Q8_0,
K-quants, F16, ... through the ``gguf`` package).

This is what ``transformers``' own ``from_pretrained(dir, gguf_file=...)`` does, done
directly (it needs no ``accelerate`` and is several times faster): the tensors are
renamed to Hugging Face names, and Llama's q/k projections get llama.cpp's RoPE
permutation undone. The tokenizer, when asked for, comes from ``transformers``' GGUF
tokenizer conversion. Once loaded, the dequantised model *is* the original that the
converted model must match exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def _require_gguf():
    try:
        import gguf  # noqa: F401
    except ImportError as err:
        raise ImportError("reading GGUF files needs the gguf package: pip install 'mhar-pytorch[hf]' "
                          "(or pip install gguf)") from err


def _field(reader, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (its convert script interleaves the RoPE halves)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


class NotAGGUFError(ValueError):
    """A file named .gguf that is not one: no other GGUF loader is tried."""


def read_gguf(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(hf_config_kwargs, hf_state_dict) for a GGUF file; the config kwargs include
    ``model_type``, ``_name_or_path`` and ``_has_tokenizer``. Raises ValueError for an unsupported architecture."""
    _require_gguf()
    from gguf import GGUFReader
    from gguf.quants import dequantize

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such GGUF file")
    with open(path, "rb") as f:  # else the reader's error is about dtype sizes
        if f.read(4) != b"GGUF":
            raise NotAGGUFError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
    reader = GGUFReader(str(path))
    arch = _field(reader, "general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(f"{path.name}: GGUF architecture {arch!r} is not supported; supported: "
                         f"{', '.join(GGUF_ARCHITECTURES)}")
    n_heads = int(_field(reader, f"{arch}.attention.head_count"))
    n_kv = int(_field(reader, f"{arch}.attention.head_count_kv", n_heads))
    d = int(_field(reader, f"{arch}.embedding_length"))
    scaling = _field(reader, f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ValueError(f"{path.name}: RoPE scaling {scaling!r} is not supported (only plain RoPE)")
    state: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type)
        w = np.ascontiguousarray(w, dtype=np.float32).reshape([int(x) for x in reversed(t.shape.tolist())])
        name = t.name
        if name == "token_embd.weight":
            key = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            key = "model.norm.weight"
        elif name == "output.weight":
            key = "lm_head.weight"
        elif name.startswith("blk."):
            _, index, rest = name.split(".", 2)
            if rest not in _LAYER_NAMES:
                raise ValueError(f"{path.name}: unexpected tensor {name!r} for architecture {arch}")
            if arch == "llama" and rest == "attn_q.weight":
                w = _unpermute(w, n_heads)
            elif arch == "llama" and rest == "attn_k.weight":
                w = _unpermute(w, n_kv)
            key = f"model.layers.{index}.{_LAYER_NAMES[rest]}"
        elif name in ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"):
            raise ValueError(f"{path.name}: tensor {name!r} (RoPE frequency factors) is not supported")
        else:
            raise ValueError(f"{path.name}: unexpected tensor {name!r}")
        state[key] = torch.from_numpy(np.array(w, copy=True) if not w.flags.writeable else w)
    vocab = _field(reader, f"{arch}.vocab_size") or state["model.embed_tokens.weight"].shape[0]
    head_dim = _field(reader, f"{arch}.attention.key_length") or d // n_heads
    config = dict(
        model_type=arch, vocab_size=int(vocab), hidden_size=d,
        intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
        num_hidden_layers=int(_field(reader, f"{arch}.block_count")),
        num_attention_heads=n_heads, num_key_value_heads=n_kv, head_dim=int(head_dim),
        max_position_embeddings=int(_field(reader, f"{arch}.context_length", 2048)),
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        tie_word_embeddings="lm_head.weight" not in state,
    )
    for key, name in (("bos_token_id", "tokenizer.ggml.bos_token_id"), ("eos_token_id", "tokenizer.ggml.eos_token_id"),
                      ("pad_token_id", "tokenizer.ggml.padding_token_id")):
        value = _field(reader, name)
        if value is not None:
            config[key] = int(value)
    config["_name_or_path"] = str(_field(reader, "general.name", path.stem))
    config["_has_tokenizer"] = _field(reader, "tokenizer.ggml.model") is not None
    return config, state


def hf_config_from_kwargs(kwargs: dict[str, Any]):
    from transformers import LlamaConfig, Qwen2Config

    kwargs = dict(kwargs)
    kwargs.pop("_has_tokenizer", None)
    arch = kwargs.pop("model_type")
    name = kwargs.pop("_name_or_path", "")
    theta = kwargs.pop("rope_theta")
    if arch == "llama":
        cls = LlamaConfig
    elif arch == "qwen2":
        cls = Qwen2Config
    else:
        from transformers import Qwen3Config as cls
    try:  # transformers 5.x: rope_parameters
        import inspect

        if "rope_parameters" in inspect.signature(cls.__init__).parameters:
            kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
        else:
            kwargs["rope_theta"] = theta
    except (TypeError, ValueError):  # pragma: no cover
        kwargs["rope_theta"] = theta
    if arch == "qwen2":
        kwargs.pop("head_dim", None)
    config = cls(**kwargs)
    config._name_or_path = name
    return config


def load_gguf(path: str | Path, dtype: torch.dtype = torch.float32, tokenizer: bool = True):
    """(model, tokenizer or None): the dequantised ``*ForCausalLM`` of a GGUF file, in eval
    mode, and its tokenizer (``transformers``' GGUF conversion) when ``tokenizer`` and
    the file has one."""
    from transformers import AutoModelForCausalLM

    kwargs, state = read_gguf(path)
    has_tokenizer = kwargs.pop("_has_tokenizer")
    config = hf_config_from_kwargs(kwargs)
    with torch.device("meta"):  # skip the random init of 100M+ weights
        model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"{Path(path).name}: weights do not match {type(model).__name__}: "
                         f"missing {missing[:8]}, unexpected {unexpected[:8]}")
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    _materialise_buffers(model, config)
    model.to(dtype).eval()
    tok = load_gguf_tokenizer(path) if tokenizer and has_tokenizer else None
    return model, tok


def _materialise_buffers(model, config) -> None:
    """Rebuild the modules left on the meta device by the meta-device construction:
    only the rotary embeddings (non-persistent inv_freq buffers) are expected."""
    for name, module in list(model.named_modules()):
        if any(b.is_meta for b in module.buffers(recurse=False)):
            if not type(module).__name__.endswith("RotaryEmbedding"):
                raise RuntimeError(f"cannot materialise {name} ({type(module).__name__})")
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], type(module)(config=config))
    leftover = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if leftover:
        raise RuntimeError(f"weights not loaded from the GGUF file: {leftover[:8]}")


def load_gguf_tokenizer(path: str | Path):
    """The tokenizer stored in a GGUF file, as a ``transformers`` fast tokenizer."""
    from transformers import AutoTokenizer

    path = Path(path)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


__all__ = ["GGUF_ARCHITECTURES", "NotAGGUFError", "read_gguf", "load_gguf", "load_gguf_tokenizer", "hf_config_from_kwargs"]
