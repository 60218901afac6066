"""Shared helpers for the training tests (imported by name: tests/train is on sys.path)."""

import os
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")
PYTHON = sys.executable

# A model and data small enough that a step takes milliseconds on one CPU core.
SMALL = ["data.source=synthetic", "data.vocab_size=64", "data.val_windows=4", "d_model=32", "n_layers=2",
         "n_heads=2", "n_kv_heads=1", "d_ff=64", "seq_len=16", "batch_size=2", "warmup=2", "lr=3e-3",
         "threads=1"]


def method_and_overrides(name: str) -> tuple[str, list[str]]:
    """"METHOD" or "METHOD:S", S a block size (the tiny presets' block routing has blocks of
    one sublayer, whose running sums are never more than the sublayer's output)."""
    method, _, block = name.partition(":")
    return method, [f"stream.block_size={block}"] if block else []


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env
