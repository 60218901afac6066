"""Where a method's peak training memory comes from, phase by phase, on one GPU.

For each method, after warmup steps (so the optimizer state exists), one training step
as `mhar bench step` runs it (bf16 autocast, regional compile, chunked loss, fused
AdamW), with the CUDA allocator read at each phase boundary:

- static: allocated before the step (weights, optimizer state);
- saved: bytes of the distinct storages autograd saved in forward (activations),
  counted through saved-tensor hooks, by shape (the largest groups are listed);
- after forward: allocated once the loss exists; peak forward;
- peak backward, peak optimizer step.

    PYTHONPATH=src python bench/memory_probe.py --preset paper-350m --methods baseline,mhar,mhar-block
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch

from mhar.bench_cli import PAPER_MICROBATCH, build, microbatch
from mhar.model.loss import linear_cross_entropy
from mhar.train.trainer import release_memory

GB = 1e9


def probe(preset: str, method: str, warmup: int, batch: int) -> dict:
    seq_len = PAPER_MICROBATCH[preset][1]
    model = build(preset, method, seq_len, [], 8, "cuda")
    model.compile_regions()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    vocab = model.config.vocab_size
    x = torch.randint(0, vocab, (batch, seq_len + 1), device="cuda")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[tuple[int, int], tuple] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params and t.is_cuda:
            saved.setdefault((st.data_ptr(), st.nbytes()), (tuple(t.shape), str(t.dtype).replace("torch.", "")))
        return t

    def forward():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model.hidden_states(x[:, :-1]).flatten(0, 1)
            return linear_cross_entropy(h, model.output_weight, x[:, 1:].flatten())  # bench step's default chunk

    for _ in range(warmup):
        forward().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    r = {"method": method, "batch": batch, "seq_len": seq_len, "static_gb": torch.cuda.memory_allocated() / GB}
    torch.cuda.reset_peak_memory_stats()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = forward()
    except Exception as e:  # compiled regions that refuse the hooks: count nothing
        print(f"  saved-tensor hooks failed ({type(e).__name__}); forward without them", flush=True)
        saved.clear()
        torch.cuda.reset_peak_memory_stats()
        loss = forward()
    torch.cuda.synchronize()
    r["after_forward_gb"] = torch.cuda.memory_allocated() / GB
    r["peak_forward_gb"] = torch.cuda.max_memory_allocated() / GB
    r["saved_gb"] = sum(nb for _, nb in saved) / GB
    groups = Counter()
    for (_, nb), (shape, dtype) in saved.items():
        groups[(shape, dtype, nb)] += 1
    r["saved_top"] = [f"{n} x {shape} {dtype} ({n * nb / GB:.2f} GB)"
                      for (shape, dtype, nb), n in sorted(groups.items(), key=lambda kv: -kv[0][2] * kv[1])[:6]]
    saved.clear()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    r["peak_backward_gb"] = torch.cuda.max_memory_allocated() / GB
    torch.cuda.reset_peak_memory_stats()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    r["peak_optimizer_gb"] = torch.cuda.max_memory_allocated() / GB
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="paper-350m", choices=sorted(PAPER_MICROBATCH))
    ap.add_argument("--methods", default="baseline,attnres,mhar,mhar-block")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", default="", help="as `mhar bench step --batch` (global: the trainer presets')")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rows = []
    for m in args.methods.split(","):
        release_memory()  # the previous model (compiled modules sit in reference cycles)
        rows.append(probe(args.preset, m, args.warmup, microbatch(args.preset, args.batch)))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"preset": args.preset, "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    shape = f"{rows[0]['batch']} x {rows[0]['seq_len']}"
    print(f"| {args.preset} ({shape}) | static GB | saved GB | after fwd GB | peak fwd | peak bwd | peak opt |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['static_gb']:.2f} | {r['saved_gb']:.2f} | {r['after_forward_gb']:.2f} | "
              f"{r['peak_forward_gb']:.2f} | {r['peak_backward_gb']:.2f} | {r['peak_optimizer_gb']:.2f} |")
    for r in rows:
        print(r["method"], "saved:", "; ".join(r["saved_top"]))


if __name__ == "__main__":
    main()
