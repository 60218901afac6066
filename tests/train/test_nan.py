"""A NaN or Inf loss stops the run with a clear message and keeps the last good checkpoint."""

import math

import pytest
import torch

from mhar.train import DivergenceError, Trainer
from mhar.train import checkpoint as ckpt
from mhar.train.metrics import SUMMARY, read_metrics


class BadLossAt(Trainer):
    bad_step, value = 0, math.nan

    def compute_loss(self, x, y):
        loss = super().compute_loss(x, y)
        if self.step + 1 == self.bad_step:
            loss = loss * torch.tensor(self.value)
        return loss


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_loss_stops_and_keeps_checkpoint(tmp_path, small_cfg, value):
    BadLossAt.bad_step, BadLossAt.value = 5, value
    t = BadLossAt(small_cfg("mhar-h2", "steps=8", "checkpoint_every=2", "eval_every=2"), tmp_path / "r",
                  progress=False)
    good = None
    with pytest.raises(DivergenceError) as info:
        t.fit()
    msg = str(info.value)
    assert f"loss is {value} at step 5" in msg and "last good checkpoint" in msg and "step_00000004.pt" in msg
    folder = tmp_path / "r" / "checkpoints"
    assert [s for s, _ in ckpt.list_checkpoints(folder)] == [2, 4]
    good = ckpt.load_checkpoint(folder / "step_00000004.pt")
    assert all(torch.isfinite(v).all() for v in good["model"].values())
    # the weights were not touched by the bad step
    assert all(torch.equal(a, b) for a, b in zip(good["model"].values(), t.model.state_dict().values()))
    assert [r["step"] for r in read_metrics(tmp_path / "r")] == [1, 2, 3, 4]
    assert not (tmp_path / "r" / SUMMARY).exists()


def test_non_finite_weights_are_never_checkpointed(tmp_path, small_cfg):
    t = Trainer(small_cfg("baseline", "steps=2", "checkpoint_every=1"), tmp_path / "r", progress=False)
    t.fit()
    with torch.no_grad():
        next(t.model.parameters()).fill_(float("nan"))
    with pytest.raises(DivergenceError, match="not finite.*step_00000002.pt is kept"):
        t.save_checkpoint()


def test_cli_reports_divergence(tmp_path, run_cli):
    # an absurd learning rate diverges within a few steps
    code, out, err = run_cli("train", "--out", tmp_path / "r", "--quiet", "data.source=synthetic",
                             "data.vocab_size=64", "d_model=32", "n_layers=2", "n_heads=2", "n_kv_heads=1",
                             "d_ff=64", "seq_len=16", "batch_size=2", "warmup=0", "lr=1e30", "grad_clip=0",
                             "steps=30", "eval_every=30", "checkpoint_every=1", "threads=1")
    assert code == 1, (out, err)
    assert "mhar train: error:" in err and ("loss is" in err or "not finite" in err or "gradient norm" in err)
    assert "last good checkpoint" in err or "is kept" in err
