import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # tests/train/train_helpers.py (pytest runs in importlib mode)
from train_helpers import SMALL  # noqa: E402


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


@pytest.fixture
def run_cli(capsys):
    """Run ``mhar ARGS`` in-process; returns (exit code, stdout, stderr)."""
    from mhar.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err
    return run
