"""Atomic checkpoints: a crash mid-write, a full disk, keep_last."""

import errno
import json
import os
import signal
import subprocess
import textwrap

import pytest
import torch

from train_helpers import PYTHON, SMALL, subprocess_env
from mhar.train import CheckpointError, Trainer, TrainingError
from mhar.train import checkpoint as ckpt
from mhar.train.metrics import read_metrics

# Trains in a subprocess; the second checkpoint write stalls after writing half a
# file, announces it, and waits to be killed.
CHILD = textwrap.dedent("""
    import sys, time, json
    import torch
    import mhar.train.checkpoint as ck
    from mhar.train import Trainer, apply_train_overrides, train_preset
    overrides, out = json.loads(sys.argv[1]), sys.argv[2]
    real_save, calls = torch.save, []
    def stalling_save(obj, f, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            f.write(b"PK\\x03\\x04 half a checkpoint")
            f.flush()
            print("MIDWRITE", flush=True)
            time.sleep(120)
        return real_save(obj, f, *a, **k)
    ck.torch.save = stalling_save
    cfg = apply_train_overrides(train_preset("tiny", "mhar-h2"), overrides)
    Trainer(cfg, out, progress=False).fit()
""")


def test_kill_9_during_checkpoint_write_then_resume(tmp_path, small_cfg):
    opts = ["steps=6", "checkpoint_every=2", "eval_every=2"]
    run = tmp_path / "run"
    child = subprocess.Popen([PYTHON, "-c", CHILD, json.dumps(SMALL + opts), str(run)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=subprocess_env(), text=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == "MIDWRITE", child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    folder = run / "checkpoints"
    assert [s for s, _ in ckpt.list_checkpoints(folder)] == [2]  # the half-written step 4 is not a checkpoint
    stray = [p for p in folder.iterdir() if p.name.startswith(".step_00000004.pt.tmp-")]
    assert stray, list(folder.iterdir())
    state = ckpt.load_checkpoint(folder / "step_00000002.pt")
    assert state["step"] == 2

    resumed = Trainer(small_cfg("mhar-h2", *opts), run, resume=True, progress=False)
    assert resumed.step == 2 and not any(p.name.startswith(".") for p in folder.iterdir())  # stray cleaned
    resumed.fit()
    full = Trainer(small_cfg("mhar-h2", *opts), tmp_path / "full", progress=False)
    full.fit()
    assert [r["loss"] for r in read_metrics(run)] == [r["loss"] for r in read_metrics(tmp_path / "full")]
    assert [s for s, _ in ckpt.list_checkpoints(folder)] == [4, 6]  # keep_last=2


def test_keep_last_and_latest(tmp_path):
    for step in range(1, 6):
        ckpt.save_checkpoint({"step": step}, tmp_path, step, keep_last=2)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [4, 5]
    path, state = ckpt.latest_checkpoint(tmp_path)
    assert state["step"] == 5 and path.name == "step_00000005.pt"
    # a corrupt newest file (never left by save_checkpoint) is skipped with a warning
    (tmp_path / "step_00000009.pt").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="cannot be read"):
        path, state = ckpt.latest_checkpoint(tmp_path)
    assert state["step"] == 5


def test_disk_full_is_reported_and_previous_kept(tmp_path, monkeypatch):
    ckpt.save_checkpoint({"step": 1}, tmp_path, 1)

    def full_disk(obj, f, *a, **k):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(ckpt.torch, "save", full_disk)
    with pytest.raises(CheckpointError, match=r"disk full.*step_00000002.*previous checkpoint .*step_00000001.pt "
                                              r"is kept"):
        ckpt.save_checkpoint({"step": 2}, tmp_path, 2)
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000001.pt"]  # no stray temporary file
    assert ckpt.load_checkpoint(tmp_path / "step_00000001.pt") == {"step": 1}


def test_disk_full_inside_torch_save(tmp_path, monkeypatch):
    """torch.save itself on a disk that fills up: its zip writer raises a RuntimeError
    whose context is the OSError (what a real full disk gave, session 62)."""
    ckpt.save_checkpoint({"step": 1}, tmp_path, 1)
    real_open = open

    class FillingFile:
        def __init__(self, f):
            self.f, self.left = f, 300

        def write(self, b):
            if len(b) > self.left:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.left -= len(b)
            return self.f.write(b)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(ckpt, "open", lambda *a, **k: FillingFile(real_open(*a, **k)), raising=False)
    with pytest.raises(CheckpointError, match=r"disk full.*step_00000002.*step_00000001.pt is kept") as info:
        ckpt.save_checkpoint({"step": 2, "w": torch.zeros(1000)}, tmp_path, 2)
    assert not isinstance(info.value.__cause__, OSError)  # torch wrapped it: the test covers the wrapping
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000001.pt"]


def test_write_error_finds_the_os_error():
    disk_full = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise disk_full
        except OSError:
            raise RuntimeError("unexpected pos")
    except RuntimeError as err:
        assert ckpt.write_error(err) is disk_full

    class Gathered(BaseException):  # DCP's CheckpointException: rank -> (exception, traceback)
        failures = {0: (ValueError("x"), None), 1: (disk_full, None)}
    assert ckpt.write_error(Gathered()) is disk_full
    assert ckpt.write_error(RuntimeError("a bug, not a write")) is None


def test_disk_full_during_training(tmp_path, small_cfg, monkeypatch):
    t = Trainer(small_cfg("baseline", "steps=4", "checkpoint_every=2"), tmp_path / "r", progress=False)
    real = ckpt.torch.save
    calls = []

    def save(obj, f, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, f, *a, **k)
    monkeypatch.setattr(ckpt.torch, "save", save)
    with pytest.raises(TrainingError, match="disk full"):
        t.fit()
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "r" / "checkpoints")] == [2]


def test_disk_full_while_logging(tmp_path, small_cfg, monkeypatch):
    t = Trainer(small_cfg("baseline", "steps=4", "checkpoint_every=1"), tmp_path / "r", progress=False)
    real = t.log.log
    calls = []

    def log(row):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(row)
    monkeypatch.setattr(t.log, "log", log)
    with pytest.raises(TrainingError, match=r"disk full.*last good checkpoint: .*step_00000002.pt"):
        t.fit()


def test_checkpoint_contents(tmp_path, small_cfg):
    t = Trainer(small_cfg("mhar-h2", "steps=2", "checkpoint_every=2"), tmp_path / "r", progress=False)
    t.fit()
    state = ckpt.load_checkpoint(tmp_path / "r" / "checkpoints" / "step_00000002.pt")
    assert {"model", "optimizer", "schedule", "rng", "loader", "config", "step", "tokens", "evals"} <= set(state)
    assert set(state["rng"]) >= {"torch", "numpy", "python"}
    assert state["schedule"]["step"] == 2 and state["config"]["model"]["stream"]["heads"] == 2
    assert all(torch.equal(a, b) for a, b in zip(state["model"].values(), t.model.state_dict().values()))
