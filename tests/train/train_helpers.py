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


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env
