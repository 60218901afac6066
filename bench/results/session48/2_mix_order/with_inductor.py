"""Run ``mhar`` with one of Inductor's mix-order-reduction settings changed (session 48
call 2). The RMSNorm backward's weight gradient is a column sum that Inductor fuses with
the row reduction ("mix-order reduction"): the fused kernel writes partial column sums
for blocks of split_size rows (16 at 16,384 tokens on 132 SMs: 1,024 partial rows), and
an eager ``aten.sum(dim=0)`` adds them, 97 launches and 0.82 ms of a 350M baseline step.

    python3 with_inductor.py SETTING -- mhar-args...   SETTING: default | off | split=N | autotune
"""
import sys

import torch._inductor.config as inductor_config

setting, rest = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
if setting == "off":
    inductor_config.triton.mix_order_reduction = False
elif setting.startswith("split="):
    inductor_config.triton.mix_order_reduction_split_size = int(setting.split("=")[1])
elif setting == "autotune":
    inductor_config.triton.mix_order_reduction_autotune_split_size = True
else:
    assert setting == "default", setting
from mhar.cli import main  # noqa: E402

sys.exit(main(rest))
