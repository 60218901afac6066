"""Open a built dataset directory and check that it is whole and self-consistent."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from .build import FORMAT, FORMAT_VERSION, MANIFEST, SPLITS, encodes_special_tokens
from .shards import open_shard
from .tokenizer import load_saved_tokenizer, load_tokenizer_file, tokenizer_hash

_SCAN_CHUNK = 1 << 24


class TokenDataset:
    """A built dataset: tokenizer plus memory-mapped train / validation token shards.

    ``tokenizer``: optionally the tokenizer the caller expects (a ``tokenizers.Tokenizer``,
    a path to a tokenizer.json / folder, or a SHA-256 hex string); reading shards made
    with a different one is an error. ``verify=True`` also scans every token once to
    check it is below the vocabulary size (fast: about a second per 10^9 tokens).
    Every problem raises ``ValueError`` naming the file.
    """

    def __init__(self, path: str | os.PathLike, tokenizer: Any = None, verify: bool = True):
        self.path = Path(path)
        if not self.path.is_dir():
            raise ValueError(f"{self.path}: no such dataset directory (build one with `mhar data build`)")
        mpath = self.path / MANIFEST
        if not mpath.is_file():
            raise ValueError(f"{mpath}: missing; not a dataset, or its build was interrupted")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"{mpath}: not valid JSON ({err})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ValueError(f"{mpath}: not an mhar token-dataset manifest")
        if manifest.get("version") != FORMAT_VERSION:
            raise ValueError(f"{mpath}: dataset format version {manifest.get('version')}, this mhar reads {FORMAT_VERSION}")
        if manifest.get("complete") is not True:
            raise ValueError(f"{mpath}: dataset is marked incomplete (an interrupted build)")
        self.manifest = manifest
        tinfo = manifest["tokenizer"]
        tpath = self.path / tinfo.get("file", "tokenizer.json")
        self.tokenizer, file_sha = load_saved_tokenizer(tpath)
        if file_sha != tinfo["sha256"]:
            raise ValueError(
                f"{tpath}: tokenizer does not match the manifest (SHA-256 {file_sha[:12]}..., "
                f"manifest says {tinfo['sha256'][:12]}...); the shards were made with another tokenizer"
            )
        self.tokenizer_sha256: str = tinfo["sha256"]
        self.tokenizer_vocab_size: int = int(tinfo["vocab_size"])
        if self.tokenizer.get_vocab_size(with_added_tokens=True) != self.tokenizer_vocab_size:
            raise ValueError(f"{tpath}: tokenizer has {self.tokenizer.get_vocab_size()} tokens, manifest {mpath} says {self.tokenizer_vocab_size}")
        #: rows a model's embedding should have (the tokenizer vocabulary, padded for Qwen to 151,936)
        self.vocab_size: int = int(tinfo.get("model_vocab_size", self.tokenizer_vocab_size))
        self.eot_id: int = int(tinfo["eot_id"])
        #: True when the documents' special-token text ("<|endoftext|>" ...) was encoded as
        #: ordinary text (every build since mhar records it); `encode` does the same, so
        #: text is encoded as the model saw it in training.
        self.encode_special_tokens: bool = encodes_special_tokens(manifest)
        self.tokenizer.encode_special_tokens = self.encode_special_tokens
        if tokenizer is not None:
            self._check_expected_tokenizer(tokenizer)

        self._arrays: dict[str, list[np.memmap]] = {}
        self._files: dict[str, list[Path]] = {}
        for split in SPLITS:
            arrays, files = [], []
            for rec in manifest["splits"][split]["shards"]:
                spath = self.path / rec["file"]
                hdr, arr = open_shard(spath)
                if hdr["tokenizer_sha256_prefix"] != self.tokenizer_sha256[:32]:
                    raise ValueError(f"{spath}: shard was written with a different tokenizer than {tpath}")
                if hdr["vocab_size"] != self.tokenizer_vocab_size:
                    raise ValueError(f"{spath}: shard vocabulary {hdr['vocab_size']} != tokenizer's {self.tokenizer_vocab_size}")
                if hdr["num_tokens"] != rec["tokens"]:
                    raise ValueError(f"{spath}: shard holds {hdr['num_tokens']} tokens, manifest says {rec['tokens']}")
                if verify:
                    _check_ids(arr, self.tokenizer_vocab_size, spath)
                arrays.append(arr)
                files.append(spath)
            self._arrays[split] = arrays
            self._files[split] = files
        self.verified = verify
        h = hashlib.sha256(self.tokenizer_sha256.encode())
        h.update(json.dumps({s: [(r["file"], r["tokens"]) for r in manifest["splits"][s]["shards"]] for s in SPLITS}, sort_keys=True).encode())
        #: identity of this dataset's token streams (tokenizer + shards), stored in loader state
        self.fingerprint: str = h.hexdigest()[:16]

    def _check_expected_tokenizer(self, expected: Any) -> None:
        if isinstance(expected, Tokenizer):
            sha = tokenizer_hash(expected)
        elif isinstance(expected, str) and len(expected) == 64 and all(c in "0123456789abcdef" for c in expected):
            sha = expected
        else:
            sha = tokenizer_hash(load_tokenizer_file(expected))
        if sha != self.tokenizer_sha256:
            raise ValueError(
                f"{self.path / MANIFEST}: dataset was tokenised with {self.manifest['tokenizer']['name']} "
                f"(SHA-256 {self.tokenizer_sha256[:12]}...), not the requested tokenizer ({sha[:12]}...)"
            )

    # ------------------------------------------------------------------ text
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    # ------------------------------------------------------------------ tokens
    def _split(self, split: str) -> str:
        if split not in SPLITS:
            raise ValueError(f"split={split!r}: expected one of {', '.join(SPLITS)}")
        return split

    def num_tokens(self, split: str = "train") -> int:
        return int(sum(a.size for a in self._arrays[self._split(split)]))

    def num_documents(self, split: str = "train") -> int:
        return int(self.manifest["splits"][self._split(split)]["documents"])

    def shards(self, split: str = "train") -> list[np.ndarray]:
        """The split's shards as read-only memory-mapped arrays (empty ones included)."""
        return list(self._arrays[self._split(split)])

    def shard_files(self, split: str = "train") -> list[Path]:
        return list(self._files[self._split(split)])

    def tokens(self, split: str = "train") -> np.ndarray:
        """All tokens of a split as one array (a copy when there are several shards)."""
        arrs = self._arrays[self._split(split)]
        if len(arrs) == 1:
            return arrs[0]
        if not arrs:
            return np.zeros(0, dtype=np.uint16)
        return np.concatenate(arrs)

    def __repr__(self) -> str:
        return (f"TokenDataset({str(self.path)!r}, tokenizer={self.manifest['tokenizer']['name']!r}, "
                f"vocab_size={self.vocab_size}, train={self.num_tokens('train')}, "
                f"validation={self.num_tokens('validation')})")


def _check_ids(arr: np.ndarray, vocab: int, path: Path) -> None:
    if vocab >= (1 << (8 * arr.dtype.itemsize)):
        return  # every representable id is valid
    for i in range(0, arr.size, _SCAN_CHUNK):
        chunk = arr[i:i + _SCAN_CHUNK]
        m = int(chunk.max())
        if m >= vocab:
            pos = i + int(np.argmax(chunk >= vocab))
            raise ValueError(f"{path}: token id {int(arr[pos])} at position {pos} is >= the vocabulary size {vocab}")
