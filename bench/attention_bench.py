"""SDPA's backends at the paper's attention shapes: forward + backward per layer (issue 6).

The baseline's attention is ``F.scaled_dot_product_attention(q, k, v, is_causal=True,
enable_gqa=True)`` on (B, H, T, head_dim) views of (B, T, H, head_dim) projections
(mhar/model/layers.py), and torch picks the backend. This times each backend that
runs the call, one forward + backward of one layer's attention with the model's
micro-batch, as a CUDA graph replay (host time excluded), in one process:

* each of cuDNN, flash and memory-efficient attention with ``enable_gqa``;
* the same with K and V repeated to every query head first (the repeat's time included);
* ``auto``: torch's own pick, as the model calls it;
* ``flex``: FlexAttention (``torch.nn.attention.flex_attention``) with a causal block
  mask and ``enable_gqa``, compiled by inductor into Triton kernels (``flex-tuned``: the
  same with ``mode="max-autotune-no-cudagraphs"``, which times inductor's candidate
  block sizes first); each flex row also records its output's largest difference from
  SDPA's on the same inputs;
* ``fa4``: FlashAttention-4's CuTe kernels (the ``flash-attn-4`` package) through the
  decoder's own ops (``mhar.model.fa4``, ``attention_kernel="fa4"``), on the (B, T, H,
  head_dim) projections as they are, GQA built in, at every preset's head dim (the decoder
  takes FA4 only at ``fa4.HEAD_DIMS``); the row records the largest difference of its output
  and of its three gradients from SDPA's on the same inputs;
* with ``--bhsd``, cuDNN on contiguous (B, H, T, head_dim) inputs and output gradient
  instead of the model's transposed views (the layout the model would need its
  projections' rotary kernels to write).

The output's gradient has the layout the model gives it: a (B, H, T, head_dim) view of
a (B, T, H, head_dim) tensor (until session 49 it was contiguous (B, H, T, head_dim)).

It prints ms per layer and per step (x layers), and TFLOP/s on the causal FLOPs that
``mhar bench step`` counts (6 x T x heads x head_dim per token and layer, forward +
backward), then a Markdown table; JSON to --out.

    PYTHONPATH=src python3 bench/attention_bench.py --out bench/results/attention_h200.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from mhar.bench_cli import PAPER_MICROBATCH, PEAK_FLOPS
from mhar.model import get_preset
from mhar.provenance import source_commit

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def run_meta(**extra) -> dict:
    """What every result file of these scripts records: the command, device, versions,
    commit (``mhar.provenance``) and date, then ``extra``; printed as one JSON line."""
    meta = {"command": " ".join(["python3"] + sys.argv),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "torch": torch.__version__, "python": platform.python_version(),
            "commit": source_commit(), **extra,
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    print(json.dumps(meta), flush=True)
    return meta


def capture_graph(fn, warmup: int = 3, edit=None) -> torch.cuda.CUDAGraph:
    """``fn`` captured in a CUDA graph, after ``warmup`` calls on a side stream; ``edit``
    (if given) is called with the graph as captured, before it is instantiated."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph(keep_graph=True) if edit is not None else torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    if edit is not None:
        edit(g)
        g.instantiate()
    return g


def replay_times(g: torch.cuda.CUDAGraph, seconds: float = 0.0, min_reps: int = 20) -> list[float]:
    """ms of each replay of ``g``, one after another, for ``seconds`` and at least ``min_reps``."""
    times, t0 = [], time.time()
    while time.time() - t0 < seconds or len(times) < min_reps:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def graph_ms(fn, reps: int = 20) -> float:
    """Median ms of ``fn`` replayed from a CUDA graph (captured after a warm-up)."""
    times = sorted(replay_times(capture_graph(fn), min_reps=reps))
    return times[len(times) // 2]


def flex_attention_call(T: int, tuned: bool):
    """Causal GQA attention through FlexAttention, compiled (autotuned if ``tuned``)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, T, T, device="cuda")
    compiled = torch.compile(flex_attention, dynamic=False, mode="max-autotune-no-cudagraphs" if tuned else None)
    return lambda q, k, v: compiled(q, k, v, block_mask=mask, enable_gqa=True)


def case(preset: str, backend: str | None, repeat: bool, bhsd: bool = False):
    cfg = get_preset(preset, "baseline")
    B, T = PAPER_MICROBATCH[preset]
    H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.d_model // cfg.n_heads
    dev = "cuda"

    def tensor(heads):  # (B, T, heads, hd) seen as (B, heads, T, hd), as the model's attention does
        if bhsd:
            return torch.randn(B, heads, T, hd, device=dev, dtype=torch.bfloat16)
        return torch.randn(B, T, heads, hd, device=dev, dtype=torch.bfloat16).transpose(1, 2)

    if backend == "fa4":
        return fa4_case(B, T, H, KV, hd, cfg.n_layers)
    q, k, v = tensor(H).requires_grad_(), tensor(KV).requires_grad_(), tensor(KV).requires_grad_()
    gy = tensor(H)  # the gradient of out.transpose(1, 2).reshape(B, T, -1) in the model
    rep = H // KV
    flex = flex_attention_call(T, backend == "flex-tuned") if backend in ("flex", "flex-tuned") else None

    def step():
        kk, vv = (k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)) if repeat else (k, v)
        gqa = {} if repeat else {"enable_gqa": True}
        if flex is not None:
            out = flex(q, k, v)
        elif backend is None:
            out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, **gqa)
        else:
            with sdpa_kernel([BACKENDS[backend]]):
                out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, **gqa)
        torch.autograd.grad(out, (q, k, v), gy)

    flops = 6 * T * H * hd * B * T  # causal, forward + backward, one layer (bench_cli's count)

    def check():  # flex's largest difference from SDPA's output, bf16 both
        with torch.no_grad():
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return (flex(q, k, v).float() - ref.float()).abs().max().item()

    return step, flops, cfg.n_layers, check if flex is not None else None


def fa4_case(B: int, T: int, H: int, KV: int, hd: int, layers: int):
    """FA4 on contiguous (B, T, heads, hd) tensors, as the decoder calls it."""
    from mhar.model import fa4

    if not fa4._ready_on(torch.cuda.current_device()):  # any head dim: this is where they are checked
        raise RuntimeError("flash-attn-4 is not usable here")
    q, k, v = (torch.randn(B, T, h, hd, device="cuda", dtype=torch.bfloat16).requires_grad_() for h in (H, KV, KV))
    gy = torch.randn(B, T, H, hd, device="cuda", dtype=torch.bfloat16)

    def step():
        torch.autograd.grad(fa4.causal_attention(q, k, v), (q, k, v), gy)

    def check():  # largest differences from SDPA's output and gradients (bf16 both)
        out = fa4.causal_attention(q, k, v)
        got = (out, *torch.autograd.grad(out, (q, k, v), gy))
        t = [x.transpose(1, 2) for x in (q, k, v)]
        ref = F.scaled_dot_product_attention(*t, is_causal=True, enable_gqa=True)
        want = (ref.transpose(1, 2), *(g.transpose(1, 2) for g in torch.autograd.grad(ref, t, gy.transpose(1, 2))))
        return {name: (a.float() - b.float()).abs().max().item() for name, a, b in zip(("out", "dq", "dk", "dv"), got, want)}

    return step, 6 * T * H * hd * B * T, layers, check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="paper-100m,paper-350m,paper-1b")
    ap.add_argument("--backends", default="auto,cudnn,flash,efficient",
                    help="comma list of auto, cudnn, flash, efficient, flex, flex-tuned, fa4")
    ap.add_argument("--bhsd", action="store_true", help="also cuDNN on contiguous (B, H, T, head_dim) tensors")
    ap.add_argument("--out", default="bench/results/attention_h200.json")
    args = ap.parse_args()
    meta = run_meta(cudnn=torch.backends.cudnn.version())
    rows = []
    for preset in args.presets.split(","):
        cases = [(None if b == "auto" else b, repeat, False) for b in args.backends.split(",")
                 for repeat in (False, True) if not (repeat and (b in ("auto", "fa4") or b.startswith("flex")))]
        cases += [("cudnn", False, True)] if args.bhsd else []
        for backend, repeat, bhsd in cases:
            name = f"{backend or 'auto'}{', K/V repeated' if repeat else ''}{', BHSD' if bhsd else ''}"
            try:
                t0 = time.time()
                step, flops, layers, check = case(preset, backend, repeat, bhsd)
                ms = graph_ms(step)
                row = {"preset": preset, "backend": name, "ms_layer": ms, "ms_step": ms * layers,
                       "tflops": flops / ms / 1e9, "of_peak": flops / ms / 1e9 / (PEAK_FLOPS / 1e12),
                       "setup_s": round(time.time() - t0, 1)}
                if check is not None:
                    row["max_abs_diff_vs_sdpa"] = check()
            except Exception as e:  # a backend that does not take this call
                traceback.print_exc()
                row = {"preset": preset, "backend": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print("\n| preset | backend | ms per layer | ms per step | TFLOP/s (of peak) |\n|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['preset']} | {r['backend']} | {r['error']} | | |")
        else:
            print(f"| {r['preset']} | {r['backend']} | {r['ms_layer']:.3f} | {r['ms_step']:.1f} "
                  f"| {r['tflops']:.0f} ({100 * r['of_peak']:.0f}%) |")


if __name__ == "__main__":
    main()
