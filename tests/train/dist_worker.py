"""Worker for tests/train/test_distributed.py, started by torchrun with two CPU
processes (gloo): ``python -m torch.distributed.run --nproc_per_node=2
dist_worker.py SPEC.json``. Runs every scenario of the spec in one process group
and writes each run's logged losses to ``OUT/<name>.json`` (rank 0)."""

import json
import os
import shutil
import sys
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_helpers import SMALL  # noqa: E402

import torch  # noqa: E402

from mhar.train import apply_train_overrides, train_preset  # noqa: E402
from mhar.train.distributed import DistributedTrainer, init_distributed, shutdown  # noqa: E402
from mhar.train.metrics import read_metrics  # noqa: E402


def config(method, overrides):
    return apply_train_overrides(train_preset("tiny", method), SMALL + list(overrides))


class EagerGraphedStep:
    """What GraphedStep replays, run eagerly, for the CPU: with ``flat_grads`` the first
    micro-batch zeroes the flat buffer and every backward adds into its views."""

    def __init__(self, loss_fn, params, x, y, scale=1.0, warmup=3, flat_grads=False):
        from mhar.train.graphs import _flat_gradients

        self.params = [p for p in params if p.requires_grad]
        self.loss_fn, self.scale = loss_fn, scale
        self.flat_grad = _flat_gradients(self.params) if flat_grads else None

    def run(self, x, y, accumulate=False):
        if not accumulate:
            if self.flat_grad is not None:
                self.flat_grad.zero_()
            else:
                for p in self.params:
                    p.grad = None
        loss = self.loss_fn(x, y)
        (loss * self.scale).backward()
        return loss.detach()


class GraphedDDPOnTheCPU(DistributedTrainer):
    """DDP's graphed path (no DDP wrapper, the flat gradients all-reduced after the step)
    with the graphs replaced by :class:`EagerGraphedStep`: the ranks' arithmetic, on gloo.
    Rank 1 builds other weights, which rank 0's broadcast must replace."""

    def build_model(self):
        model = super().build_model()
        if torch.distributed.get_rank() == 1:
            noise = torch.Generator().manual_seed(1)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn(p.shape, generator=noise, dtype=p.dtype))
        return model

    def wrap_model(self, module):
        import mhar.train.trainer as trainer_module

        trainer_module.GraphedStep = EagerGraphedStep
        self.use_graphs = True
        return super().wrap_model(module)


def main(spec_path):
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    info = init_distributed(spec.get("device", "cpu"))
    torch.set_num_threads(1)
    try:
        for sc in spec["scenarios"]:
            if "copy" in sc:  # resume a copy of an earlier run, without its newer checkpoints
                src, drop = sc["copy"]
                if info.rank == 0:
                    shutil.copytree(src, sc["run_dir"])
                    shutil.rmtree(Path(sc["run_dir"]) / drop)
                torch.distributed.barrier()
            cfg = config(sc["method"], sc["overrides"])
            cls = GraphedDDPOnTheCPU if sc.get("eager_graphs") else DistributedTrainer
            trainer = cls(cfg, sc["run_dir"], resume=sc.get("resume", False), quiet=True, progress=False)
            start = trainer.step
            trainer.fit()
            if info.rank == 0:
                rows = read_metrics(sc["run_dir"])
                result = {"start": start, "loss": [r["loss"] for r in rows],
                          "grad_norm": [r["grad_norm"] for r in rows],
                          "val": [r["val_loss"] for r in rows if "val_loss" in r],
                          "world_size": info.world_size, "parallel": trainer.parallel,
                          "cuda_graphs": trainer.use_graphs, "adamw": trainer.adamw,
                          "ddp_wrapper": trainer._ddp is not None,
                          # name -> is a DTensor; names whose local shard is smaller than the parameter
                          "params": {n: hasattr(p, "to_local") for n, p in trainer.model.named_parameters()},
                          "sharded": [n for n, p in trainer.model.named_parameters()
                                      if hasattr(p, "to_local") and p.to_local().numel() < p.numel()]}
                (out / f"{sc['name']}.json").write_text(json.dumps(result))
    except Exception:
        traceback.print_exc()
        (out / f"error_rank{info.rank}.txt").write_text(traceback.format_exc())
        raise
    finally:
        shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
