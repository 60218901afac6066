# live gradient sums through a routed model's backward (8 sublayers, chunks of 4), one-pass against
# two-phase, under the Triton interpreter on the CPU (session 46). From the repository root:
#   python bench/results/session46/offline/onepass_sums.py   (output: onepass_sums.txt beside it)
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "tests/routing"); sys.path.insert(0, "src")
import torch
from mhar import routing
from mhar.routing import op as rop
from mhar.model import Decoder, ModelConfig
from mhar.model.config import method_stream
from mhar.streams import base
routing.set_backend("triton")
live = []
class Tracked(list):
    def __setitem__(self, i, v):
        super().__setitem__(i, v); live.append(sum(b is not None for b in self))
class TrackingSink(routing.GradientSink):
    def __init__(self):
        super().__init__(); self.buffers = Tracked()
base.routing.GradientSink = TrackingSink
d = 32
for schedule in ("one-pass", "two-phase"):
    live.clear()
    stream = method_stream("mhar", 8, d, heads=8, schedule=schedule, chunk=4)
    torch.manual_seed(0)
    m = Decoder(ModelConfig(vocab_size=64, d_model=d, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=2 * d,
                            max_seq_len=64, stream=stream))
    ids = torch.randint(0, 64, (2, 33))
    m.loss(ids[:, :-1], ids[:, 1:]).backward()
    print(schedule, "peak live sums", max(live) if live else None, "sequence", live[:12])
