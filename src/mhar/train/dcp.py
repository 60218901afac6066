"""Sharded checkpoints through ``torch.distributed.checkpoint`` (DCP).

A distributed run writes ``checkpoints/step_XXXXXXXX/`` (a folder), next to where
a single-process run writes ``step_XXXXXXXX.pt``:

* ``.metadata`` and ``__R_0.distcp``: the DCP shards of ``{"model", "optimizer"}``
  (the state dicts of :func:`torch.distributed.checkpoint.state_dict.get_state_dict`:
  keyed by parameter name, FSDP2 parameters as ``DTensor`` shards), each rank writing
  its own file; replicated (DDP) tensors are written once. DCP stores global shapes,
  so the checkpoint loads at any world size, with DDP, FSDP2 or in one process.
* ``trainer.pt``: what is not a tensor shard (step, tokens, evaluations, schedule,
  loader position, config), written by rank 0;
* ``rng_R.pt``: the RNG states of rank R.

Writes are atomic: everything goes to ``.step_XXXXXXXX.tmp/`` first, and rank 0
renames the folder once every rank has finished. :func:`consolidate` turns a DCP
checkpoint into one ``.pt`` file in the single-process trainer's format (full
tensors; AdamW state keyed by index), for sharing, ``mhar`` analysis commands, or
resuming on one device without a process group.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.api import CheckpointException

from mhar.train.checkpoint import list_checkpoints as single_process_checkpoints
from mhar.train.checkpoint import write_error, write_error_message
from mhar.train.errors import CheckpointError

_NAME = re.compile(r"^step_(\d{8})$")
_TMP = re.compile(r"^\.step_\d{8}\.tmp$")
META = "trainer.pt"
DCP_METADATA = ".metadata"


def checkpoint_dir(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"step_{step:08d}"


def is_dcp_checkpoint(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / DCP_METADATA).exists() and (p / META).exists()


def list_checkpoints(folder: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of the complete DCP checkpoints in ``folder``, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name)) and is_dcp_checkpoint(p)]
    return sorted(out)


def clean_stale_tmp(folder: str | Path) -> list[Path]:
    """Remove temporary folders left by an interrupted write (call on one rank)."""
    folder = Path(folder)
    removed = []
    if folder.is_dir():
        for p in folder.iterdir():
            if _TMP.match(p.name):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, meta: dict[str, Any], rng: dict[str, Any],
         folder: str | Path, step: int, keep_last: int = 0) -> Path:
    """Collective: every rank calls it. Returns the final checkpoint folder."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    folder = Path(folder)
    final = checkpoint_dir(folder, step)
    tmp = folder / f".{final.name}.tmp"
    rank = _rank()
    if rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    _barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    try:
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(tmp))
        torch.save(rng, tmp / f"rng_{rank}.pt")
        if rank == 0:
            torch.save(meta, tmp / META)
    except (Exception, CheckpointException) as err:  # (DCP's is a BaseException)
        # DCP gathers every rank's failure (pickled: a full disk's OSError behind torch.save's
        # RuntimeError is lost on the way), and raises it on every rank
        os_err = write_error(err)
        if os_err is None and not isinstance(err, CheckpointException):
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # every rank: the same folder, removed twice harmlessly
        kept = "earlier checkpoints are kept"
        if os_err is not None:
            raise CheckpointError(write_error_message(os_err, final, kept)) from err
        first = next(iter(err.failures.values()), None)
        cause = first[0] if isinstance(first, tuple) and first else err
        free = shutil.disk_usage(folder).free / 2**20
        raise CheckpointError(f"could not write checkpoint {final} ({type(cause).__name__}: {cause}; "
                              f"{free:,.0f} MiB free on its disk); {kept}") from err
    _barrier()
    if rank == 0:
        if final.exists():  # a checkpoint of the same step from an earlier, interrupted attempt
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(folder)
        if keep_last > 0:  # one process's .pt files too (a run resumed from one under torchrun)
            for _, old in sorted(list_checkpoints(folder) + single_process_checkpoints(folder))[:-keep_last]:
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink(missing_ok=True)
    _barrier()
    return final


def load_meta(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        return torch.load(path / META, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise
    except Exception as err:
        raise CheckpointError(f"checkpoint {path} cannot be read: {err}") from err


def load(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str | Path) -> dict[str, Any] | None:
    """Collective: load the shards of ``path`` into ``model`` / ``optimizer`` (any
    world size, any parallel mode). Returns this rank's RNG state (rank 0's when the
    checkpoint was written by fewer ranks), or None."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optimizer": optim_sd}
    try:
        dcp.load(state, checkpoint_id=str(path))
    except Exception as err:
        raise CheckpointError(f"checkpoint {path} cannot be loaded into this model: {err}") from err
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    for name in (f"rng_{_rank()}.pt", "rng_0.pt"):
        if (path / name).exists():
            return torch.load(path / name, map_location="cpu", weights_only=False)
    return None


def _index_optimizer_state(osd: dict[str, Any]) -> dict[str, Any]:
    """A DCP (name-keyed) optimizer state dict in ``Optimizer.state_dict()`` form
    (parameters numbered in param-group order)."""
    index: dict[str, int] = {}
    groups = []
    for g in osd.get("param_groups", []):
        g = dict(g)
        ids = []
        for name in g["params"]:
            index.setdefault(name, len(index))
            ids.append(index[name])
        g["params"] = ids
        groups.append(g)
    state = {index[name]: s for name, s in osd.get("state", {}).items() if name in index}
    return {"state": state, "param_groups": groups}


def consolidate(path: str | Path, out: str | Path) -> Path:
    """Write the DCP checkpoint folder ``path`` as one ``.pt`` file in the
    single-process trainer's format (no process group needed). Returns ``out``."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    path, out = Path(path), Path(out)
    if not is_dcp_checkpoint(path):
        raise CheckpointError(f"{path} is not a DCP checkpoint folder (expected {DCP_METADATA} and {META})")
    meta = load_meta(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        dcp_to_torch_save(str(path), str(tmp))
        full = torch.load(tmp, map_location="cpu", weights_only=False)
        state = dict(meta)
        if "config" in state:  # the single-process format: resumed without a process group
            state["config"] = dict(state["config"], parallel="none")
        state["model"] = full["model"]
        state["optimizer"] = _index_optimizer_state(full["optimizer"])
        rng = path / "rng_0.pt"
        if rng.exists():
            state["rng"] = torch.load(rng, map_location="cpu", weights_only=False)
        torch.save(state, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
