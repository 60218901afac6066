"""Runs the fused-kernel cases (interpret_cases.py) on the CPU through Triton's
interpreter, in a subprocess: TRITON_INTERPRET must be set before triton is first
imported, which a shared pytest process cannot promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

HERE = Path(__file__).resolve().parent


def test_kernels_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", MHAR_ROUTING_POISON="1", MHAR_ROUTING_BACKEND="triton")
    src = str(HERE.parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    # the timeout guards against a hang, not the time: the cases took 14.5 minutes on a slow
    # 2-core machine (session 19), a few on a typical one
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                        str(HERE / "interpret_cases.py")], env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
