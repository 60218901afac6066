"""Session 69: one paper-1b layer's attention (16 x 1024, 16 query and 8 key heads of 80 lanes),
forward + backward from a CUDA graph, on FA4 with the heads padded to 96 lanes and to 128,
against cuDNN (SDPA, torch's pick) in the same process; each FA4 row's largest differences from
SDPA's output and gradients. Run from the repository root with FA4's site on the path, at
f026710: it sets fa4.HEAD_DIMS for that tree's padding (kernel_head_dim), reverted at 97941f6."""
import json
import sys

sys.path.insert(0, "bench")
import attention_bench as ab  # noqa: E402

from mhar.model import fa4  # noqa: E402

B, T, H, KV, hd, layers = 16, 1024, 16, 8, 80, 36
rows = []
step, flops, _, _ = ab.case("paper-1b", None, False)
rows.append({"kernel": "cuDNN (auto)", "ms_layer": ab.graph_ms(step)})
print(json.dumps(rows[-1]), flush=True)
for width in (96, 128, 96):
    fa4.HEAD_DIMS = (64, width)  # kernel_head_dim pads 80 up to `width`
    step, _, _, check = ab.fa4_case(B, T, H, KV, hd, layers)
    rows.append({"kernel": f"FA4 at {width}", "ms_layer": ab.graph_ms(step), "diff": check()})
    print(json.dumps(rows[-1]), flush=True)
step, _, _, _ = ab.case("paper-1b", None, False)
rows.append({"kernel": "cuDNN (auto), again", "ms_layer": ab.graph_ms(step)})
print(json.dumps(rows[-1]), flush=True)
print("| kernel | ms per layer | x cuDNN | largest differences (out, dq, dk, dv) |\n|---|---|---|---|")
for r in rows:
    d = r.get("diff")
    print(f"| {r['kernel']} | {r['ms_layer']:.3f} | {r['ms_layer'] / rows[0]['ms_layer']:.2f} | "
          f"{', '.join(f'{x:.4f}' for x in d.values()) if d else '-'} |")
