"""Atomic checkpoints: written to a temporary file in the same folder, flushed and
fsynced, then renamed over the final name (``os.replace`` is atomic on POSIX). A
process killed mid-write leaves only a stray temporary file; the previous
checkpoint stays complete and loadable. ``keep_last`` prunes older ones only after
the new one is in place."""

from __future__ import annotations

import errno
import os
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from mhar.train.errors import CheckpointError

_NAME = re.compile(r"^step_(\d{8})\.pt$")
_TMP = re.compile(r"^\.step_\d{8}\.pt\.tmp-\d+$")


def checkpoint_path(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"step_{step:08d}.pt"


def list_checkpoints(folder: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of the complete checkpoints in ``folder``, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out = []
    for p in folder.iterdir():
        m = _NAME.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def clean_stale_tmp(folder: str | Path) -> list[Path]:
    """Remove temporary files left by an interrupted write; returns what it removed."""
    folder = Path(folder)
    removed = []
    if folder.is_dir():
        for p in folder.iterdir():
            if _TMP.match(p.name):
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_error(err: BaseException) -> OSError | None:
    """The operating system's error behind a failed write, or None. ``torch.save`` reports
    a full disk as a RuntimeError of its zip writer (the OSError is its context), and
    DCP as a CheckpointException holding each failed rank's exception."""
    stack, seen = [err], set()
    while stack:
        e = stack.pop()
        if isinstance(e, tuple):  # DCP's failures: rank -> (exception, traceback)
            e = e[0] if e else None
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError):
            return e
        stack += [e.__cause__, e.__context__, *(getattr(e, "failures", None) or {}).values()]
    return None


def write_error_message(os_err: OSError, path: Path, kept: str) -> str:
    if os_err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full while writing checkpoint {path} ({os_err.strerror}); {kept}"
    return f"could not write checkpoint {path}: {os_err}; {kept}"


def save_checkpoint(state: dict[str, Any], folder: str | Path, step: int, keep_last: int = 0) -> Path:
    """Write ``state`` atomically as ``folder/step_XXXXXXXX.pt``; then keep only the
    newest ``keep_last`` checkpoints (0: keep all). A full disk (or any write error)
    raises :class:`CheckpointError` naming the checkpoint that is still good."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(folder, step)
    tmp = folder / f".{final.name}.tmp-{os.getpid()}"
    previous = list_checkpoints(folder)
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(folder)
    except Exception as err:
        tmp.unlink(missing_ok=True)
        os_err = write_error(err)
        if os_err is None:
            raise
        kept = f"the previous checkpoint {previous[-1][1]} is kept" if previous else "no earlier checkpoint exists"
        raise CheckpointError(write_error_message(os_err, final, kept)) from err
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if keep_last > 0:
        for _, old in list_checkpoints(folder)[:-keep_last]:
            old.unlink(missing_ok=True)
    return final


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load one checkpoint on the CPU. It holds Python and NumPy RNG states, so it
    is unpickled in full: load only checkpoints you wrote."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise
    except Exception as err:  # truncated or foreign file
        raise CheckpointError(f"checkpoint {path} cannot be read: {err}") from err


def saved_config(folder: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The training config (a dict) saved in the newest checkpoint in ``folder``, one
    process's ``step_N.pt`` or a multi-process run's ``step_N/``, with its path; None
    if there is none. Reads no tensor (a .pt file is memory-mapped)."""
    from mhar.train import dcp

    found = sorted(list_checkpoints(folder) + dcp.list_checkpoints(folder))
    if not found:
        return None
    path = found[-1][1]
    if path.is_dir():
        return path, dcp.load_meta(path)["config"]
    try:
        return path, torch.load(path, map_location="cpu", weights_only=False, mmap=True)["config"]
    except Exception as err:
        raise CheckpointError(f"checkpoint {path} cannot be read: {err}") from err


def latest_checkpoint(folder: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads, with its state; an unreadable newest one
    (which atomic writes should never leave) is reported and skipped."""
    for _, path in reversed(list_checkpoints(folder)):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as err:
            warnings.warn(f"{err}; trying an older checkpoint", stacklevel=2)
    return None
