"""bench/multi_gpu.py with FSDP2's AdamW as before session 61: torch's default (foreach)
step on the sharded DTensors instead of the fused kernel. Same arguments."""
import runpy
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(root / "src"))
import mhar.train.trainer as trainer_module  # noqa: E402

built = trainer_module.build_optimizer


def foreach_for_dtensors(model, *args, **kwargs):
    opt = built(model, *args, **kwargs)
    if any(type(p.data) is not __import__("torch").Tensor for p in model.parameters()):
        for group in opt.param_groups:
            group["fused"] = None  # the default: foreach
    return opt


trainer_module.build_optimizer = foreach_for_dtensors
sys.argv = [str(root / "bench" / "multi_gpu.py"), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
