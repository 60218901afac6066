"""The trainer's view of the data: a train loader with a resumable position, fixed
validation windows and the vocabulary size.

``builtin`` and dataset folders go through :mod:`mhar.data` (``TokenDataset``,
``TokenLoader``, ``validation_windows``). ``synthetic`` is a small deterministic
generated stream (words drawn from a Zipf law over a random lexicon) with the same
loader interface, for tests and benchmarks that must not depend on a corpus.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from mhar.train.config import DataConfig


class Loader(Protocol):
    def next_batch(self) -> tuple[Tensor, Tensor]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class TrainData:
    loader: Loader
    val: Tensor  # (n, seq_len + 1) fixed validation windows
    vocab_size: int
    name: str
    train_tokens: int = 0


# ----------------------------------------------------------------- synthetic

def synthetic_tokens(vocab_size: int, num_tokens: int, seed: int, lexicon_seed: int = 0) -> np.ndarray:
    """A token stream of random 'words' (1-6 tokens each) drawn from a Zipf law over
    a fixed random lexicon (``lexicon_seed``); ``seed`` picks the word order. Learnable
    structure (within-word continuations, word frequencies), fully deterministic."""
    lex_rng = np.random.default_rng(lexicon_seed)
    n_words = max(16, min(2048, vocab_size * 2))
    lengths = lex_rng.integers(1, 7, size=n_words)
    words = [lex_rng.integers(0, vocab_size, size=int(n)) for n in lengths]
    probs = 1.0 / np.arange(1, n_words + 1) ** 1.1
    probs /= probs.sum()
    rng = np.random.default_rng(seed)
    ids = rng.choice(n_words, size=num_tokens // 2 + 16, p=probs)
    out = np.concatenate([words[i] for i in ids])
    while out.size < num_tokens:  # pragma: no cover - lengths average 3.5, so never in practice
        out = np.concatenate([out, out])
    return out[:num_tokens].astype(np.int64)


class SyntheticLoader:
    """Random windows of a synthetic stream; the position is a NumPy bit-generator state.

    Ranks partition the global batch (as :class:`mhar.data.TokenLoader` does): every
    rank draws the step's ``world_size * batch_size`` window starts from the same
    global stream and keeps its ``rank``-th slice, so N ranks with ``batch_size=B``
    see exactly the windows of one process with ``batch_size=N*B`` (one process:
    unchanged). The state is the same on every rank, so a run resumes at another
    world size.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int, rank: int = 0,
                 world_size: int = 1):
        if tokens.size <= seq_len + 1:
            raise ValueError(f"synthetic stream of {tokens.size} tokens is too short for seq_len={seq_len}")
        self.tokens = torch.from_numpy(tokens)
        self.seq_len, self.batch_size = seq_len, batch_size
        self.rank, self.world_size = rank, world_size
        self.rng = np.random.default_rng([seed, 0, 1])  # one global stream (distributed: see the docstring)

    def next_batch(self) -> tuple[Tensor, Tensor]:
        starts = self.rng.integers(0, self.tokens.numel() - self.seq_len - 1, size=self.batch_size * self.world_size)
        starts = starts[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
        idx = torch.from_numpy(starts)[:, None] + torch.arange(self.seq_len + 1)
        w = self.tokens[idx]
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def state_dict(self) -> dict[str, Any]:
        return {"bit_generator": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or "bit_generator" not in state:  # a TokenLoader's (dataset) state
            raise ValueError("loader state: not the synthetic stream's; the checkpoint was trained on another "
                             "data.source (resume with that run's data.source)")
        self.rng.bit_generator.state = state["bit_generator"]


def _synthetic(cfg: DataConfig, seq_len: int, batch_size: int, seed: int, rank: int, world_size: int) -> TrainData:
    train = synthetic_tokens(cfg.vocab_size, 1 << 18, seed=1)
    val_stream = synthetic_tokens(cfg.vocab_size, max(4096, cfg.val_windows * (seq_len + 1) * 2), seed=2)
    rng = np.random.default_rng(cfg.val_seed)
    starts = rng.integers(0, val_stream.size - seq_len - 1, size=cfg.val_windows)
    val = torch.from_numpy(np.stack([val_stream[s:s + seq_len + 1] for s in starts]))
    loader = SyntheticLoader(train, seq_len, batch_size, seed, rank, world_size)
    return TrainData(loader, val, cfg.vocab_size, "synthetic", train.size)


def build_data(cfg: DataConfig, seq_len: int, batch_size: int, seed: int, rank: int = 0,
               world_size: int = 1) -> TrainData:
    """Resolve ``cfg.source`` into a :class:`TrainData`."""
    if cfg.source == "synthetic":
        return _synthetic(cfg, seq_len, batch_size, seed, rank, world_size)
    try:
        from mhar.data import TokenDataset, TokenLoader, ensure_builtin_dataset, validation_windows
    except ImportError as err:  # the data pipeline is not installed/built
        raise ValueError(f"data.source={cfg.source!r} needs mhar.data ({err}); "
                         "use data.source=synthetic to train without a corpus") from err
    if cfg.source == "builtin":
        path = ensure_builtin_dataset(tokenizer=cfg.tokenizer, vocab_size=cfg.vocab_size,
                                      max_mb=cfg.max_mb or None)
        name = f"builtin ({cfg.tokenizer}, vocab {cfg.vocab_size})"
    else:
        path, name = cfg.source, str(cfg.source)
    ds = TokenDataset(path)
    if not ds.encode_special_tokens and rank == 0:  # allowed (old datasets load), but worth knowing
        print(f"note: {path} was built before `mhar data build` encoded special-token text in documents as "
              f"text: \"{ds.manifest['tokenizer']['eot_token']}\" written in a document may be an end-of-text "
              f"or control id there; rebuild it (--overwrite) for the current encoding", file=sys.stderr)
    loader = TokenLoader(ds, seq_len=seq_len, batch_size=batch_size, seed=seed, rank=rank, world_size=world_size,
                         split="train")
    val = validation_windows(ds, seq_len=seq_len, num_windows=cfg.val_windows, seed=cfg.val_seed)
    try:
        n = int(ds.num_tokens("train"))
    except Exception:  # pragma: no cover - informational only
        n = 0
    return TrainData(loader, val, int(ds.vocab_size), name, n)
