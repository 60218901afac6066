"""Running a test file's ``interp_`` cases through Triton's interpreter in a subprocess:
TRITON_INTERPRET must be set before triton is first imported, which a shared pytest
process cannot promise. The file skips those cases unless ``flag`` is set to 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run_interpreter_cases(test_file: Path, flag: str) -> None:
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", **{flag: "1"})
    src = str(test_file.parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-k", "interp_",
                        str(test_file)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout.splitlines()[-1], r.stdout[-2000:]
