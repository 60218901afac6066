"""LM head + cross-entropy: forward + backward per call, against the matmul floor (issue 6).

For each paper preset's d (V = 151,936, 16,384 tokens, bf16 hidden, fp32 head weight
under bf16 autocast, as the trainer runs it) times one call of ``loss`` then
``autograd.grad`` for the hidden states and the weight, and its peak extra memory:

* ``torch-plain``: ``F.cross_entropy`` on the full fp32 logits (unchunked);
* ``reference``: :class:`mhar.model.loss.ChunkedLinearCrossEntropy`, PyTorch backend;
* ``fused``: the same, Triton backend (mhar/model/ce_kernel.py), at a few chunk sizes;
* ``matmuls-only``: the fused path's three matmuls per chunk without the kernel
  (what the kernel adds on top of cuBLAS);
* ``liger``: liger-kernel's ``LigerFusedLinearCrossEntropyLoss`` if it imports.

The floor is 3 matmuls of 2*M*d*V FLOPs at the bf16 rate of an 8192^3 ``torch.mm``
timed in the same run. A sweep of the kernels' launches (BLOCK, num_warps) on one
(chunk x V) bf16 chunk reports their bandwidth (the one-pass kernel: a read and a write
of the chunk; the two-pass one, ``MHAR_CE_ONE_PASS=0``: 2 reads + 1 write).
Prints a Markdown table last and writes JSON to --out.

    PYTHONPATH=src python3 bench/loss_bench.py --out bench/results/loss_bench_h200.json
    PYTHONPATH=src python3 bench/loss_bench.py --device cpu --tiny   # smoke test, no GPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

PRESETS = ("paper-100m", "paper-350m", "paper-1b")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (smoke test; with --device cpu runs the "
                    "Triton kernel under TRITON_INTERPRET=1)")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--chunk", type=int, default=8192, help="chunk of the reference path (the trainer's loss_chunk)")
    ap.add_argument("--fused-chunks", default="4096,8192,16384", help="chunk sizes for the fused path")
    ap.add_argument("--z-loss", type=float, default=0.0)
    ap.add_argument("--methods", default="torch-plain,reference,fused,matmuls-only,liger")
    ap.add_argument("--no-sweep", action="store_true", help="skip the kernel launch sweep")
    ap.add_argument("--rep", type=int, default=200, help="do_bench rep (ms)")
    ap.add_argument("--out", default="bench/results/loss_bench.json")
    return ap.parse_args(argv)


ARGS = parse_args()
if ARGS.device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mhar.model import get_preset  # noqa: E402
from mhar.model import loss as L  # noqa: E402


def bench_ms(fn, device: str, rep: int) -> float:
    if device == "cuda":
        from triton.testing import do_bench
        return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))
    fn()  # CPU (smoke test): one warm call, one timed
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def peak_extra_gb(fn, device: str):
    """Peak memory one call allocates beyond what is live before it (outputs included)."""
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 1e9


def matmul_tflops(device: str, rep: int) -> float:
    n = 8192 if device == "cuda" else 256
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    ms = bench_ms(lambda: torch.mm(a, b), device, rep)
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


# ------------------------------------------------------------------ methods


def make_method(name: str, chunk: int, z_loss: float, device: str):
    """A function (h, w, t) -> loss, run under autocast by the caller; or a reason string."""
    if name == "torch-plain":
        def f(h, w, t):
            logits = F.linear(h, w).float()
            ce = F.cross_entropy(logits, t, ignore_index=-100)
            if z_loss:
                valid = t != -100
                ce = ce + z_loss * (torch.logsumexp(logits, -1).square() * valid).sum() / valid.sum().clamp(min=1)
            return ce
        return f
    if name in ("reference", "fused"):
        backend = "reference" if name == "reference" else "triton"

        def f(h, w, t):
            L.set_backend(backend)
            try:
                return L.linear_cross_entropy(h, w, t, chunk_size=chunk, z_loss=z_loss)
            finally:
                L.set_backend(None)
        return f
    if name == "liger":
        if device != "cuda":
            return "liger needs CUDA"
        try:
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
        except Exception as e:  # noqa: BLE001
            return f"liger-kernel not importable ({type(e).__name__}: {e})"
        kw = {"ignore_index": -100}
        if z_loss:
            kw["lse_square_scale"] = z_loss
        mod = LigerFusedLinearCrossEntropyLoss(**kw)

        def f(h, w, t):
            out = mod(w, h, t)
            if not isinstance(out, torch.Tensor):  # newer versions may return (loss, z_loss) or a dataclass
                out = out[0] if isinstance(out, (tuple, list)) else out.loss
            return out
        return f
    raise ValueError(f"unknown method {name!r}")


def matmuls_only(h, w, chunk: int):
    """The fused path's matmuls (logits, grad_hidden, fp32 grad_weight) without the kernel."""
    cdt = h.dtype
    wl = w.to(cdt)
    gh = torch.empty_like(h)
    gw = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
    acc = L._Accumulator(gw, cdt)
    buf = torch.empty(min(chunk, h.shape[0]), w.shape[0], dtype=cdt, device=h.device)
    for s in range(0, h.shape[0], chunk):
        e = min(s + chunk, h.shape[0])
        g = buf[:e - s]
        torch.mm(h[s:e], wl.t(), out=g)
        torch.mm(g, wl, out=gh[s:e])
        acc.add(g, h[s:e])
    return gh, gw


def fwd_bwd(fn, h, w, t, device):
    def call():
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = fn(h, w, t)
        return torch.autograd.grad(loss, (h, w))
    return call


# ------------------------------------------------------------------ kernel sweep


def kernel_sweep(rows: int, V: int, device: str, rep: int) -> list[dict]:
    """The kernel's launch settings on one chunk: columns per tile, warps, programs per SM
    looping over the rows (0: one program per row) and the second pass reversed (from
    each row's end: the tiles pass 1 read last, likeliest in L2 with few rows in flight)."""
    from mhar.model import ce_kernel
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(rows, V, device=device, dtype=dtype)
    t = torch.randint(0, V, (rows,), device=device)
    inv = torch.full((1,), 1.0 / rows, device=device)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 1
    # the one-pass kernel (cross_entropy_scaled_grad_, one program per row): (block, warps);
    # the two-pass kernel's best launch of sessions 16-28 beside it
    one_pass = [(8192, 8), (4096, 4), (2048, 2), (4096, 8), (2048, 4), (8192, 16)]
    two_pass = [(8192, 8, 0, True)]  # (block, warps, programs per SM, reverse)
    if device != "cuda":
        one_pass, two_pass = [(128, 4)], [(128, 4, 1, True)]
    configs = [dict(block=b, num_warps=w, kernel="one-pass") for b, w in one_pass]
    configs += [dict(block=b, num_warps=w, kernel="two-pass", programs_per_sm=n, reverse=r) for b, w, n, r in two_pass]
    out = []
    for cfg in configs:
        if cfg["kernel"] == "one-pass":
            def launch(cfg=cfg):
                ce_kernel.cross_entropy_scaled_grad_(x, t, inv, block=cfg["block"], num_warps=cfg["num_warps"])
        else:
            def launch(cfg=cfg):
                ce_kernel.cross_entropy_grad_(x, t, inv, block=cfg["block"], num_warps=cfg["num_warps"],
                                              programs=cfg["programs_per_sm"] * sms, reverse=cfg["reverse"])
        try:
            ms = bench_ms(launch, device, rep)
            # bytes the kernel must move: (one pass) a read and a write, or two reads and a write
            gbs = (2 if cfg["kernel"] == "one-pass" else 3) * x.numel() * x.element_size() / (ms * 1e-3) / 1e9
            out.append(dict(cfg, ms=ms, gbs=gbs))
        except Exception as e:  # noqa: BLE001
            out.append(dict(cfg, error=f"{type(e).__name__}: {str(e)[:200]}"))
        print(f"  kernel {cfg}: {out[-1]}", flush=True)
    return out


# ------------------------------------------------------------------ main


def main() -> None:
    args = ARGS
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device; use --device cpu --tiny for a smoke test")
    tokens, V = args.tokens, 151936
    dims = [(p, get_preset(p).d_model) for p in PRESETS]
    assert all(get_preset(p).vocab_size == V for p in PRESETS)
    fused_chunks = [int(c) for c in args.fused_chunks.split(",") if c]
    chunk = args.chunk
    if args.tiny:
        tokens, V, dims, chunk, fused_chunks = 50, 300, [("tiny-a", 16), ("tiny-b", 24)], 20, [20, 64]
    methods = [m for m in args.methods.split(",") if m]

    info = dict(device=torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
                torch=torch.__version__, python=platform.python_version(), tokens=tokens, V=V,
                chunk=chunk, z_loss=args.z_loss)
    try:
        import triton
        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        info["triton"] = None
    if device == "cuda":
        info["grad_weight_accumulation"] = L._accum_mode(torch.device("cuda"), torch.bfloat16)
    from mhar.model import ce_kernel
    info["kernel_default"] = dict(block=ce_kernel.BLOCK, num_warps=ce_kernel.NUM_WARPS)
    print(json.dumps(info), flush=True)

    tflops = matmul_tflops(device, args.rep)
    info["matmul_tflops_bf16"] = tflops
    print(f"bf16 matmul: {tflops:.3g} TFLOP/s", flush=True)

    sweep = []
    if not args.no_sweep:
        print(f"kernel sweep on a {chunk} x {V} chunk:", flush=True)
        sweep = kernel_sweep(chunk, V, device, args.rep)

    rows = []
    for preset, d in dims:
        g = torch.Generator(device=device).manual_seed(0)
        h = torch.randn(tokens, d, device=device, generator=g).to(torch.bfloat16).requires_grad_(True)
        w = (torch.randn(V, d, device=device, generator=g) * d ** -0.5).requires_grad_(True)
        t = torch.randint(0, V, (tokens,), device=device, generator=g)
        t[::1000] = -100
        floor_ms = 3 * 2 * tokens * d * V / (tflops * 1e12) * 1e3
        runs = []
        for m in methods:
            if m == "fused":
                runs += [(f"fused (chunk {c})", make_method("fused", c, args.z_loss, device)) for c in fused_chunks]
            elif m == "matmuls-only":
                runs.append((f"matmuls-only (chunk {chunk})",
                             lambda c=chunk: matmuls_only(h.detach(), w.detach().to(torch.bfloat16), c)))
            elif m == "reference":
                runs.append((f"reference (chunk {chunk})", make_method(m, chunk, args.z_loss, device)))
            else:
                runs.append((m, make_method(m, chunk, args.z_loss, device)))
        ref_loss = None
        for name, fn in runs:
            row = dict(preset=preset, d=d, method=name, floor_ms=floor_ms)
            if isinstance(fn, str):
                row["skipped"] = fn
                rows.append(row)
                print(f"{preset} {name}: skipped ({fn})", flush=True)
                continue
            call = fn if name.startswith("matmuls-only") else fwd_bwd(fn, h, w, t, device)
            try:
                if not name.startswith("matmuls-only"):
                    with torch.autocast(device, dtype=torch.bfloat16):
                        loss = fn(h, w, t).item()
                    row["loss"] = loss
                    if name.startswith("reference"):
                        ref_loss = loss
                row["peak_gb"] = peak_extra_gb(call, device)
                row["ms"] = bench_ms(call, device, args.rep)
                row["x_floor"] = row["ms"] / floor_ms
            except torch.cuda.OutOfMemoryError as e:
                row["skipped"] = f"OOM: {str(e)[:120]}"
            except Exception as e:  # noqa: BLE001
                row["skipped"] = f"{type(e).__name__}: {str(e)[:300]}"
            if device == "cuda":
                torch.cuda.empty_cache()
            rows.append(row)
            print(f"{preset} {name}: {row}", flush=True)
        for row in rows:
            if row["preset"] == preset and "loss" in row and ref_loss is not None:
                row["loss_diff_vs_reference"] = row["loss"] - ref_loss

    res = dict(info=info, kernel_sweep=sweep, results=rows)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1))
        print(f"wrote {out}", flush=True)

    print()
    print(f"LM head + CE, forward + backward, {tokens} tokens, V = {V}, bf16 autocast, "
          f"{info['device']}, torch {info['torch']}, triton {info['triton']}; floor = 3 x 2MdV FLOPs at "
          f"{tflops:.3g} TFLOP/s (measured torch.mm)"
          + (f"; grad_weight accumulation: {info['grad_weight_accumulation']}" if device == "cuda" else ""))
    print()
    if sweep:
        print("| kernel | BLOCK | num_warps | launch | ms | GB/s (the bytes it must move) |")
        print("|---|---:|---:|---|---:|---:|")
        for s in sweep:
            launch = ("one program per row" if s["kernel"] == "one-pass" else
                      f"{s['programs_per_sm']} programs per SM (0: one per row), reversed {s['reverse']}")
            head = f"| {s['kernel']} | {s['block']} | {s['num_warps']} | {launch} |"
            print(f"{head} {s['ms']:.3f} | {s['gbs']:.0f} |" if "ms" in s else f"{head} - | {s['error'][:60]} |")
        print()
    print("| preset | d | method | ms | x floor | floor ms | peak extra GB | loss - reference |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if "ms" not in r:
            print(f"| {r['preset']} | {r['d']} | {r['method']} | - | - | {r['floor_ms']:.2f} | - | "
                  f"{r.get('skipped', '')[:70]} |")
            continue
        pk = f"{r['peak_gb']:.2f}" if r.get("peak_gb") is not None else "-"
        dl = f"{r['loss_diff_vs_reference']:+.1e}" if "loss_diff_vs_reference" in r else ""
        print(f"| {r['preset']} | {r['d']} | {r['method']} | {r['ms']:.2f} | {r['x_floor']:.2f} | "
              f"{r['floor_ms']:.2f} | {pk} | {dl} |")


if __name__ == "__main__":
    main()
