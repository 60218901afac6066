"""bench/multi_gpu.py with the update's checks on the host, as before session 61's
_fused_update: fit reads each step's loss and norm before it queues the next step
(Trainer.checks_on_device is False). Same arguments. It ran at 933c9a0; the device
checks it switches off were reverted after this call, so it runs only at that commit."""
import runpy
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(root / "src"))
from mhar.train.trainer import Trainer  # noqa: E402

Trainer.checks_on_device = lambda self: False
sys.argv = [str(root / "bench" / "multi_gpu.py"), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
