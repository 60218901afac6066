"""Read a finished (or running) run folder back: its config and its model."""

from __future__ import annotations

from pathlib import Path

import torch

from mhar.model import Decoder
from mhar.train import checkpoint as ckpt
from mhar.train.config import TrainConfig
from mhar.train.metrics import CHECKPOINTS, CONFIG


def load_run_config(run: str | Path) -> TrainConfig:
    path = Path(run) / CONFIG
    if not path.exists():
        raise FileNotFoundError(f"{run} is not a run folder: {path} does not exist")
    return TrainConfig.load(path)


def _sharded(run: Path, folder: Path) -> None:
    """A multi-process run's checkpoints are DCP folders: say how to read them here."""
    from mhar.train import dcp

    found = dcp.list_checkpoints(folder)
    if found:
        step, path = found[-1]
        raise FileNotFoundError(f"{run}: its checkpoints are sharded (DCP, from a multi-process run; steps "
                                f"{[s for s, _ in found]}); make one file first: mhar consolidate {path} "
                                f"--out {ckpt.checkpoint_path(folder, step)}")


def _checkpoint_file(run: Path, checkpoint: str | int | None) -> Path:
    folder = run / CHECKPOINTS
    if checkpoint is None:
        found = ckpt.list_checkpoints(folder)
        if not found:
            _sharded(run, folder)
            raise FileNotFoundError(f"{run}: no checkpoint in {folder}")
        return found[-1][1]
    if isinstance(checkpoint, int) or str(checkpoint).isdigit():
        path = ckpt.checkpoint_path(folder, int(checkpoint))
    else:
        path = Path(checkpoint)
        if not path.exists() and (folder / path).exists():
            path = folder / path
    if not path.exists():
        avail = [s for s, _ in ckpt.list_checkpoints(folder)]
        if not avail:
            _sharded(run, folder)
        raise FileNotFoundError(f"{run}: checkpoint {checkpoint} not found (steps available: {avail})")
    return path


def load_run_model(run: str | Path, checkpoint: str | int | None = None,
                   device: str | torch.device = "cpu") -> Decoder:
    """The Decoder of a run folder in eval mode, with the weights of its newest
    checkpoint, or of ``checkpoint`` (a step number, a file name in
    ``checkpoints/`` or a path). The model config is the one the checkpoint was
    trained with. A checkpoint with averaged weights (``mhar midtrain``'s EMA, which its
    validation and its saved models use) gives those."""
    run = Path(run)
    path = _checkpoint_file(run, checkpoint)
    state = ckpt.load_checkpoint(path)
    cfg = TrainConfig.from_dict(state["config"]) if "config" in state else load_run_config(run)
    model = Decoder(cfg.model)
    weights = {**state["model"], **state.get("ema", {})}
    weights = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in weights.items()}
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise ValueError(f"{path} does not match the model config of {run}: {err}") from None
    return model.to(device).eval()
