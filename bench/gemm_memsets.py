"""The memsets before a step's matrix products, and what they cost in a CUDA graph (issue 6).

In session 48's profiles of the graphed 350M baseline step, 344 of the 504 matrix
products a step ran right after a memset, with about 3 us idle between the memset and
the product (1.0 ms a step; 1.5 ms at 1B), against 0.4 us after a compiled region's
kernel. An eager profile (session 24) names ``aten::mm`` as what launches them: cuBLAS.

This replays one step's products of the decoder's linear layers, in the layouts the
step uses (``F.linear``'s forward, its input gradient ``dY @ W`` and its weight gradient
``dY.T @ X``, per layer with their own operands), from one CUDA graph, once per BLAS
choice (``torch.backends.cuda.preferred_blas_library``: 'cublas', 'cublaslt'), and
reports, per choice: the replay's ms (median), its products' kernel time, the memsets
and the idle time after them and in all; and which products get a memset. A choice
ending in '+kernels' makes the graph's small memsets kernel nodes first
(``bench/graph_memsets.py``) and checks that the products' outputs equal the plain
graph's; ``--alternate N`` then times the two graphs in turn without the profiler.
Settings read at start-up (``CUBLAS_WORKSPACE_CONFIG``, ``CUBLASLT_WORKSPACE_SIZE``)
need a process each: the JSON records the environment.

    PYTHONPATH=src python3 bench/gemm_memsets.py --preset paper-350m --out $OUT/memsets_350m.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os

import torch
from torch.autograd import DeviceType

import graph_memsets  # bench/ is on the path when a script of it runs
from attention_bench import capture_graph, replay_times, run_meta
from gemm_rate import step_products
from mhar.bench_cli import PAPER_MICROBATCH

ENV_KEYS = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "TORCH_BLAS_PREFER_CUBLASLT",
            "TORCH_CUBLASLT_UNIFIED_WORKSPACE")


def operands(kind: str, M: int, N: int, K: int, device="cuda"):
    """(a, b) with a @ b of shape (M, N), laid out as the step's product of that kind."""
    bf16 = dict(device=device, dtype=torch.bfloat16)
    if kind == "forward":  # x (M, K) @ W(N, K).T
        return torch.randn(M, K, **bf16), torch.randn(N, K, **bf16).t()
    if kind == "input grad":  # dY (M, K) @ W (K, N), W as stored (out, in)
        return torch.randn(M, K, **bf16), torch.randn(K, N, **bf16)
    # weight grad: dY (K, M).T @ X (K, N), K the tokens
    return torch.randn(K, M, **bf16).t(), torch.randn(K, N, **bf16)


def build(preset: str, loss_chunk: int, as_kernels: bool = False):
    """A graph of the step's products (every copy its own operands, the same for every
    call; outputs shared per shape, only written), the label of each launch in order, the
    operands and how many memsets became kernels."""
    torch.manual_seed(0)
    ops, labels = [], []
    for name, n, M, N, K in step_products(preset, loss_chunk):
        kind = next(k for k in ("forward", "input grad", "weight grad") if k in name)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        for _ in range(n):
            a, b = operands(kind, M, N, K)
            ops.append((a, b, c))
            labels.append(f"{name} {M}x{N}x{K}")

    def run():
        for a, b, c in ops:
            torch.mm(a, b, out=c)

    replaced = []  # how many memsets became kernels (bench/graph_memsets.py)
    edit = (lambda graph: replaced.append(graph_memsets.memsets_to_kernels(graph))) if as_kernels else None
    g = capture_graph(run, warmup=2, edit=edit)
    return g, labels, ops, sum(replaced)


def profile_replays(g: torch.cuda.CUDAGraph, reps: int, labels: list[str]) -> dict:
    """Kernels of ``reps`` replays: products, memsets (or the kernels that replaced them),
    the idle time before each kernel."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
    dev = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA
                  and not getattr(e, "is_user_annotation", False)), key=lambda e: e.time_range.start)
    out = collections.Counter()
    with_memset = collections.Counter()
    names = collections.Counter()
    product_i = 0

    def is_memset(name: str) -> bool:  # a memset node, or the kernel that replaced one
        return "memset" in name.lower() or "mhar_graph_fill" in name

    for i, e in enumerate(dev):
        memset = is_memset(e.name)
        us = e.time_range.elapsed_us()
        idle = e.time_range.start - dev[i - 1].time_range.end if i else 0.0
        if memset:
            out["memsets"] += 1
            out["memset_us"] += us
            out["idle_before_memsets_us"] += idle
        else:
            out["products"] += 1
            out["product_us"] += us
            names[e.name] += 1
            after_memset = i > 0 and is_memset(dev[i - 1].name)
            out["idle_before_products_us" + ("_after_memset" if after_memset else "")] += idle
            if "splitKreduce" in e.name:  # the second kernel of a split-K product
                continue
            if after_memset:
                with_memset[labels[product_i % len(labels)]] += 1
            product_i += 1
        out["kernel_us"] += us
        if i:
            out["idle_us"] += max(idle, 0.0)
    per = {k: v / reps for k, v in out.items()}
    per["products_with_memset"] = {k: v / reps for k, v in sorted(with_memset.items())}
    per["kernels_by_name"] = {k: v / reps for k, v in names.most_common()}
    return per


def alternate(preset: str, loss_chunk: int, rounds: int) -> dict:
    """Both graphs alive (their operands the same), timed in turn without a profiler: the
    rounds' medians per graph, and the median over the rounds."""
    torch.backends.cuda.preferred_blas_library("cublas")
    plain, _, ops_a, _ = build(preset, loss_chunk)
    edited, _, ops_b, _ = build(preset, loss_chunk, as_kernels=True)
    out = {"rounds": rounds, "plain": [], "kernels": []}
    for _ in range(rounds):
        for key, g in (("plain", plain), ("kernels", edited)):
            times = sorted(replay_times(g, min_reps=10))
            out[key].append(times[len(times) // 2])
    for key in ("plain", "kernels"):
        out[key + "_median"] = sorted(out[key])[rounds // 2]
    del plain, edited, ops_a, ops_b
    torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="paper-350m")
    ap.add_argument("--loss-chunk", type=int, default=4096, help="as mhar bench step's --loss-chunk")
    ap.add_argument("--blas", default="cublas,cublas+kernels,cublaslt",
                    help="comma list of preferred_blas_library choices; '+kernels': the graph's small memsets "
                         "made kernel nodes (bench/graph_memsets.py), its outputs checked against the plain graph's")
    ap.add_argument("--reps", type=int, default=30, help="timed replays per choice")
    ap.add_argument("--alternate", type=int, default=0,
                    help="then N rounds of 10 replays, the plain graph's and the '+kernels' one's in turn "
                         "(cublas; both graphs held, no profiler)")
    ap.add_argument("--out", default="bench/results/gemm_memsets.json")
    args = ap.parse_args()
    meta = run_meta(microbatch=PAPER_MICROBATCH[args.preset], env={k: os.environ[k] for k in ENV_KEYS if k in os.environ},
                    blas_at_start=str(torch.backends.cuda.preferred_blas_library()))
    rows, outputs = [], {}
    for choice in args.blas.split(","):
        blas, as_kernels = choice.removesuffix("+kernels"), choice.endswith("+kernels")
        torch.backends.cuda.preferred_blas_library(blas)
        g, labels, ops, replaced = build(args.preset, args.loss_chunk, as_kernels)
        times = sorted(replay_times(g, min_reps=args.reps))
        row = {"blas": choice, "replay_ms": times[len(times) // 2], "memsets_made_kernels": replaced}
        # every distinct output after a replay, to compare the graphs with and without kernels
        result = [c.clone() for c in {id(c): c for _, _, c in ops}.values()]
        if as_kernels and blas in outputs:
            row["outputs_equal_plain"] = all(torch.equal(a, b) for a, b in zip(result, outputs[blas]))
        elif not as_kernels:
            outputs[blas] = result
        row.update(profile_replays(g, 3, labels))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("products_with_memset", "kernels_by_name")}),
              flush=True)
        del g, ops, result
        torch.cuda.empty_cache()
    alternated = alternate(args.preset, args.loss_chunk, args.alternate) if args.alternate else None
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "preset": args.preset, "rows": rows, "alternated": alternated}, f, indent=1)
    env = ", ".join(f"{k}={v}" for k, v in meta["env"].items()) or "no BLAS environment set"
    print(f"\n{args.preset} ({env}), ms per replay of one step's products:\n"
          "| blas | replay | products' kernels | memsets (count, us) | idle after memsets | idle in all | "
          "memsets made kernels | outputs as the plain graph's |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['blas']} | {r['replay_ms']:.3f} | {r['product_us'] / 1e3:.3f} | {r.get('memsets', 0):.0f}, "
              f"{r.get('memset_us', 0):.0f} | {r.get('idle_before_products_us_after_memset', 0) / 1e3:.3f} | "
              f"{r.get('idle_us', 0) / 1e3:.3f} | {r['memsets_made_kernels']} | {r.get('outputs_equal_plain', '-')} |")
    if alternated:
        print(f"\nalternating rounds of 10 replays (median of each round, ms): plain "
              f"{alternated['plain_median']:.3f}, +kernels {alternated['kernels_median']:.3f} "
              f"({alternated['rounds']} rounds each)")


if __name__ == "__main__":
    main()
