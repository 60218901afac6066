"""Errors a training run reports to the user (the CLI prints them as one line)."""


class TrainingError(RuntimeError):
    """A run stopped for a reason the user must see (divergence, disk full, ...)."""


class DivergenceError(TrainingError):
    """The loss (or the gradient norm) became NaN or Inf; the last good checkpoint is kept."""


class CheckpointError(TrainingError):
    """A checkpoint could not be written or read."""
