"""Runs the fused-kernel cases (interpret_cases.py) on the CPU through Triton's
interpreter, in subprocesses: TRITON_INTERPRET must be set before triton is first
imported, which a shared pytest process cannot promise."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("triton")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The interpreter keeps one core busy per process, so the cases run in two shards at once
# (CI has two cores): 254 s against 512 s in one process on this project's 2-core
# machine (session 25).
SHARDS = 2


def run_sharded(cases: Path, shards: int = SHARDS) -> list[str]:
    """Run the cases in ``cases`` under the interpreter, split round-robin over ``shards``
    concurrent pytest processes; the output of each shard that failed."""
    # one torch thread per shard: the shards, not torch's threads, share the cores
    env = dict(os.environ, TRITON_INTERPRET="1", MHAR_ROUTING_POISON="1", MHAR_ROUTING_BACKEND="triton",
               OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    collected = subprocess.run([*pytest_cmd, "--collect-only", str(cases)], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=600)
    ids = [line for line in collected.stdout.splitlines() if f"{cases.name}::" in line]
    if collected.returncode != 0 or not ids:
        return [f"-- collecting {cases.name} (exit {collected.returncode}):\n"
                f"{collected.stdout[-6000:]}{collected.stderr[-3000:]}"]
    # each shard's output goes to a file (a pipe read only after another shard ends could fill)
    logs = [tempfile.TemporaryFile("w+") for _ in range(shards)]
    procs = [subprocess.Popen([*pytest_cmd, "-x", *ids[k::shards]], cwd=ROOT, env=env, text=True,
                              stdout=log, stderr=subprocess.STDOUT) for k, log in enumerate(logs)]
    failed = []
    try:
        for k, (proc, log) in enumerate(zip(procs, logs)):
            # the timeout guards against a hang, not the time: the cases took 14.5 minutes
            # in one process on a slow 2-core machine (session 19)
            proc.wait(timeout=1800)
            log.seek(0)
            if proc.returncode != 0:
                failed.append(f"-- shard {k + 1} of {shards} (exit {proc.returncode}):\n{log.read()[-6000:]}")
    finally:  # a hang (or an interrupt) leaves no shard running
        for proc, log in zip(procs, logs):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    return failed


def test_kernels_under_interpreter():
    failed = run_sharded(HERE / "interpret_cases.py")
    assert not failed, "\n".join(failed)
