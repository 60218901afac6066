"""The fused AdamW kernel with the clip's scale folded in (mhar/train/adamw_kernel.py)
against torch.optim.AdamW on gradients scaled beforehand: parameters and both moments
after several steps, two parameter groups (with and without weight decay), tensor sizes
that are not a multiple of the kernel's block, parameters without a gradient, the
fallback to torch's step, checkpoints moving between the two optimisers, and a short
training run with ``adamw=triton``.

The kernel cases run on the CPU through Triton's interpreter in a subprocess (this file
again, with TRITON_INTERPRET=1), as in test_hyper_kernels.py; in the parent process
they are skipped and ``test_cases_under_interpreter`` reports them."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from interpreter_run import run_interpreter_cases

from mhar.train import adamw_kernel as AK

HERE = Path(__file__).resolve()
INNER = os.environ.get("MHAR_ADAMW_INTERPRET_CASES") == "1"
interp = pytest.mark.skipif(not INNER, reason="runs inside test_cases_under_interpreter (TRITON_INTERPRET=1)")
SHAPES = [(5000,), (37,), (3, 1500), (AK.BLOCK,), (1,)]


def _params(dtype=torch.float32, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=gen, dtype=dtype).to(device)) for s in SHAPES]


def _groups(params):
    return [{"params": params[:3], "weight_decay": 0.1}, {"params": params[3:], "weight_decay": 0.0}]


def _run(opt_cls, params, scales, kwargs, fold: bool, seed=1, skip_grad=None, tensor_scale=False):
    """Steps with fresh random gradients; ``fold``: the scale goes into step() (as a
    one-element tensor with ``tensor_scale``), else the gradients are scaled first (what
    clip_grad_norm_ does)."""
    gen = torch.Generator().manual_seed(seed)
    opt = opt_cls(_groups(params), **kwargs)
    for i, scale in enumerate(scales):
        for j, p in enumerate(params):
            p.grad = None if (skip_grad is not None and j == skip_grad and i == 1) else \
                torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device)
        for g in opt.param_groups:
            g["lr"] = 1e-2 * (i + 1)  # a schedule
        if fold:
            opt.step(grad_scale=torch.tensor(scale, device=params[0].device) if tensor_scale else scale)
        else:
            torch._foreach_mul_([p.grad for p in params if p.grad is not None], scale)
            opt.step()
    return opt


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


KW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8)


def _compare(params_a, opt_a, params_b, opt_b, tol):
    for pa, pb in zip(params_a, params_b):
        assert _rel(pa, pb) <= tol, _rel(pa, pb)
        if opt_b.state.get(pb):
            for key in ("exp_avg", "exp_avg_sq"):
                assert _rel(opt_a.state[pa][key], opt_b.state[pb][key]) <= tol, key
            assert float(opt_a.state[pa]["step"]) == float(opt_b.state[pb]["step"])


@interp
@pytest.mark.parametrize("skip_grad,tensor_scale", [(None, False), (4, False), (None, True)])
def test_interp_kernel_matches_torch(skip_grad, tensor_scale):
    """Three steps at clip scales 1, 0.3 and 0.05; with skip_grad, one parameter has no
    gradient in the second step (it keeps its state, and its step count falls behind,
    so its update runs in a launch of its own)."""
    mine, ref = _params(), _params()
    launches = []
    real = AK._adamw_kernel

    class Counting:
        def __getitem__(self, grid):
            launches.append(grid)
            return real[grid]

    AK._adamw_kernel = Counting()
    try:
        a = _run(AK.TritonAdamW, mine, [1.0, 0.3, 0.05], KW, fold=True, skip_grad=skip_grad,
                 tensor_scale=tensor_scale)
    finally:
        AK._adamw_kernel = real
    b = _run(torch.optim.AdamW, ref, [1.0, 0.3, 0.05], dict(KW, foreach=False), fold=False, skip_grad=skip_grad)
    _compare(mine, a, ref, b, 1e-6)
    # the kernel ran (two groups a step; a third launch for the lagging parameter)
    assert len(launches) == 6 + (1 if skip_grad is not None else 0), launches


@interp
def test_interp_checkpoints_move_between_the_optimisers():
    mine, ref = _params(), _params()
    a = _run(AK.TritonAdamW, mine, [1.0, 0.5], KW, fold=True)
    b = torch.optim.AdamW(_groups(ref), **KW)
    with torch.no_grad():
        for p, q in zip(ref, mine):
            p.copy_(q)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as saved and loaded (else they share the moments)
    c = copy.deepcopy(a)  # a copy (with copies of the parameters; its launch cache rebuilt)
    copied = [p for g in c.param_groups for p in g["params"]]
    _compare(mine, _run_more(a, mine), ref, _run_more(b, ref), 1e-6)
    _compare(copied, _run_more(c, copied), mine, a, 0.0)


def _run_more(opt, params):
    gen = torch.Generator().manual_seed(7)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    opt.step()
    return opt


SMALL_RUN = ["data.source=synthetic", "data.vocab_size=64", "data.val_windows=4", "d_model=32", "n_layers=2",
             "n_heads=2", "n_kv_heads=1", "d_ff=64", "seq_len=16", "batch_size=2", "warmup=2", "lr=3e-3",
             "threads=1", "steps=4", "eval_every=4", "checkpoint_every=4"]


def _check_trainer_follows_torch(tmp_path, device: str, kernel: str) -> None:
    """Runs with adamw=torch and adamw=``kernel`` (triton, or auto where that picks the
    kernel): the same losses and gradient norms."""
    from mhar.train import Trainer, apply_train_overrides, train_preset
    from mhar.train.metrics import read_metrics

    logs = {}
    for impl in ("torch", kernel):
        # grad_clip small enough that every step clips (the scale is folded into the kernel)
        cfg = apply_train_overrides(train_preset("tiny", "mhar"),
                                    SMALL_RUN + [f"device={device}", f"adamw={impl}", "grad_clip=0.05"])
        trainer = Trainer(cfg, tmp_path / impl, progress=False)
        assert isinstance(trainer.optimizer, AK.TritonAdamW) == (impl == kernel)
        trainer.fit()
        logs[impl] = read_metrics(tmp_path / impl)
    logs["triton"] = logs[kernel]
    assert len(logs["triton"]) == len(logs["torch"]) > 1
    assert all(r["grad_norm"] > 0.05 for r in logs["torch"]), "no step clipped: the scale was not tested"
    tol = 1e-5 if device == "cpu" else 2e-3  # bf16 autocast on CUDA
    for a, b in zip(logs["triton"], logs["torch"]):
        assert abs(a["loss"] - b["loss"]) <= tol * abs(b["loss"]), (a, b)
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 10 * tol * abs(b["grad_norm"]), (a, b)


@interp
def test_interp_nan_scale_skips_the_update():
    """A NaN scale (a number or a device scalar) leaves parameters and moments as they
    were; rewind_step takes back the step count."""
    params = _params()
    opt = _run(AK.TritonAdamW, params, [1.0, 0.5], KW, fold=True)
    before = [p.detach().clone() for p in params]
    state = copy.deepcopy(opt.state_dict())
    for scale in (float("nan"), torch.tensor(float("nan"))):
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step(grad_scale=scale)
        assert all(torch.equal(p, b) for p, b in zip(params, before))
        opt.rewind_step()
        now = opt.state_dict()
        for i, s in state["state"].items():
            for key in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(now["state"][i][key], s[key]), key


@interp
def test_interp_trainer_stops_before_the_update_on_a_nan_loss(tmp_path):
    """adamw=triton queues the update before it reads the loss: a NaN loss still stops
    the run with the weights, moments and step counts of the last good step."""
    from mhar.train import DivergenceError, Trainer, apply_train_overrides, train_preset

    class NanAtThirdStep(Trainer):
        def compute_loss(self, x, y):
            loss = super().compute_loss(x, y)
            return loss * float("nan") if self.step == 2 else loss

    cfg = apply_train_overrides(train_preset("tiny", "mhar"), SMALL_RUN + ["device=cpu", "adamw=triton"])
    t = NanAtThirdStep(cfg, tmp_path, progress=False)
    for _ in range(2):
        t.train_step()
        t.step += 1
    weights = copy.deepcopy(t.model.state_dict())
    state = copy.deepcopy(t.optimizer.state_dict())
    with pytest.raises(DivergenceError, match="loss is nan at step 3"):
        t.train_step()
    assert all(torch.equal(a, b) for a, b in zip(weights.values(), t.model.state_dict().values()))
    now = t.optimizer.state_dict()
    for i, s in state["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(now["state"][i][key], s[key]), key


def _check_fit_stops_with_a_step_in_flight(tmp_path) -> None:
    """fit with adamw=triton queues step 4 before it reads step 3's loss; step 3's loss is
    NaN. The run stops at step 3 with the weights, moments and step counts of step 2: the
    device skipped both updates (the CPU's torch fallback skips them on the host)."""
    from mhar.train import DivergenceError, Trainer, apply_train_overrides, train_preset

    seen = {}

    class NanAtThirdStep(Trainer):
        def compute_loss(self, x, y):
            loss = super().compute_loss(x, y)
            return loss * float("nan") if self.steps_launched == 2 else loss

        def finish_step(self, launched):
            if launched.index == 2:  # step 3, with step 4 queued behind it
                seen["in_flight"] = self._in_flight
            out = super().finish_step(launched)
            if launched.index == 1:  # step 2 finished (step 3 is queued; its update was skipped)
                seen["weights"] = copy.deepcopy(self.model.state_dict())
                seen["state"] = copy.deepcopy(self.optimizer.state_dict())
            return out

    cfg = apply_train_overrides(train_preset("tiny", "mhar"), SMALL_RUN + [
        "device=cpu", "adamw=triton", "steps=8", "eval_every=100", "checkpoint_every=100"])
    t = NanAtThirdStep(cfg, tmp_path, progress=False)
    with pytest.raises(DivergenceError, match="loss is nan at step 3"):
        t.fit()
    assert seen["in_flight"] == 2 and t.step == 2 and t.steps_launched == 2
    assert all(torch.equal(a, b) for a, b in zip(seen["weights"].values(), t.model.state_dict().values()))
    now = t.optimizer.state_dict()
    for i, s in seen["state"]["state"].items():  # (its counts already had step 3's, on the kernel's path)
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(now["state"][i][key], s[key]), key
    assert all(float(s["step"]) == 2 for s in now["state"].values())


def test_fit_stops_with_a_step_in_flight(tmp_path):
    _check_fit_stops_with_a_step_in_flight(tmp_path)


@interp
def test_interp_fit_stops_with_a_step_in_flight(tmp_path):
    _check_fit_stops_with_a_step_in_flight(tmp_path)


@interp
def test_interp_trainer_with_the_kernel_follows_torch(tmp_path):
    _check_trainer_follows_torch(tmp_path, "cpu", "triton")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_trainer_auto_is_the_kernel_and_follows_torch(tmp_path):
    """On one CUDA process adamw=auto (the default) is the kernel, graphed and compiled
    as the trainer runs by default."""
    _check_trainer_follows_torch(tmp_path, "cuda", "auto")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("skip_grad,tensor_scale", [(None, False), (4, True)])
def test_cuda_kernel_matches_torch(skip_grad, tensor_scale):
    """The compiled kernel on a GPU, against torch's AdamW on the same device."""
    mine, ref = _params(device="cuda"), _params(device="cuda")
    a = _run(AK.TritonAdamW, mine, [1.0, 0.3, 0.05], KW, fold=True, skip_grad=skip_grad, tensor_scale=tensor_scale)
    b = _run(torch.optim.AdamW, ref, [1.0, 0.3, 0.05], dict(KW, foreach=False), fold=False, skip_grad=skip_grad)
    assert a._kernel_applies(mine), "the kernel would not run"
    _compare(mine, a, ref, b, 1e-6)


def test_cases_under_interpreter():
    if INNER:
        pytest.skip("already inside the interpreter run")
    run_interpreter_cases(HERE, "MHAR_ADAMW_INTERPRET_CASES")


@pytest.mark.parametrize("tensor_scale", [False, True])
def test_falls_back_to_torch_off_the_kernel(tensor_scale):
    """fp64 parameters (and, in this process, the CPU without the interpreter): torch's
    step on the scaled gradients, with the optimiser hooks run once."""
    calls = []
    handle = register_optimizer_step_pre_hook(lambda opt, args, kwargs: calls.append(1))
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])  # torch wraps AdamW's own step for its hooks
        mine, ref = _params(torch.float64), _params(torch.float64)
        a = _run(AK.TritonAdamW, mine, [1.0, 0.25], KW, fold=True, tensor_scale=tensor_scale)
        assert len(calls) == 2, calls
        b = _run(torch.optim.AdamW, ref, [1.0, 0.25], KW, fold=False)
    finally:
        handle.remove()
    _compare(mine, a, ref, b, 1e-12)


def test_fallback_scale_is_not_rounded_to_a_bf16_gradient():
    """A tensor scale in torch's fallback multiplies every gradient in fp32: in a group of
    bf16 and fp32 parameters the fp32 ones are not scaled by a bf16-rounded 0.3 (0.30078);
    and a step with no gradients at all is a no-op."""
    def run(opt_cls, fold):
        params = [torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16)), torch.nn.Parameter(torch.ones(4))]
        opt = opt_cls([{"params": params, "weight_decay": 0.0}], lr=1e-2, eps=1e-30)
        opt.step(grad_scale=torch.tensor(0.0)) if fold else opt.step()  # no gradients yet
        for p in params:
            p.grad = torch.full_like(p, 1e-3)
        if fold:
            opt.step(grad_scale=torch.tensor(0.3))
        else:
            torch._foreach_mul_([p.grad for p in params], 0.3)
            opt.step()
        return params, opt

    (mine, a), (ref, b) = run(AK.TritonAdamW, True), run(torch.optim.AdamW, False)
    torch.testing.assert_close(a.state[mine[1]]["exp_avg"], b.state[ref[1]]["exp_avg"], rtol=1e-7, atol=0)


def test_adamw_config_is_checked():
    from mhar.train import apply_train_overrides, train_preset

    with pytest.raises(ValueError, match="adamw='lion' is not one of auto, torch, triton"):
        apply_train_overrides(train_preset("tiny", "mhar"), ["adamw=lion"])
    with pytest.raises(ValueError, match="adamw=triton updates plain tensors; parallel=fsdp shards them"):
        apply_train_overrides(train_preset("tiny", "mhar"), ["adamw=triton", "parallel=fsdp"])
    apply_train_overrides(train_preset("tiny", "mhar"), ["adamw=triton", "parallel=ddp"])  # DDP's are plain


def test_auto_is_torch_on_the_cpu(tmp_path):
    """adamw=auto (the default) picks the kernel only on CUDA (one process or DDP)."""
    from mhar.train import Trainer, apply_train_overrides, train_preset

    cfg = apply_train_overrides(train_preset("tiny", "mhar"), ["device=cpu", "data.source=synthetic",
                                                                "data.vocab_size=64", "steps=1"])
    assert cfg.adamw == "auto"
    trainer = Trainer(cfg, tmp_path, progress=False)
    assert trainer.adamw == "torch" and type(trainer.optimizer) is torch.optim.AdamW
    assert trainer.summary()["adamw"] == "torch"  # the run's summary records what ran
