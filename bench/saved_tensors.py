"""Bytes autograd keeps for backward, per method, on the CPU: a quick check of activation
memory without a GPU (a view keeps its whole base alive, so storages are counted, each
once, at their full size).

A small model (the paper-100m preset narrowed to d = 256, 6 layers, vocabulary 1000),
256 tokens, bf16 autocast, the decoder's regions compiled as the trainer compiles them
on a GPU. Session 7 used it for the hyper-connection stream's saved views
(bench/results/step_h200.md).

    PYTHONPATH=src python bench/saved_tensors.py --methods baseline,hyper,mhar

The hyper-connection stream's Triton glue runs on the CPU through Triton's interpreter:

    TRITON_INTERPRET=1 MHAR_HYPER_BACKEND=triton PYTHONPATH=src python bench/saved_tensors.py \
        --methods hyper --eager --override stream.hyper_recompute=4
"""

from __future__ import annotations

import argparse

import torch

from mhar.bench_cli import build

SMALL = ["d_model=256", "n_layers=6", "n_heads=4", "n_kv_heads=2", "d_ff=512", "vocab_size=1000"]


def saved_mb(method: str, tokens: int, compile_regions: bool, overrides: list[str] = ()) -> float:
    model = build("paper-100m", method, tokens, SMALL + list(overrides), 8, "cpu")
    if compile_regions:
        model.compile_regions()
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    ids = torch.randint(0, 1000, (1, tokens))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model.hidden_states(ids)
    return sum(storages.values()) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", default="baseline,hyper,attnres,mhar,mhar-block")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--eager", action="store_true", help="no regional compile")
    ap.add_argument("--override", action="append", default=[],
                    help="a model override for every method, e.g. stream.hyper_recompute=4 (repeatable)")
    args = ap.parse_args()
    for method in args.methods.split(","):
        mb = saved_mb(method, args.tokens, not args.eager, args.override)
        print(f"{method:24s} {mb:7.1f} MB saved for backward", flush=True)


if __name__ == "__main__":
    main()
