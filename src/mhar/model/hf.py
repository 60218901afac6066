"""Hugging Face ``transformers`` integration: a config class and a ``PreTrainedModel``
for mhar decoders (every stream method), registered with ``AutoConfig`` and
``AutoModelForCausalLM`` under ``model_type = "mhar"``.

    from mhar.model.hf import MharConfig, MharForCausalLM
    model = MharForCausalLM(MharConfig.from_model_config(get_preset("tiny", "mhar")))
    model.save_pretrained("out")                     # safetensors + remote code
    model = AutoModelForCausalLM.from_pretrained("out")
    model.generate(ids, max_new_tokens=20)           # KV cache: only attention needs one

A saved folder also carries the model code (``modeling_mhar.py`` and the mhar modules
it needs, flattened beside it), so ``from_pretrained(folder, trust_remote_code=True)``
works where mhar is not installed; see :mod:`mhar.model.remote`.

Padding follows transformers' ``attention_mask``. Right padding runs the plain causal path
(causal attention never lets a token read later padding, and depth routing is per token),
so training batches padded on the right are exact. Left padding (batched ``generate``)
numbers each row's positions from its first token and masks the padding keys in
attention, as transformers' own models do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mhar.model.config import ModelConfig, StreamConfig
from mhar.model.decoder import Decoder, token_positions
from mhar.model.layers import RMSNorm

try:
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutputWithPast
except ImportError as err:  # pragma: no cover - the import error names the extra to install
    raise ImportError("the Hugging Face integration needs transformers: pip install 'mhar-pytorch[hf]'") from err

try:  # transformers >= 4.36
    from transformers.cache_utils import DynamicCache
except ImportError:  # pragma: no cover
    DynamicCache = None

_CACHE_FIELD = "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"
_MODEL_FIELDS = [f.name for f in dataclasses.fields(ModelConfig) if f.name != "stream"]


class MharConfig(PretrainedConfig):
    """The :class:`~mhar.model.config.ModelConfig` of an mhar decoder as a ``transformers``
    config. Fields keep their mhar names (``d_model``, ``n_layers``, ...); the usual
    Hugging Face names (``hidden_size``, ``num_hidden_layers``, ...) are aliases."""

    model_type = "mhar"
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_hidden_layers": "n_layers",
        "num_attention_heads": "n_heads",
        "num_key_value_heads": "n_kv_heads",
        "intermediate_size": "d_ff",
        "max_position_embeddings": "max_seq_len",
        "rms_norm_eps": "norm_eps",
        "initializer_range": "init_std",
    }

    def __init__(self, vocab_size: int = 151936, d_model: int = 512, n_layers: int = 12, n_heads: int = 8,
                 n_kv_heads: int = 4, d_ff: int = 1536, max_seq_len: int = 2048, head_dim: int = 0,
                 rope_theta: float = 1e4, norm_eps: float = 1e-6, init_std: float = 0.02, qk_norm: bool = True,
                 attention_bias: bool = False, tie_embeddings: bool = True, stream: dict | None = None,
                 use_cache: bool = True, mhar_rope_scaling: dict | None = None, attention_kernel: str = "sdpa",
                 **kwargs: Any):
        self.vocab_size, self.d_model, self.n_layers, self.n_heads = vocab_size, d_model, n_layers, n_heads
        self.n_kv_heads, self.d_ff, self.max_seq_len, self.head_dim = n_kv_heads, d_ff, max_seq_len, head_dim
        self.rope_theta, self.norm_eps, self.init_std, self.qk_norm = rope_theta, norm_eps, init_std, qk_norm
        self.attention_bias, self.tie_embeddings = attention_bias, tie_embeddings
        self.attention_kernel = attention_kernel
        # ModelConfig.rope_scaling; not "rope_scaling", which transformers 5 maps onto its own rope_parameters
        self.mhar_rope_scaling = dict(mhar_rope_scaling) if mhar_rope_scaling else None
        if isinstance(stream, StreamConfig):
            stream = dataclasses.asdict(stream)
        self.stream = dict(stream or {})
        # The decoder ties its head itself (no lm_head module when tied): transformers must not tie.
        kwargs["tie_word_embeddings"] = False
        super().__init__(**kwargs)
        self.use_cache = use_cache
        self.to_model_config()  # validate now: a bad value fails here, naming the field

    def to_model_config(self) -> ModelConfig:
        fields = {name: getattr(self, name) for name in _MODEL_FIELDS if name != "rope_scaling"}
        return ModelConfig(**fields, rope_scaling=self.mhar_rope_scaling, stream=StreamConfig(**self.stream))

    @classmethod
    def from_model_config(cls, cfg: ModelConfig, **kwargs: Any) -> "MharConfig":
        d = cfg.to_dict()
        d["mhar_rope_scaling"] = d.pop("rope_scaling", None)
        return cls(**d, **kwargs)


def _init_stream_parameters(stream: nn.Module) -> None:
    """The streams' own initialisation (queries, gates and null source zero, key norms
    one), for weights that a checkpoint does not provide."""
    with torch.no_grad():
        for name, p in stream.named_parameters(recurse=False):
            if name == "key_norms":
                p.fill_(1.0)
            elif name in ("queries", "gates", "null_source"):
                p.zero_()


class _CacheAdapter:
    """A ``transformers`` cache (``DynamicCache``) seen through :class:`mhar.model.layers.KVCache`'s
    interface, so ``generate`` and the decoder share one cache object."""

    def __init__(self, cache):
        self.cache = cache

    def layer_length(self, layer: int) -> int:
        return int(self.cache.get_seq_length(layer))

    @property
    def length(self) -> int:
        return self.layer_length(0)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.cache.update(k, v, layer)


class MharPreTrainedModel(PreTrainedModel):
    config_class = MharConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True  # the Decoder recomputes each sublayer (its gradient_checkpointing)
    _no_split_modules = ["AttentionSublayer", "MLPSublayer"]
    _supports_cache_class = True
    _supports_static_cache = False

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)
        elif module is getattr(getattr(self, "model", None), "residual", None):
            _init_stream_parameters(module)


class MharForCausalLM(MharPreTrainedModel, GenerationMixin):
    """An mhar :class:`~mhar.model.decoder.Decoder` (``self.model``) as a causal LM."""

    def __init__(self, config: MharConfig):
        super().__init__(config)
        self.model = Decoder(config.to_model_config())
        self.post_init()

    # -- embeddings (for resize_token_embeddings and friends) -------------------
    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.embed = value
        # resize_token_embeddings updates self.config; the Decoder's own config (its FLOP
        # count's tied head, mhar's tools) must say the same vocabulary
        if isinstance(getattr(value, "weight", None), Tensor):
            self.model.config.vocab_size = value.weight.shape[0]

    def get_output_embeddings(self) -> nn.Module | None:
        return self.model.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.model.lm_head = value

    @property
    def decoder(self) -> Decoder:
        return self.model

    def get_decoder(self):
        """None: ``self.model`` is an mhar Decoder, not a transformers base model (it takes
        no position_ids / 4-D masks), so tools that look for one fall back to this
        class's own forward. Use ``self.model`` (or ``.decoder``) for the Decoder."""
        return None

    def save_pretrained(self, save_directory, *args: Any, **kwargs: Any):
        """``PreTrainedModel.save_pretrained`` (safetensors by default) plus the model code,
        so the folder also loads with ``trust_remote_code=True`` where mhar is not installed."""
        self.config.auto_map = dict(_AUTO_MAP)
        out = super().save_pretrained(save_directory, *args, **kwargs)
        _write_remote_code(save_directory)
        return out

    # -- forward ------------------------------------------------------------------
    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                past_key_values=None, cache=None, inputs_embeds: Tensor | None = None, labels: Tensor | None = None,
                use_cache: bool | None = None, return_dict: bool | None = None, logits_to_keep: int | Tensor = 0,
                **kwargs: Any):
        if input_ids is None:
            raise ValueError("MharForCausalLM needs input_ids (inputs_embeds is not supported)")
        asked = [k for k in ("output_hidden_states", "output_attentions") if kwargs.get(k)]
        if asked:  # refused rather than returned as None
            raise ValueError(f"MharForCausalLM does not return {' or '.join(asked)}: with depth routing no single "
                             "stream is passed between layers. mhar.analysis.capture records what every routing "
                             "site reads")
        # transformers >= 5.2x calls the cache ``cache``; earlier versions ``past_key_values``
        past_key_values = cache if cache is not None else past_key_values
        if use_cache is None:  # no new cache by default while training (nothing would read it)
            use_cache = getattr(self.config, "use_cache", True) and not self.training
        # A cache handed in is always read and extended (as transformers' models do): dropping
        # it would restart the positions at 0 without the past. use_cache only says whether to
        # start one when none is given.
        if use_cache and past_key_values is None:
            if DynamicCache is None:  # pragma: no cover
                raise RuntimeError("this transformers version has no DynamicCache; pass use_cache=False")
            past_key_values = DynamicCache()
        _check_cache(past_key_values)
        cache = _CacheAdapter(past_key_values) if past_key_values is not None else None
        past = cache.length if cache is not None else 0
        if kwargs.get("position_ids") is not None:
            positions, _ = token_positions(input_ids, past, attention_mask)
            _check_position_ids(kwargs["position_ids"], positions, attention_mask)
        hidden = self.model.hidden_states(input_ids, cache, attention_mask=attention_mask)
        if isinstance(logits_to_keep, int):
            kept = hidden[:, -logits_to_keep:] if logits_to_keep > 0 else hidden
        else:
            kept = hidden[:, logits_to_keep]
        logits = F.linear(kept, self.model.output_weight)
        loss = None
        if labels is not None:
            shift_logits = logits[:, :-1].float() if kept is hidden else F.linear(hidden, self.model.output_weight)[:, :-1].float()
            # transformers' Trainer passes num_items_in_batch (the batch's label count over its
            # accumulated micro-batches) and then does not divide by the accumulation steps itself
            num_items = kwargs.get("num_items_in_batch")
            loss = F.cross_entropy(shift_logits.reshape(-1, shift_logits.shape[-1]),
                                   labels[:, 1:].reshape(-1).to(shift_logits.device), ignore_index=-100,
                                   reduction="mean" if num_items is None else "sum")
            if num_items is not None:
                loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
        out = CausalLMOutputWithPast(loss=loss, logits=logits,
                                     **{_CACHE_FIELD: past_key_values})
        if return_dict is False:
            return out.to_tuple()
        return out


def _check_cache(cache) -> None:
    """Only a growing cache (``DynamicCache``): the attention reads every key the cache hands
    back. A static cache hands back its whole preallocated length (zeros beyond the tokens
    seen, read without a mask) and a sliding one drops keys, so both would give wrong logits."""
    if cache is None:
        return
    if getattr(cache, "is_compileable", False) or any(getattr(cache, "is_sliding", None) or ()):
        raise ValueError(f"MharForCausalLM supports only a DynamicCache (the default of generate), not "
                         f"{type(cache).__name__} with static or sliding-window layers "
                         "(cache_implementation='static', 'offloaded_static', 'sliding_window')")


def _check_position_ids(position_ids: Tensor | None, positions: Tensor, mask: Tensor | None) -> None:
    """The decoder numbers the positions itself (``token_positions``: past, past + 1, ..., or
    each row's own count of tokens under left padding): position_ids that say otherwise
    (packed sequences restarting at 0) are refused rather than silently ignored. Padding's
    positions, masked out, may say anything."""
    if position_ids is None:
        return
    T = positions.shape[-1]
    if position_ids.shape[-1] != T:
        raise ValueError(f"position_ids has {position_ids.shape[-1]} positions for {T} new tokens")
    bad = position_ids.to(positions.device) != positions
    if mask is not None and mask.dim() == 2:
        bad = bad & mask[:, -T:].bool().to(bad.device)
    if bool(bad.any()):
        raise ValueError("MharForCausalLM numbers positions itself (after the cached tokens, each row counting "
                         "its own tokens, as transformers does from attention_mask): other position_ids (packed "
                         "sequences restarting at 0) are not supported")


_AUTO_MAP = {"AutoConfig": "modeling_mhar.MharConfig", "AutoModelForCausalLM": "modeling_mhar.MharForCausalLM"}


def _write_remote_code(folder) -> None:
    import importlib
    import shutil
    from pathlib import Path

    try:  # mhar installed: bundle its current sources
        importlib.import_module("mhar.model.remote").write_remote_code(folder)
    except ImportError:  # running as remote code: copy this file and its flat siblings
        here = Path(__file__).resolve().parent
        for f in [here / "modeling_mhar.py", *here.glob("mhar_*.py")]:
            if f.exists() and f.parent != Path(folder).resolve():
                shutil.copy(f, Path(folder) / f.name)


def _register() -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        AutoConfig.register("mhar", MharConfig)
    except ValueError:  # already registered (module reloaded)
        pass
    try:
        AutoModelForCausalLM.register(MharConfig, MharForCausalLM)
    except ValueError:
        pass


if __name__ == "mhar.model.hf":  # (not in the copy saved as remote code)
    _register()

__all__ = ["MharConfig", "MharForCausalLM", "MharPreTrainedModel"]
