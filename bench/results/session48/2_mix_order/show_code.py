"""Which final reduction Inductor writes for an RMSNorm's backward at 16,384 x 512 tokens
under each mix-order setting (session 48 call 2): prints the generated lines that sum a
workspace, or says there are none."""
import torch
import torch._inductor.config as inductor_config
from torch._inductor.utils import run_and_get_code

from mhar.model.layers import RMSNorm


def final_sums(setting: str) -> list[str]:
    torch._dynamo.reset()
    with inductor_config.patch(**({"triton.mix_order_reduction": False} if setting == "off" else
                                  {"triton.mix_order_reduction_split_size": int(setting.split("=")[1])}
                                  if setting.startswith("split=") else {})):
        norm = RMSNorm(512).cuda()
        x = torch.randn(16384, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)

        def fwd_bwd(x):
            norm(x).float().square().sum().backward()

        _, codes = run_and_get_code(torch.compile(fwd_bwd), x)
    lines = [l.strip() for c in codes for l in c.splitlines() if ".sum(dim=0)" in l or "mix order" in l]
    return lines or ["(no workspace sum)"]


for s in ("default", "split=64", "split=128", "off"):
    print(s, *final_sums(s), sep="\n  ")
