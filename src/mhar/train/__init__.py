"""Training and comparison: the Trainer, its config, checkpoints, run folders."""

from mhar.train.config import DataConfig, TrainConfig, apply_train_overrides, train_preset
from mhar.train.errors import CheckpointError, DivergenceError, TrainingError
from mhar.train.load import load_run_config, load_run_model
from mhar.train.trainer import LossModule, Trainer

__all__ = ["DataConfig", "TrainConfig", "apply_train_overrides", "train_preset", "CheckpointError",
           "DivergenceError", "TrainingError", "LossModule", "Trainer", "load_run_config", "load_run_model"]
