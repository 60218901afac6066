"""Data pipeline benchmark: tokenisation speed of the trained BPE, the full built-in
build, and loader throughput. A script, not a test; paste its Markdown output into
bench/results/data_bench.md.

    PYTHONPATH=src .venv/bin/python bench/data_bench.py [--text-mb 24] [--build-mb 64|full] [--out DIR]

Tokenisation is reported three ways: wall-clock MB/s with every core, MB per
CPU-second (the per-core rate, robust to a busy machine) and wall MB/s with one
thread (a subprocess with RAYON_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return f"{cpu}, {os.cpu_count()} cores, load average at start {load}"


def sample_texts(mb: float) -> list[str]:
    from mhar.data.sources import builtin_docs
    stats: dict = {}
    return [d.text for d in builtin_docs(int(mb * 1e6), stats)]


def encode_rate(tok_path: str, texts: list[str]) -> dict:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    encode(texts[:50], add_special_tokens=False)  # warm the thread pool
    c0, t0 = time.process_time(), time.perf_counter()
    encs = encode(texts, add_special_tokens=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ntok = sum(len(e.ids) for e in encs)
    return {"mb": nbytes / 1e6, "tokens": ntok, "wall_s": wall, "cpu_s": cpu,
            "mb_per_s": nbytes / 1e6 / wall, "mb_per_cpu_s": nbytes / 1e6 / cpu}


def _single_thread_child(args) -> None:
    texts = sample_texts(args.text_mb)
    print(json.dumps(encode_rate(args.tokenizer_path, texts)))


def loader_rates(path: Path) -> list[dict]:
    from mhar.data import TokenDataset, TokenLoader
    ds = TokenDataset(path)
    rows = []
    for T, B in ((128, 8), (128, 64), (1024, 16), (2048, 8)):
        ld = TokenLoader(ds, seq_len=T, batch_size=B, seed=0)
        ld.next_batch()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 2.0:
            x, _ = ld.next_batch()
            n += x.numel()
        rows.append({"seq_len": T, "batch": B, "mtok_per_s": n / (time.perf_counter() - t0) / 1e6})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--text-mb", type=float, default=24.0, help="MB of built-in text for the tokenisation test")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--build-mb", default="64", help="size of the built-in build to time (MB, or 'full'); default 64 = the built-in default")
    ap.add_argument("--full-build", action="store_true", help="same as --build-mb full")
    ap.add_argument("--out", default=None, help="where to build (default: a temp dir, removed after)")
    ap.add_argument("--tokenizer-path", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _single_thread_child(args)

    from mhar.data import TokenDataset, build_dataset
    from mhar.provenance import source_commit
    print(f"# data_bench\n\ncommand: `{' '.join(['python'] + sys.argv)}`  \nmachine: {machine()}  \ncommit: {source_commit()}  \n"
          f"python {platform.python_version()}, tokenizers {__import__('tokenizers').__version__}, numpy {__import__('numpy').__version__}, torch {__import__('torch').__version__}\n")
    tmp = Path(tempfile.mkdtemp(prefix="mhar-data-bench-"))
    out = Path(args.out) if args.out else tmp / "builtin"

    # 1. A dataset (full built-in corpus, or a sample of it) with the trained BPE.
    from mhar.data.build import builtin_size_mb
    build_mb = builtin_size_mb("full" if args.full_build else args.build_mb)
    t0, c0 = time.perf_counter(), time.process_time()
    build_dataset(["builtin"], out, tokenizer="bpe", vocab_size=args.vocab_size, max_mb=build_mb, overwrite=True)
    build_cpu = time.process_time() - c0
    build_s = time.perf_counter() - t0
    m = TokenDataset(out).manifest
    b = m["build"]
    print(f"## Build of the built-in dataset ({'full corpus' if build_mb is None else f'max_mb={build_mb:g}'}), wall seconds\n")
    print("| text MB | documents | tokens (train / val) | read s | BPE train s | tokenise+write s | total s | total CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {m['bytes'] / 1e6:.1f} | {m['documents']} | {m['splits']['train']['tokens']:,} / {m['splits']['validation']['tokens']:,} "
          f"| {b['read_seconds']:.1f} | {b['tokenizer_seconds']:.1f} | {b['tokenize_seconds']:.1f} | {build_s:.1f} | {build_cpu:.1f} |\n")

    # 2. Tokenisation rate of that trained BPE.
    texts = sample_texts(args.text_mb)
    tok_path = str(out / "tokenizer.json")
    allc = encode_rate(tok_path, texts)
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="true")
    one = json.loads(subprocess.check_output(
        [sys.executable, __file__, "--child", "--text-mb", str(args.text_mb), "--tokenizer-path", tok_path], env=env, text=True))
    print(f"## Tokenisation (trained byte-level BPE, vocab {args.vocab_size}, {allc['mb']:.1f} MB of built-in text, {allc['mb'] * 1e6 / allc['tokens']:.2f} bytes/token)\n")
    print("| threads | wall s | CPU s | MB/s (wall) | MB per CPU-second (per core) |")
    print("|---|---|---|---|---|")
    print(f"| all ({os.cpu_count()}) | {allc['wall_s']:.1f} | {allc['cpu_s']:.1f} | {allc['mb_per_s']:.2f} | {allc['mb_per_cpu_s']:.2f} |")
    print(f"| 1 | {one['wall_s']:.1f} | {one['cpu_s']:.1f} | {one['mb_per_s']:.2f} | {one['mb_per_cpu_s']:.2f} |\n")

    # 3. Loader.
    print("## Loader (TokenLoader.next_batch, tokens per second of inputs)\n")
    print("| seq_len | batch | M tokens/s |")
    print("|---|---|---|")
    for r in loader_rates(out):
        print(f"| {r['seq_len']} | {r['batch']} | {r['mtok_per_s']:.1f} |")
    if not args.out:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
