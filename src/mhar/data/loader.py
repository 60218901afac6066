"""Deterministic, resumable, rank-disjoint windows of tokens.

The split's shards are cut into non-overlapping windows of ``seq_len + 1`` tokens on a
fixed grid (start = k * seq_len inside each shard, so consecutive windows share one
token and every token is a target once per epoch). Epoch ``e`` visits the windows in
the order of a permutation drawn from ``PCG64([seed, e])``. Step ``s`` of the global
stream takes the next ``world_size * batch_size`` windows and rank ``r`` keeps the
``r``-th slice of ``batch_size``: ranks never share a window within an epoch. The
state is the number of windows the whole job has consumed, so a resumed run (even
with another world size) continues the same stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .dataset import TokenDataset

STATE_VERSION = 1


class _Windows:
    """The window grid of one split."""

    def __init__(self, ds: TokenDataset, split: str, seq_len: int):
        self.ds, self.split, self.seq_len = ds, split, seq_len
        keep = [(a, f) for a, f in zip(ds.shards(split), ds.shard_files(split)) if a.size > seq_len]
        self.shards = [a for a, _ in keep]
        self.files = [f for _, f in keep]
        counts = np.array([(a.size - 1) // seq_len for a in self.shards], dtype=np.int64)
        self.cum = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.n = int(self.cum[-1])
        if self.n == 0:
            raise ValueError(
                f"{ds.path}: too little data in the {split} split for one window: {ds.num_tokens(split)} tokens "
                f"(in {len(ds.shards(split))} shard(s)), a window of seq_len={seq_len} needs {seq_len + 1}"
            )

    def gather(self, idx: np.ndarray, check_vocab: int | None = None) -> np.ndarray:
        T1 = self.seq_len + 1
        out = np.empty((len(idx), T1), dtype=np.int64)
        k = np.searchsorted(self.cum, idx, side="right") - 1
        starts = (idx - self.cum[k]) * self.seq_len
        for row, (kk, st) in enumerate(zip(k.tolist(), starts.tolist())):
            out[row] = self.shards[kk][st:st + T1]
        if check_vocab is not None and out.size and int(out.max()) >= check_vocab:
            bad = int(np.argwhere(out >= check_vocab)[0][0])
            raise ValueError(f"{self.files[int(k[bad])]}: token id {int(out[bad].max())} is >= the vocabulary size {check_vocab}")
        return out


class TokenLoader:
    """Batches ``(x, y)`` of LongTensors ``(batch_size, seq_len)``; ``y`` is ``x`` shifted by one."""

    def __init__(self, ds: TokenDataset, seq_len: int, batch_size: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1, split: str = "train"):
        for name, v, lo in (("seq_len", seq_len, 1), ("batch_size", batch_size, 1), ("world_size", world_size, 1), ("rank", rank, 0)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name}={v!r}: must be an integer >= {lo}")
        if rank >= world_size:
            raise ValueError(f"rank={rank}: must be < world_size={world_size}")
        self.ds = ds
        self.seq_len, self.batch_size = int(seq_len), int(batch_size)
        self.seed, self.rank, self.world_size, self.split = int(seed), int(rank), int(world_size), split
        self.windows = _Windows(ds, split, self.seq_len)
        self.consumed = 0  # windows taken by the whole job (all ranks)
        self._perms: dict[int, np.ndarray] = {}
        self._check_vocab = None if ds.verified else ds.tokenizer_vocab_size

    @property
    def num_windows(self) -> int:
        """Windows per epoch."""
        return self.windows.n

    @property
    def epoch(self) -> int:
        return self.consumed // self.windows.n

    @property
    def tokens_per_step(self) -> int:
        """Tokens (inputs) one step consumes across all ranks."""
        return self.world_size * self.batch_size * self.seq_len

    def _perm(self, epoch: int) -> np.ndarray:
        p = self._perms.get(epoch)
        if p is None:
            if len(self._perms) >= 2:
                self._perms.pop(min(self._perms))
            p = np.random.Generator(np.random.PCG64([self.seed, epoch])).permutation(self.windows.n)
            self._perms[epoch] = p
        return p

    def _indices(self, global_positions: np.ndarray) -> np.ndarray:
        n = self.windows.n
        epochs, within = np.divmod(global_positions, n)
        out = np.empty_like(global_positions)
        for e in np.unique(epochs).tolist():
            m = epochs == e
            out[m] = self._perm(int(e))[within[m]]
        return out

    def next_windows(self) -> np.ndarray:
        """The next ``(batch_size, seq_len + 1)`` int64 windows of this rank."""
        base = self.consumed + self.rank * self.batch_size
        pos = np.arange(base, base + self.batch_size, dtype=np.int64)
        w = self.windows.gather(self._indices(pos), self._check_vocab)
        self.consumed += self.world_size * self.batch_size
        return w

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.from_numpy(self.next_windows())
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def __iter__(self):
        while True:
            yield self.next_batch()

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION, "dataset": self.ds.fingerprint, "split": self.split,
            "seed": self.seed, "seq_len": self.seq_len, "batch_size": self.batch_size,
            "world_size": self.world_size, "rank": self.rank, "consumed_windows": int(self.consumed),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the stream. The dataset, split, seed and seq_len must match; batch
        size and world size may change (the global window count carries over)."""
        if isinstance(state, dict) and "bit_generator" in state:  # the synthetic stream's state
            raise ValueError("loader state: the checkpoint was trained on data.source=synthetic, not on a dataset "
                             "(resume with that run's data.source)")
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"loader state: unsupported or missing version ({state.get('version') if isinstance(state, dict) else state!r})")
        for key, mine in (("dataset", self.ds.fingerprint), ("split", self.split), ("seed", self.seed), ("seq_len", self.seq_len)):
            if state.get(key) != mine:
                raise ValueError(f"loader state: {key}={state.get(key)!r} does not match this loader's {mine!r} ({self.ds.path})")
        consumed = state.get("consumed_windows")
        if not isinstance(consumed, int) or consumed < 0:
            raise ValueError(f"loader state: consumed_windows={consumed!r} must be a non-negative integer")
        self.consumed = consumed


def validation_windows(ds: TokenDataset, seq_len: int, num_windows: int | None = 64, seed: int = 1234,
                       split: str = "validation") -> torch.Tensor:
    """A fixed set of ``(num_windows, seq_len + 1)`` windows (LongTensor) from the
    validation split; identical for every method given the same dataset, length and
    seed, so evaluations are paired. ``num_windows=None`` takes every window."""
    if seq_len < 1:
        raise ValueError(f"seq_len={seq_len}: must be >= 1")
    w = _Windows(ds, split, int(seq_len))
    if num_windows is None:
        idx = np.arange(w.n, dtype=np.int64)
    else:
        if num_windows < 1:
            raise ValueError(f"num_windows={num_windows}: must be >= 1")
        if num_windows > w.n:
            raise ValueError(
                f"{ds.path}: the {split} split has only {w.n} windows of {seq_len + 1} tokens "
                f"({ds.num_tokens(split)} tokens), {num_windows} requested"
            )
        rng = np.random.Generator(np.random.PCG64(int(seed)))
        idx = np.sort(rng.choice(w.n, size=int(num_windows), replace=False)).astype(np.int64)
    return torch.from_numpy(w.gather(idx, None if ds.verified else ds.tokenizer_vocab_size))
