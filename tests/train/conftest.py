import os
import sys
from pathlib import Path

import pytest
import torch

SRC = str(Path(__file__).resolve().parents[2] / "src")

# A model and data small enough that a step takes milliseconds on one CPU core.
SMALL = ["data.source=synthetic", "data.vocab_size=64", "data.val_windows=4", "d_model=32", "n_layers=2",
         "n_heads=2", "n_kv_heads=1", "d_ff=64", "seq_len=16", "batch_size=2", "warmup=2", "lr=3e-3",
         "threads=1"]


@pytest.fixture(autouse=True)
def _restore_threads():
    """The trainer's ``threads`` option is process-wide: give the other tests theirs back."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture
def small_cfg():
    from mhar.train import apply_train_overrides, train_preset

    def make(method="baseline", *extra):
        return apply_train_overrides(train_preset("tiny", method), SMALL + list(extra))
    return make


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def run_cli(capsys):
    """Run ``mhar ARGS`` in-process; returns (exit code, stdout, stderr)."""
    from mhar.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err
    return run


PYTHON = sys.executable
