"""Token shards: a flat array of token ids behind a small fixed header.

Layout (little-endian), 64-byte header then the tokens:

    0  8s  magic  b"MHARTOK1"
    8  I   format version (1)
    12 I   bytes per token (2 = uint16, 4 = uint32)
    16 Q   number of tokens
    24 Q   number of documents
    32 Q   vocabulary size (every id is below it)
    40 16s first 16 bytes of the tokenizer's SHA-256
    56 8x  reserved (zero)

A shard is read with ``numpy.memmap``; its size must be exactly header + tokens.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

MAGIC = b"MHARTOK1"
VERSION = 1
HEADER = struct.Struct("<8sIIQQQ16s8x")
HEADER_BYTES = 64
assert HEADER.size == HEADER_BYTES
DTYPES = {2: np.uint16, 4: np.uint32}


class ShardWriter:
    """Append token arrays to one shard file; ``close()`` writes the final header."""

    def __init__(self, path: Path, itemsize: int, vocab_size: int, tokenizer_sha256: str):
        self.path = Path(path)
        self.itemsize = itemsize
        self.dtype = DTYPES[itemsize]
        self.vocab_size = vocab_size
        self.tok_hash = bytes.fromhex(tokenizer_sha256)[:16]
        self.num_tokens = 0
        self.num_docs = 0
        self.f = open(self.path, "wb")
        self.f.write(b"\0" * HEADER_BYTES)  # placeholder: a shard never looks valid until closed

    def write(self, ids: np.ndarray, num_docs: int) -> None:
        arr = np.ascontiguousarray(ids, dtype=self.dtype)
        self.f.write(arr.tobytes())
        self.num_tokens += int(arr.size)
        self.num_docs += num_docs

    def close(self) -> dict:
        self.f.seek(0)
        self.f.write(HEADER.pack(MAGIC, VERSION, self.itemsize, self.num_tokens, self.num_docs,
                                 self.vocab_size, self.tok_hash))
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        return {"file": self.path.name, "tokens": self.num_tokens, "documents": self.num_docs}


def read_header(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: shard file missing")
    size = path.stat().st_size
    if size < HEADER_BYTES:
        raise ValueError(f"{path}: truncated shard ({size} bytes, smaller than the {HEADER_BYTES}-byte header)")
    with open(path, "rb") as f:
        magic, version, itemsize, ntok, ndocs, vocab, tok_hash = HEADER.unpack(f.read(HEADER_BYTES))
    if magic != MAGIC:
        raise ValueError(f"{path}: not an mhar token shard (bad magic {magic!r}; an interrupted write?)")
    if version != VERSION:
        raise ValueError(f"{path}: shard format version {version}, this mhar reads {VERSION}")
    if itemsize not in DTYPES:
        raise ValueError(f"{path}: bad token width {itemsize} bytes")
    expected = HEADER_BYTES + ntok * itemsize
    if size != expected:
        raise ValueError(f"{path}: truncated or corrupt shard ({size} bytes on disk, header says {expected})")
    return {"itemsize": itemsize, "num_tokens": ntok, "num_docs": ndocs, "vocab_size": vocab,
            "tokenizer_sha256_prefix": tok_hash.hex()}


def open_shard(path: Path) -> tuple[dict, np.ndarray]:
    hdr = read_header(path)
    if hdr["num_tokens"] == 0:
        return hdr, np.zeros(0, dtype=DTYPES[hdr["itemsize"]])
    arr = np.memmap(path, dtype=DTYPES[hdr["itemsize"]], mode="r", offset=HEADER_BYTES, shape=(hdr["num_tokens"],))
    return hdr, arr
