"""Where documents come from: the built-in corpus, local files and folders, and
Hugging Face ``datasets``.

Every source yields :class:`Doc` records; the builder deduplicates them exactly by
content hash. Files that are binary or not valid UTF-8 are never a crash: they are
skipped and counted (see :class:`SourceStats`), and the counts go to the manifest.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import json
import os
import re
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

# Text file types taken into the built-in corpus (code and its documentation).
BUILTIN_EXTENSIONS = (
    ".py", ".pyi", ".pyx", ".pxd", ".rst", ".md", ".txt",
    ".c", ".h", ".cc", ".cpp", ".hpp", ".cu", ".cuh",
)
# Files larger than this are almost always generated tables, not prose or code.
BUILTIN_MAX_FILE_BYTES = 512_000
# The distributions our package depends on (mirrors pyproject.toml); the built-in
# corpus takes these and everything they in turn require, as installed.
BUILTIN_ROOT_DISTRIBUTIONS = (
    "torch", "numpy", "tokenizers", "safetensors", "tqdm", "matplotlib", "tensorboard",
)
LOCAL_TEXT_EXTENSIONS = (".txt", ".md", ".rst", ".text", ".markdown")
LOCAL_JSONL_EXTENSIONS = (".jsonl", ".ndjson")
LOCAL_PARQUET_EXTENSIONS = (".parquet",)
MAX_SKIPPED_LISTED = 20


@dataclass
class Doc:
    text: str
    source: str   # name of the source it came from


@dataclass
class SourceStats:
    """What one source contributed; goes into the manifest."""

    name: str
    kind: str
    location: str = ""
    licence: str = ""
    version: str = ""
    files: int = 0
    documents: int = 0
    bytes: int = 0
    skipped_binary: int = 0
    skipped_non_utf8: int = 0
    skipped_empty: int = 0
    skipped_examples: list = field(default_factory=list)
    duplicates: int = 0

    def skip(self, path: str, reason: str) -> None:
        if reason == "binary":
            self.skipped_binary += 1
        elif reason == "non-utf8":
            self.skipped_non_utf8 += 1
        else:
            self.skipped_empty += 1
        if len(self.skipped_examples) < MAX_SKIPPED_LISTED:
            self.skipped_examples.append({"file": path, "reason": reason})

    def to_json(self) -> dict:
        return dict(self.__dict__)


def read_text_file(path: str | os.PathLike, stats: SourceStats) -> str | None:
    """The file's text, or None (counted in ``stats``) if it is binary, not UTF-8 or empty."""
    data = Path(path).read_bytes()
    if b"\x00" in data[:8192]:
        stats.skip(str(path), "binary")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        stats.skip(str(path), "non-utf8")
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        stats.skip(str(path), "empty")
        return None
    return text


def content_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


# --------------------------------------------------------------------------- built-in

def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_licence(dist: metadata.Distribution) -> str:
    md = dist.metadata
    lic = md.get("License-Expression")
    if not lic:
        lic = (md.get("License") or "").strip()
        if "\n" in lic or len(lic) > 80:  # a whole licence text pasted in: use classifiers
            lic = ""
    if not lic:
        classifiers = [c.split("::")[-1].strip() for c in (md.get_all("Classifier") or []) if c.startswith("License ::")]
        lic = " / ".join(classifiers)
    return lic or "see the distribution's licence files"


def builtin_distributions(roots: Iterable[str] = BUILTIN_ROOT_DISTRIBUTIONS) -> tuple[list[metadata.Distribution], list[str]]:
    """Installed distributions: ``roots`` and their requirements (transitively). Returns
    (found, missing) with ``found`` sorted by name so the corpus order is stable."""
    seen: set[str] = set()
    found: dict[str, metadata.Distribution] = {}
    missing: list[str] = []
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = _canon(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        found[key] = dist
        for req in dist.requires or []:
            if "extra ==" in req or "extra==" in req:
                continue
            todo.append(re.split(r"[\s;<>=!~\[(]", req.strip(), maxsplit=1)[0])
    return [found[k] for k in sorted(found)], sorted(missing)


@dataclass
class BuiltinFile:
    source: str
    path: str
    size: int


def builtin_plan() -> tuple[list[BuiltinFile], dict[str, SourceStats], list[str]]:
    """List the built-in corpus: the Python standard library that runs this
    interpreter (sources, stubs and any docs shipped with it) and the installed
    distributions of our dependencies. Returns (files, stats per source, missing)."""
    files: list[BuiltinFile] = []
    stats: dict[str, SourceStats] = {}

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    name = "python-stdlib"
    stats[name] = SourceStats(
        name=name, kind="builtin", location=str(stdlib), licence="PSF-2.0",
        version=".".join(map(str, sys.version_info[:3])),
    )
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        for fn in sorted(filenames):
            if fn.endswith(BUILTIN_EXTENSIONS):
                p = os.path.join(dirpath, fn)
                try:
                    size = os.path.getsize(p)
                except OSError:
                    continue
                if 0 < size <= BUILTIN_MAX_FILE_BYTES:
                    files.append(BuiltinFile(name, p, size))

    dists, missing = builtin_distributions()
    for dist in dists:
        name = dist.metadata["Name"]
        stats[name] = SourceStats(
            name=name, kind="builtin", location=str(dist.locate_file("")),
            licence=_dist_licence(dist), version=dist.version,
        )
        for f in sorted(dist.files or [], key=str):
            if not str(f).endswith(BUILTIN_EXTENSIONS) or "__pycache__" in str(f):
                continue
            p = str(f.locate())
            try:
                size = os.path.getsize(p)
            except OSError:
                continue
            if 0 < size <= BUILTIN_MAX_FILE_BYTES:
                files.append(BuiltinFile(name, p, size))
    return files, stats, missing


def builtin_docs(max_bytes: int | None, stats: dict[str, SourceStats], info: dict | None = None) -> Iterator[Doc]:
    """Documents of the built-in corpus. With ``max_bytes`` a deterministic, spread-out
    subset (files ordered by a hash of their path) is taken until the budget is met.
    ``info`` (if given) receives what was looked for and what was found."""
    files, plan_stats, missing = builtin_plan()
    stats.update(plan_stats)
    if info is not None:
        info.update({
            "description": "the Python standard library of this interpreter and the installed "
                           "distributions of mhar's dependencies (and theirs): source code, stubs and docs",
            "root_distributions": list(BUILTIN_ROOT_DISTRIBUTIONS),
            "distributions_found": sorted(k for k in plan_stats if k != "python-stdlib"),
            "distributions_missing": missing,
            "extensions": list(BUILTIN_EXTENSIONS),
            "max_file_bytes": BUILTIN_MAX_FILE_BYTES,
            "candidate_files": len(files),
            "candidate_bytes": sum(f.size for f in files),
            "selection": "all files" if max_bytes is None else f"files in blake2b(path) order until {max_bytes} bytes",
        })
    if max_bytes is not None:
        files = sorted(files, key=lambda f: hashlib.blake2b(f"{f.source}/{os.path.basename(f.path)}/{f.size}".encode(), digest_size=8).digest())
    total = 0
    for f in files:
        if max_bytes is not None and total >= max_bytes:
            break
        st = stats[f.source]
        try:
            text = read_text_file(f.path, st)
        except OSError:
            continue
        if text is None:
            continue
        st.files += 1
        total += f.size
        yield Doc(text, f.source)


# --------------------------------------------------------------------------- local

def _iter_local_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out.extend(Path(dirpath) / fn for fn in sorted(filenames) if not fn.startswith("."))
    return out


def local_docs(path: str | os.PathLike, stats: SourceStats, text_field: str = "text") -> Iterator[Doc]:
    """Documents from a file or folder: .txt/.md/.rst (one document per file), .jsonl
    (one per line, the ``text_field``), .parquet (one per row, the ``text_field``).
    Other files are read as text when they are UTF-8, else skipped and counted."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    files = _iter_local_files(root)
    if not files:
        raise ValueError(f"{root}: folder is empty (no files to read)")
    name = stats.name
    for p in files:
        suffix = p.suffix.lower()
        stats.files += 1
        if suffix in LOCAL_JSONL_EXTENSIONS:
            yield from _jsonl_docs(p, stats, text_field, name)
        elif suffix in LOCAL_PARQUET_EXTENSIONS:
            yield from _parquet_docs(p, stats, text_field, name)
        else:
            text = read_text_file(p, stats)
            if text is not None:
                yield Doc(text, name)


def _jsonl_docs(p: Path, stats: SourceStats, text_field: str, name: str) -> Iterator[Doc]:
    data = p.read_bytes()
    if b"\x00" in data[:8192]:
        stats.skip(str(p), "binary")
        return
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        stats.skip(str(p), "non-utf8")
        return
    if content.startswith("\ufeff"):  # a byte-order mark, as for text files
        content = content[1:]
    # JSON Lines separates records by "\n" only: str.splitlines would also cut at U+2028,
    # U+2029, NEL or a form feed, which json.dumps(ensure_ascii=False) leaves inside strings.
    for lineno, line in enumerate(content.split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{p}:{lineno}: not valid JSON ({err.msg})") from None
        if not isinstance(rec, dict) or text_field not in rec:
            raise ValueError(f"{p}:{lineno}: no {text_field!r} field (set the text field with --text-field)")
        text = rec[text_field]
        if not isinstance(text, str):
            raise ValueError(f"{p}:{lineno}: field {text_field!r} is {type(text).__name__}, not a string")
        if text.strip():
            yield Doc(text, name)
        else:
            stats.skipped_empty += 1


def _parquet_docs(p: Path, stats: SourceStats, text_field: str, name: str) -> Iterator[Doc]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"{p}: reading parquet needs pyarrow (pip install 'mhar-pytorch[data]')") from None
    try:
        pf = pq.ParquetFile(p)
    except Exception:  # pyarrow raises its own error types for bad files
        stats.skip(str(p), "binary")
        return
    if text_field not in pf.schema_arrow.names:
        raise ValueError(f"{p}: no {text_field!r} column (columns: {', '.join(pf.schema_arrow.names)})")
    for batch in pf.iter_batches(columns=[text_field], batch_size=4096):
        for text in batch.column(0).to_pylist():
            if isinstance(text, str) and text.strip():
                yield Doc(text, name)
            else:
                stats.skipped_empty += 1


# --------------------------------------------------------------------------- Hugging Face

def parse_hf_spec(spec: str) -> tuple[str, str | None, str]:
    """``hf:NAME[:CONFIG][@SPLIT]`` -> (name, config, split)."""
    body = spec[3:] if spec.startswith("hf:") else spec
    split = "train"
    if "@" in body:
        body, split = body.rsplit("@", 1)
    name, _, config = body.partition(":")
    if not name:
        raise ValueError(f"{spec}: expected hf:NAME[:CONFIG][@SPLIT]")
    return name, (config or None), split


def hf_docs(dataset: Any, stats: SourceStats, text_field: str = "text") -> Iterator[Doc]:
    """Documents from a Hugging Face dataset: a spec string ``hf:NAME[:CONFIG][@SPLIT]``
    (loaded with ``streaming=True``), or an already loaded ``Dataset``/``IterableDataset``
    (or any iterable of dicts)."""
    if isinstance(dataset, str):
        try:
            import datasets
        except ImportError:
            raise ValueError(f"{dataset}: Hugging Face sources need the `datasets` package (pip install datasets)") from None
        name, config, split = parse_hf_spec(dataset)
        try:
            dataset = datasets.load_dataset(name, config, split=split, streaming=True)
        except Exception as err:
            raise ValueError(f"{stats.location or name}: could not open the Hugging Face dataset ({type(err).__name__}: {err})") from None
    for i, rec in enumerate(dataset):
        if not isinstance(rec, dict) or text_field not in rec:
            raise ValueError(f"{stats.location}: record {i} has no {text_field!r} field")
        text = rec[text_field]
        if isinstance(text, str) and text.strip():
            yield Doc(text, stats.name)
        else:
            stats.skipped_empty += 1
