"""Evaluation: validation loss and perplexity, downstream tasks read offline, and
paired statistics (bootstrap CI, exact McNemar, tail-mean)."""

from mhar.eval.adapter import EvalModel, load_for_eval, wrap_decoder, wrap_hf
from mhar.eval.stats import mcnemar_exact, paired_bootstrap, paired_tail_mean, tail_mean
from mhar.eval.tasks import TASKS, load_task

__all__ = ["EvalModel", "load_for_eval", "wrap_decoder", "wrap_hf", "mcnemar_exact", "paired_bootstrap",
           "paired_tail_mean", "tail_mean", "TASKS", "load_task"]
