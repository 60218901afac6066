"""Where one training step spends its GPU time: torch.profiler over a few steps of
``mhar bench step``'s loop, the top kernels by total CUDA time, per method.

    PYTHONPATH=src python bench/profile_step.py --preset paper-100m --methods baseline,mhar --out $OUT

Writes ``<out>/profile_<preset>_<method>_<compile>[_eager][_ckpt].txt`` (the key-averages table, then
the kernel time per step by kind: matrix products, attention, routing, compiled regions,
loss, optimiser, the rest) as each method finishes, beside it ``.tsv`` (every kernel's
kind, launches and ms per step), ``_steps.tsv`` (each profiled step's kernel time by kind:
under the power cap the clock can drop within a step, and then every kind in it is
slower), ``_routing_launches.tsv`` (the routing kernels'
launches in order, as ``bench/routing.py`` records its own) and ``_product_launches.tsv``
(every matrix product's and attention kernel's launch in order, with the kernel before it
and the gap since it ended, to pair two methods' launches; a gap after a memset node is
the profiler's more than the step's: session 49 made cuBLAS's memsets kernels, the
profiled idle fell and the unprofiled replay did not), with ``--eager`` also
``_launchers.tsv`` (the kernels outside the products, attention and compiled regions by
the host op that launched them and its callers), and prints a summary last:
the graphed step time and the kernels by kind per method, and each kind's difference
from the first method's, in time and in launches (put the baseline first).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from torch.autograd import DeviceType

from mhar.bench_cli import PAPER_GLOBAL_BATCH, PAPER_MICROBATCH, build, fail_on_recompile_limit, time_step
from mhar.train.trainer import release_memory


# kernel name fragments per kind, first match wins (lower-cased names)
KINDS = [
    ("routing", ("_fwd_kernel", "_fwd_dot_kernel", "_bwd_kernel", "_coef_dot_kernel", "_bwd_gather_kernel",
                 "_finalize_", "_key_scales_kernel")),
    ("loss", ("_ce_",)),
    ("attention", ("sdpa", "flash", "fmha", "cudnn", "attention")),
    ("matmul", ("nvjet", "gemm", "cutlass", "xmma", "cublas")),
    ("optimizer", ("adam", "multi_tensor")),
    ("compiled", ("triton_",)),
    ("memset/copy", ("memset", "memcpy")),
]


def kind_of(kernel_name: str) -> str:
    name = kernel_name.lower()
    return next((k for k, frags in KINDS if any(f in name for f in frags)), "other")


def kernel_kinds(prof, steps: int, counts: dict[str, int] | None = None
                 ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Kernel time in ms per step by kind, from the profiler's device events, and per
    kind the time of each kernel name; ``counts`` (if given) gets each kind's and each
    name's launches over the ``steps``."""
    out = {k: 0.0 for k, _ in KINDS} | {"other": 0.0}
    names: dict[str, dict[str, float]] = {k: {} for k in out}
    counts = {} if counts is None else counts
    for e in prof.events():
        # device-side ranges of user annotations (e.g. "Optimizer.step#AdamW.step") span
        # kernels that are counted on their own: skip them
        if e.device_type != DeviceType.CUDA or getattr(e, "is_user_annotation", False) \
                or e.name.startswith("Optimizer."):
            continue
        kind = kind_of(e.name)
        ms = e.time_range.elapsed_us() / 1e3 / steps
        out[kind] += ms
        names[kind][e.name] = names[kind].get(e.name, 0.0) + ms
        for key in (kind, e.name):
            counts[key] = counts.get(key, 0) + 1
    out["total"] = sum(out.values())
    return out, names


def launchers(prof, steps: int, depth: int = 4) -> list[tuple[str, str, int, float]]:
    """For an eager profile: each kernel outside the matrix products, attention and
    compiled regions by the host op that launched it and that op's callers (``depth``
    levels, innermost first, with the launching op's input shapes): (kind, kernel,
    launches per step, ms per step), largest first."""
    rows: dict[tuple[str, str], list] = {}
    for e in prof.events():
        if e.device_type != DeviceType.CPU or not e.kernels:
            continue
        chain, p = [f"{e.name}{[s for s in e.input_shapes if s][:3]}"], e.cpu_parent
        while p is not None and len(chain) < depth:
            chain.append(p.name)
            p = p.cpu_parent
        for k in e.kernels:
            kind = kind_of(k.name)
            if kind in ("matmul", "attention", "compiled"):
                continue
            row = rows.setdefault((f"{kind}: {k.name[:90]}", " < ".join(chain)), [0, 0.0])
            row[0] += 1
            row[1] += k.duration / 1e3
    return sorted(((kn, ch, n / steps, ms / steps) for (kn, ch), (n, ms) in rows.items()), key=lambda r: -r[3])


def top_names(names: dict[str, dict[str, float]], per_kind: int = 6) -> str:
    lines = []
    for kind, by_name in names.items():
        for name, ms in sorted(by_name.items(), key=lambda kv: -kv[1])[:per_kind]:
            lines.append(f"  {kind:12s} {ms:8.2f} ms  {name[:160]}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="paper-100m")
    ap.add_argument("--methods", default="baseline,mhar")
    ap.add_argument("--compile", default="regions", choices=("regions", "full", "off"))
    ap.add_argument("--loss-chunk", type=int, default=4096)
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--batch", default=None,
                    help="microbatch in sequences, or global (the paper's global batch, as mhar bench step's "
                         "--batch global); default: the bench's (8 / 16 / 16 at 100M / 350M / 1B)")
    ap.add_argument("--accum", type=int, default=1, help="microbatches per update (mhar bench step's --accum)")
    ap.add_argument("--adamw", choices=("triton", "torch"), default="triton",
                    help="the optimiser phase, as mhar bench step's --adamw (its default on CUDA: triton; "
                         "profiles before session 16 ran torch's)")
    ap.add_argument("--trace-steps", type=int, default=2,
                    help="steps under the profiler after the timed ones (the .tsv files list every one, in order)")
    ap.add_argument("--rows", type=int, default=30)
    ap.add_argument("--eager", action="store_true", help="no CUDA graph (the profile then shows the host too)")
    ap.add_argument("--activation-checkpointing", action="store_true",
                    help="recompute every sublayer in backward (session 8: block MHAR's checkpointed step was "
                         "slower graphed than eager; this profiles either way)")
    ap.add_argument("--out", default="bench/results/profile")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batch, seq = PAPER_MICROBATCH[args.preset]
    if args.batch is not None:
        batch = PAPER_GLOBAL_BATCH[args.preset] if args.batch == "global" else int(args.batch)
    summary, kinds, launches = [], {}, {}
    for method in args.methods.split(","):
        release_memory()  # the previous model (compiled modules sit in reference cycles)
        model = build(args.preset, method, seq, [], args.chunk, "cuda")
        model.activation_checkpointing = args.activation_checkpointing
        # the timed steps graphed (the default on a GPU), then --trace-steps more under the profiler
        with fail_on_recompile_limit():  # never profile a region that fell back to uncompiled
            timed = time_step(model, batch, seq, steps=4, warmup=3, compile_mode=args.compile,
                              loss_chunk=args.loss_chunk, device="cuda", cuda_graphs=not args.eager,
                              trace_steps=args.trace_steps, accum=args.accum, adamw=args.adamw)
        prof = timed.pop("profiler")
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows, max_name_column_width=70)
        counts: dict[str, int] = {}
        kinds[method], names = kernel_kinds(prof, steps=args.trace_steps, counts=counts)
        launches[method] = {k: counts.get(k, 0) / args.trace_steps for k in kinds[method] if k != "total"}
        launches[method]["total"] = sum(launches[method].values())
        by_kind = "\n".join(f"  {k:12s} {ms:8.2f} ms" for k, ms in kinds[method].items())
        by_kind += "\n\nthe longest kernels of each kind (ms per step):\n" + top_names(names, 10)
        tags = ("_eager" if args.eager else "") + ("_ckpt" if args.activation_checkpointing else "") \
            + (f"_accum{args.accum}" if args.accum > 1 else "") + (f"_b{batch}" if args.batch is not None else "")
        path = out / f"profile_{args.preset}_{method}_{args.compile}{tags}.txt"
        how = ("" if args.eager else " graphed") + (", checkpointed" if args.activation_checkpointing else "")
        path.write_text(f"{method} {args.preset} compile={args.compile}: {timed['step_ms']:.1f} ms/step{how}, "
                        f"MFU {100 * timed['mfu']:.1f}%, peak {timed['peak_mem_gb']:.1f} GB\n\n{table}\n\n"
                        f"kernel time per profiled step by kind:\n{by_kind}\n")
        # the routing kernels' launches in order, for a comparison with bench/routing.py's
        launched = [(e.name, e.time_range.elapsed_us())
                    for e in sorted(prof.events(), key=lambda e: e.time_range.start)
                    if e.device_type == DeviceType.CUDA and any(f in e.name.lower() for f in KINDS[0][1])]
        path.with_name(path.stem + "_routing_launches.tsv").write_text(  # every profiled step, in order
            "name\tus\n" + "".join(f"{n}\t{us:.1f}\n" for n, us in launched))
        # every matrix product's and attention kernel's launch in order (every profiled step),
        # with the kernel before it and the idle gap since it ended: every method launches the
        # same products, though not in the same order in backward, so two methods' files pair
        # by kernel name and occurrence (bench/results/session47/7_products_350m/pair_products.py)
        device = [e for e in sorted(prof.events(), key=lambda e: e.time_range.start)
                  if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
                  and not e.name.startswith("Optimizer.")]
        # each profiled step's kernel time by kind: every step launches the same kernels, so the
        # k-th of trace_steps equal runs of launches is step k. A clock that drops under the power
        # cap during one step slows every kind in it (session 48: 350M's second profiled step)
        per_step = [collections.Counter() for _ in range(args.trace_steps)]
        for i, e in enumerate(device):
            per_step[i * args.trace_steps // len(device)][kind_of(e.name)] += e.time_range.elapsed_us() / 1e3
        names_of_kinds = [k for k, _ in KINDS] + ["other"]
        path.with_name(path.stem + "_steps.tsv").write_text(
            "step\t" + "\t".join(names_of_kinds) + "\ttotal\n" + "".join(
                f"{s}\t" + "\t".join(f"{c[k]:.3f}" for k in names_of_kinds) + f"\t{sum(c.values()):.3f}\n"
                for s, c in enumerate(per_step)))
        path.with_name(path.stem + "_product_launches.tsv").write_text(
            "kind\tus\tgap_us\tprev_kind\tprev\tname\n" + "".join(
                f"{kind_of(e.name)}\t{e.time_range.elapsed_us():.1f}\t{e.time_range.start - p.time_range.end:.1f}\t"
                f"{kind_of(p.name)}\t{p.name[:50]}\t{e.name[:70]}\n"
                for p, e in zip(device, device[1:]) if kind_of(e.name) in ("matmul", "attention")))
        # every kernel, for diffs between methods: kind, launches and ms per step, name
        rows = sorted(((k, n, ms) for k, by in names.items() for n, ms in by.items()), key=lambda r: -r[2])
        path.with_suffix(".tsv").write_text("kind\tlaunches_per_step\tms_per_step\tname\n" + "".join(
            f"{k}\t{counts[n] / args.trace_steps:g}\t{ms:.4f}\t{n}\n" for k, n, ms in rows))
        if args.eager:  # who launched each kernel outside the products, attention and compiled regions
            path.with_name(path.stem + "_launchers.tsv").write_text("kernel\tlaunched by\tlaunches_per_step\tms_per_step\n" + "".join(
                f"{k}\t{ch}\t{n:g}\t{ms:.4f}\n" for k, ch, n, ms in launchers(prof, steps=args.trace_steps)))
        summary.append(f"{args.preset} {method} compile={args.compile}: {timed['step_ms']:.1f} ms, "
                       f"MFU {100 * timed['mfu']:.1f}%, peak {timed['peak_mem_gb']:.1f} GB")
        print(summary[-1] + "\n" + top_names(names, 3) + "\nper profiled step (ms): " + ", ".join(
            f"{c['matmul']:.2f} products, {c['attention']:.2f} attention, {c['routing']:.2f} routing, "
            f"{sum(c.values()):.2f} all" for c in per_step), flush=True)
        del model
    print("\n".join(summary))
    first = next(iter(kinds))
    print(f"\nkernel ms per step by kind (difference from {first}):")
    print(f"{'kind':12s} " + " ".join(f"{m:>20s}" for m in kinds))
    for k in kinds[first]:
        print(f"{k:12s} " + " ".join(f"{v[k]:8.2f} ({v[k] - kinds[first][k]:+7.2f})" for v in kinds.values()))
    print(f"\nkernel launches per step by kind (difference from {first}):")
    for k in launches[first]:
        print(f"{k:12s} " + " ".join(f"{v[k]:8g} ({v[k] - launches[first][k]:+7g})" for v in launches.values()))


if __name__ == "__main__":
    main()
