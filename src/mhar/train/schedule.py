"""Learning-rate schedule: linear warm-up, then cosine decay to ``min_ratio`` x peak."""

from __future__ import annotations

import math


def lr_at(step: int, peak: float, warmup: int, total: int, min_ratio: float = 0.1) -> float:
    """Learning rate for optimiser step ``step`` (0-based) of ``total``.

    Warm-up: ``peak * (step + 1) / warmup`` for the first ``warmup`` steps. Then a
    half cosine from ``peak`` at step ``warmup`` to ``min_ratio * peak`` at the last
    step (``total - 1``)."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    span = max(1, total - 1 - warmup)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))
