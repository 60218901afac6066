"""``activation_checkpointing=true`` in the trainer: every sublayer is recomputed in
backward, and training follows the run without it (same losses and gradient norms);
``cuda_graphs=auto`` resolves to off with it (on a GPU), and ``cuda_graphs=on`` with it
follows the eager checkpointed run (on a GPU)."""

import math

import pytest
import torch

from train_helpers import SMALL, method_and_overrides

from mhar.train import Trainer, apply_train_overrides, train_preset
from mhar.train.metrics import read_metrics


@pytest.mark.parametrize("name", ["baseline", "mhar", "mhar-block", "mhar-block:3", "hyper"])
def test_activation_checkpointing_follows_the_plain_run(tmp_path, name):
    method, block = method_and_overrides(name)
    logs = {}
    for on in (False, True):
        cfg = apply_train_overrides(train_preset("tiny", method), block +
                                    # on the CPU everywhere: on a GPU the plain run would be
                                    # graphed and the checkpointed one not (cuda_graphs=auto), and
                                    # bf16 kernels differ between the two beyond this tolerance
                                    SMALL + ["steps=4", "eval_every=4", "checkpoint_every=4", "device=cpu",
                                             f"activation_checkpointing={str(on).lower()}"])
        trainer = Trainer(cfg, tmp_path / str(on), progress=False)
        assert trainer.model.activation_checkpointing is on
        # training calls of one sublayer (a pre-hook: the recompute stops early, once it has
        # what backward needs, so a forward hook may not run; evaluation runs without grad)
        calls = []
        trainer.model.sublayers[0].register_forward_pre_hook(
            lambda m, _: calls.append(1) if m.training and torch.is_grad_enabled() else None)
        trainer.fit()
        assert len(calls) == 4 * (2 if on else 1)
        logs[on] = read_metrics(tmp_path / str(on))
    assert len(logs[True]) == 4
    for a, b in zip(logs[True], logs[False]):
        assert math.isclose(a["loss"], b["loss"], rel_tol=1e-5), (a, b)
        assert math.isclose(a["grad_norm"], b["grad_norm"], rel_tol=1e-4), (a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (graphs are off on the CPU anyway)")
@pytest.mark.cuda
def test_graphs_auto_stays_on_with_activation_checkpointing(tmp_path):
    # graphed checkpointed steps measured faster than eager ones (session 9)
    runs = {}
    for on in (False, True):
        cfg = apply_train_overrides(train_preset("tiny", "baseline"),
                                    SMALL + [f"activation_checkpointing={str(on).lower()}", "device=cuda"])
        runs[on] = Trainer(cfg, tmp_path / str(on), progress=False).use_graphs
    assert runs == {False: True, True: True}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.cuda
@pytest.mark.parametrize("name", ["baseline", "mhar-block", "mhar-block:3"])
def test_activation_checkpointing_under_cuda_graphs_follows_eager(tmp_path, name):
    """The recompute is captured with the rest of backward: a graphed checkpointed run
    (compiled regions, gradient accumulation) gives the eager checkpointed run's losses."""
    method, block = method_and_overrides(name)
    losses = {}
    for graphs in ("off", "on"):
        cfg = apply_train_overrides(train_preset("tiny", method), block +
                                    SMALL + ["steps=4", "grad_accum=2", "eval_every=4", "checkpoint_every=4",
                                             "device=cuda", "compile=regions", "activation_checkpointing=true",
                                             f"cuda_graphs={graphs}"])
        trainer = Trainer(cfg, tmp_path / graphs, progress=False)
        assert trainer.use_graphs is (graphs == "on")
        trainer.fit()
        losses[graphs] = [r["loss"] for r in read_metrics(tmp_path / graphs)]
    assert len(losses["on"]) == 4
    for a, b in zip(losses["on"], losses["off"]):
        assert abs(a - b) <= 2e-3 * abs(b), losses


def test_a_trainer_compiles_within_its_own_budget(tmp_path):
    """torch.compile keeps 8 variants per function and runs it uncompiled past that.
    Variants compiled for earlier models in the process (here: sublayers run under enough
    autocast and grad states to spend the budget) must not count against a new Trainer's:
    past the budget a checkpointed sublayer can run compiled in forward and uncompiled in
    its recompute, which saves a different number of tensors (seen on the H200 when many
    trainers ran in one test process)."""
    from mhar.bench_cli import fail_on_recompile_limit
    from mhar.model import Decoder

    cfg = apply_train_overrides(train_preset("tiny", "mhar-block"),
                                SMALL + ["steps=2", "eval_every=2", "checkpoint_every=2", "device=cpu",
                                         "compile=regions", "activation_checkpointing=true", "dtype=bfloat16"])
    torch._dynamo.reset()
    model = Decoder(cfg.model)
    model.compile_regions()
    x = torch.randint(0, 64, (2, 16))
    for dtype in (torch.bfloat16, torch.float16):
        for cache in (True, False):
            for grad in (True, False):
                with torch.autocast("cpu", dtype=dtype, cache_enabled=cache), torch.set_grad_enabled(grad):
                    model.hidden_states(x)
    with fail_on_recompile_limit():
        with pytest.raises(Exception, match="recompile_limit|cache_size_limit"):  # the budget is spent
            with torch.autocast("cpu", dtype=torch.float16), torch.no_grad():
                model.hidden_states(x[:, :8])
        Trainer(cfg, tmp_path, progress=False).fit()  # raises if a function runs out of variants
    torch._dynamo.reset()
