"""DDP and FSDP2 on two CUDA GPUs (NCCL, fused Triton routing), skipped without
them: fp32 runs follow the single-GPU loss sequence with the same global batch
(cuBLAS may pick other kernels for another batch size, hence 1e-4), and bf16 runs
(FSDP2 mixed precision) stay close to the single-GPU bf16 run."""

import json
import os
import subprocess

import pytest
import torch

from train_helpers import PYTHON, SMALL, subprocess_env

from mhar.train import Trainer, apply_train_overrides, train_preset
from mhar.train.metrics import read_metrics

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]

WORKER = os.path.join(os.path.dirname(__file__), "dist_worker.py")
RUN = ["steps=4", "grad_accum=2", "eval_every=2", "checkpoint_every=2", "device=cuda", "stream.schedule=two-phase",
       "stream.chunk=2"]


def _losses(run_dir):
    return [r["loss"] for r in read_metrics(run_dir)]


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-4), ("bfloat16", 2e-2)])
def test_two_gpus_follow_one_gpu(tmp_path, dtype, rtol):
    extra = RUN + [f"dtype={dtype}"]
    cfg = apply_train_overrides(train_preset("tiny", "mhar"), SMALL + extra + ["batch_size=4"])
    Trainer(cfg, tmp_path / "one", progress=False).fit()
    ref = _losses(tmp_path / "one")
    scenarios = [dict(name=mode, method="mhar", run_dir=str(tmp_path / mode), overrides=extra + [f"parallel={mode}"])
                 for mode in ("ddp", "fsdp")]
    # DDP's graphed step: no DDP wrapper, the flat gradients all-reduced after the step
    scenarios.append(dict(name="ddp_graphs", method="mhar", run_dir=str(tmp_path / "ddp_graphs"),
                          overrides=extra + ["parallel=ddp", "cuda_graphs=on"]))
    (tmp_path / "out").mkdir()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"out": str(tmp_path / "out"), "device": "cuda", "scenarios": scenarios}))
    env = dict(subprocess_env(), NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    proc = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", WORKER,
                           str(spec)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-8000:]
    assert json.loads((tmp_path / "out" / "ddp_graphs.json").read_text())["cuda_graphs"]
    for mode in ("ddp", "fsdp", "ddp_graphs"):
        got = json.loads((tmp_path / "out" / f"{mode}.json").read_text())["loss"]
        assert len(got) == len(ref)
        for a, b in zip(got, ref):
            assert abs(a - b) <= rtol * abs(b), (mode, got, ref)
