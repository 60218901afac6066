"""Paired statistics for comparing two models on the same items or the same schedule.

* :func:`paired_bootstrap` - confidence interval of mean(b - a) over items, resampling
  items with replacement (percentile interval), and a two-sided bootstrap p-value.
* :func:`mcnemar_exact` - exact McNemar test for two accuracies on the same items: under
  the null the discordant pairs split Binomial(n01 + n10, 1/2).
* :func:`tail_mean` - mean of the last k evaluations of a loss curve and its standard
  error; :func:`paired_tail_mean` - the same for the per-evaluation difference of two runs
  evaluated at the same steps (the paper's metric: k = 11).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np


@dataclass
class BootstrapResult:
    n: int
    mean_a: float
    mean_b: float
    diff: float          # mean(b) - mean(a)
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float       # two-sided: 2 x the smaller tail of the bootstrap distribution at 0
    n_boot: int

    def to_dict(self) -> dict:
        return asdict(self)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 10000, confidence: float = 0.95,
                     seed: int = 0, chunk: int = 1000) -> BootstrapResult:
    """Paired bootstrap of the mean difference b - a (items resampled jointly)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired samples must be 1-D and the same length (got {a.shape} and {b.shape})")
    n = len(a)
    if n == 0:
        raise ValueError("no paired items")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must be in (0, 1)")
    d = b - a
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for s in range(0, n_boot, chunk):
        m = min(chunk, n_boot - s)
        means[s:s + m] = d[rng.integers(0, n, size=(m, n))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    p = min(1.0, 2 * min(np.mean(means <= 0), np.mean(means >= 0))) if np.any(d != 0) else 1.0
    return BootstrapResult(n, float(a.mean()), float(b.mean()), float(d.mean()), float(lo), float(hi), confidence,
                           float(p), n_boot)


@dataclass
class McNemarResult:
    n: int
    acc_a: float
    acc_b: float
    n01: int            # a wrong, b right
    n10: int            # a right, b wrong
    p_value: float      # exact, two-sided

    def to_dict(self) -> dict:
        return asdict(self)


def binom_two_sided_half(k: int, n: int) -> float:
    """Exact two-sided p-value of k successes in n trials at p = 1/2 (symmetric, so twice
    the smaller tail, capped at 1)."""
    if n == 0:
        return 1.0
    k = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def mcnemar_exact(a: Sequence[int], b: Sequence[int]) -> McNemarResult:
    """Exact McNemar test on paired 0/1 outcomes."""
    a, b = np.asarray(a).astype(bool), np.asarray(b).astype(bool)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes differ in length ({a.shape} vs {b.shape})")
    n01 = int(np.sum(~a & b))
    n10 = int(np.sum(a & ~b))
    return McNemarResult(len(a), float(a.mean()) if len(a) else float("nan"),
                         float(b.mean()) if len(b) else float("nan"), n01, n10,
                         binom_two_sided_half(n01, n01 + n10))


@dataclass
class TailMean:
    mean: float
    stderr: float        # sample std (ddof=1) / sqrt(k); NaN for k = 1
    k: int

    def to_dict(self) -> dict:
        return asdict(self)


def tail_mean(values: Sequence[float], k: int = 11) -> TailMean:
    """Mean of the last ``k`` values and its standard error. The evaluations of a curve are
    correlated (neighbouring checkpoints), so the stderr is a rough guide; differences of
    paired runs (:func:`paired_tail_mean`) cancel most of the shared noise."""
    v = np.asarray(values, dtype=np.float64)
    if k < 1:
        raise ValueError(f"k={k} must be >= 1")
    if len(v) == 0:
        raise ValueError("no values")
    t = v[-k:]
    se = float(t.std(ddof=1) / math.sqrt(len(t))) if len(t) > 1 else float("nan")
    return TailMean(float(t.mean()), se, len(t))


def paired_tail_mean(a: Sequence[float], b: Sequence[float], k: int = 11) -> TailMean:
    """Tail-mean of b - a over the last k evaluations both runs made at the same steps."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired curves differ in length ({a.shape} vs {b.shape})")
    return tail_mean(b - a, k)
