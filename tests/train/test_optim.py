"""The clip folded into a fused AdamW step (mhar.train.optim.clip_and_step) equals
clip_grad_norm_ followed by the step, for a clipped and an unclipped norm; the trainer
takes the folded path with a fused optimiser and gives the same losses and norms."""

import math

import pytest
import torch

from train_helpers import SMALL

from mhar.train import Trainer, apply_train_overrides, optim, train_preset
from mhar.train.metrics import read_metrics


def _params(seed: int, scale: float, device: str = "cpu"):
    torch.manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(shape, device=device)) for shape in ((64, 32), (32,), (7, 3, 5))]
    for p in ps:
        p.grad = scale * torch.randn_like(p)
    return ps


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [3.0, 1e-3])  # a norm above max_norm (clipped) and below
def test_clip_folded_into_fused_step_matches_clip_then_step(scale, device):
    want, got = _params(0, scale, device), _params(0, scale, device)
    ref = torch.optim.AdamW(want, lr=1e-2, weight_decay=0.1, fused=False)
    fused = torch.optim.AdamW(got, lr=1e-2, weight_decay=0.1, fused=True)
    assert optim.is_fused(fused) and not optim.is_fused(ref)
    for _ in range(3):
        norm_ref = optim.clip_and_step(ref, want, 1.0)
        norm = optim.clip_and_step(fused, got, 1.0)
        torch.testing.assert_close(norm, norm_ref)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)  # left clipped, both ways
    assert not hasattr(fused, "grad_scale")
    if scale > 1:
        assert math.isclose(float(torch.nn.utils.get_total_norm([p.grad for p in got])), 1.0, rel_tol=1e-4)


def test_trainer_with_a_fused_optimizer_folds_the_clip(tmp_path, monkeypatch):
    run = SMALL + ["steps=4", "grad_clip=0.05", "eval_every=4", "checkpoint_every=4"]
    logs = {}
    for fused in (False, True):
        built = optim.build_optimizer

        def build(model, *a, fused=fused, **k):  # the CPU default is unfused; force either
            groups = [{k: v for k, v in g.items() if k != "fused"} for g in built(model, *a, **k).param_groups]
            return torch.optim.AdamW(groups, fused=fused)
        monkeypatch.setattr("mhar.train.trainer.build_optimizer", build)
        cfg = apply_train_overrides(train_preset("tiny", "mhar"), run)
        trainer = Trainer(cfg, tmp_path / str(fused), progress=False)
        assert optim.is_fused(trainer.optimizer) == fused
        trainer.fit()
        logs[fused] = read_metrics(tmp_path / str(fused))
    for a, b in zip(logs[True], logs[False]):
        assert math.isclose(a["loss"], b["loss"], rel_tol=1e-4), (a, b)
        assert math.isclose(a["grad_norm"], b["grad_norm"], rel_tol=1e-3), (a, b)
    assert any(r["grad_norm"] > 0.05 for r in logs[False])  # the clip was active
