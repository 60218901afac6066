"""One hyper-connection sublayer's stream glue on a GPU, forward + backward: the
library's reference ops (a contraction and broadcast ops), a pointwise form under
torch.compile, and the Triton kernels (``mhar/streams/hyper_kernels.py``), at the paper
widths, next to the bytes the glue must move.

Per sublayer (n = 4 streams of M x d): the mix reads X and writes the branch input and
the n mixed streams; the update reads those and the sublayer's output and writes the
new streams; backward moves about twice that, plus the reductions for alpha and beta.
About 46 stream-sized (M x d, bf16) passes in all. Each variant is timed eagerly (wall
time, CUDA events) and replayed from a CUDA graph (the kernels alone): with the Triton
kernels the eager figure is host-bound, about 1 ms at every width.

    PYTHONPATH=src python bench/hyper_mix.py
"""

from __future__ import annotations

import torch

from mhar.streams import hyper
from mhar.streams.base import autocast_dtype
from optimizer_bench import copy_gbs, timed

TOKENS, N = 16384, 4


def mix_pointwise(alpha, X):
    """The mix as broadcast products summed over the streams (tried under torch.compile
    in session 7: slower than the contraction)."""
    dtype = autocast_dtype(X)
    a = alpha.to(dtype).t().reshape(alpha.shape[1], alpha.shape[0], *([1] * (X.dim() - 1)))
    mix = (a * X.to(dtype).unsqueeze(0)).sum(1)
    return mix[0], mix[1:]


def sublayer(mix, update, alpha, beta, X, G):
    # autocast's weight-cast cache off: the call is also captured into a CUDA graph
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        x, mixed = mix(alpha, X)
        out = x * 1.0  # stands for the sublayer
        new = update(mixed, beta, out)
    return torch.autograd.grad(new, [X, alpha, beta], G)


def main() -> None:
    bw = copy_gbs()
    print(f"device-to-device copy: {bw:.0f} GB/s")
    variants = {"reference: contraction (einsum), eager": (hyper._mix_reference, hyper._update_reference, None),
                "pointwise under torch.compile": (torch.compile(mix_pointwise), torch.compile(hyper._update_reference),
                                                  None)}
    # the Triton kernels at the library's (BLOCK, warps) and other choices
    library = (hyper._BLOCK, hyper._WARPS)
    for tile in dict.fromkeys([library, (256, 4), (1024, 4), (2048, 4), (2048, 8), (4096, 8)]):
        mark = " (the library's)" if tile == library else ""
        variants[f"Triton kernels, BLOCK {tile[0]}, {tile[1]} warps{mark}"] = (hyper._mix_triton, hyper._update_triton, tile)
    rows = []
    for d in (512, 1024, 1280):
        X = torch.randn(N, TOKENS, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        alpha = torch.randn(N, N + 1, device="cuda", requires_grad=True)
        beta = torch.randn(N, device="cuda", requires_grad=True)
        G = torch.randn_like(X)
        floor = 46 * TOKENS * d * 2 / bw / 1e6
        for name, (mix, update, tile) in variants.items():
            hyper._BLOCK, hyper._WARPS = tile or library
            call = lambda: sublayer(mix, update, alpha, beta, X, G)  # noqa: E731
            ms = timed(call, reps=20, warmup=5)
            replayed = replay_ms(call)
            rows.append((d, name, ms, replayed, floor))
            print(f"d={d:5d} {name:40s} {ms:7.3f} ms per sublayer, replayed {replayed}, floor {floor:.3f} ms",
                  flush=True)
    hyper._BLOCK, hyper._WARPS = library
    print("\n| d | glue | fwd+bwd ms per sublayer, eager | replayed from a CUDA graph | byte floor ms |\n"
          "|---|---|---|---|---|")
    for d, name, ms, replayed, floor in rows:
        print(f"| {d} | {name} | {ms:.3f} | {replayed} | {floor:.3f} |")


def replay_ms(call) -> str:
    """Median ms of ``call`` replayed from a CUDA graph: the kernels alone, without the
    host's launch and autograd time that bounds the eager figure once the kernels are fast."""
    import triton.testing as tt
    try:
        return f"{tt.do_bench_cudagraph(call, rep=100, return_mode='median'):.3f}"
    except Exception as e:  # a variant that cannot be captured: say so in its row
        return f"failed ({type(e).__name__})"


if __name__ == "__main__":
    main()
