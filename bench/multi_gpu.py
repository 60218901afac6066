"""Multi-GPU scaling of the trainer: tokens/s of ``mhar train``'s own steps (the
Trainer / DistributedTrainer ``fit``: forward, backward, gradient sync, clipping,
AdamW, with the trainer's defaults unless overridden) on one GPU and on N GPUs under
torchrun, for one method.

One process (plain Trainer, no process group)::

    python bench/multi_gpu.py --method mhar --parallel none --json out/mhar_1.json

N GPUs (DDP or FSDP2)::

    torchrun --standalone --nproc_per_node=2 bench/multi_gpu.py --method mhar --parallel ddp \
        --json out/mhar_ddp2.json

Each GPU runs the same micro-batch (``--batch`` x ``--seq``, the paper's 350M
micro-batch 16 x 1024 by default), so N GPUs with DDP/FSDP2 should give close to N
times the tokens/s. Random tokens (the trainer's synthetic source with the full
Qwen3 vocabulary). ``--warmup`` steps are not timed (kernel tuning, allocator);
tokens/s = global tokens per step / median step time. Rank 0 writes the JSON.

Everything in one job (processes start once)::

    torchrun --standalone --nproc_per_node=2 bench/multi_gpu.py --suite out --methods baseline,mhar \
        --modes none,ddp,fsdp

``python bench/multi_gpu.py --table out/*.json`` prints the Markdown table of a
set of results (speed-up of each N-GPU run over the 1-GPU run of its method).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def measure(args, method: str, parallel: str) -> dict | None:
    """Time ``args.warmup + args.steps`` trainer steps; the result on rank 0 (None elsewhere).
    ``--loop fit`` (the default) runs ``Trainer.fit`` and takes its own step times (so a
    step may be queued before the last one's loss is read, as in ``mhar train``), with no
    checkpoint and one small evaluation at the end, after the timed steps and one untimed
    step; ``--loop step`` calls ``train_step`` one at a time, synchronising around each."""
    import torch

    from mhar.provenance import source_commit
    from mhar.train import apply_train_overrides, train_preset
    from mhar.train.metrics import read_metrics
    from mhar.train.trainer import Trainer, release_memory

    total = args.warmup + args.steps
    # fit runs one step more, untimed: with a step queued ahead, the last step's time is only
    # what was left of it when the step before it finished
    runs = total + (args.loop == "fit")
    over = [f"batch_size={args.batch}", f"seq_len={args.seq}", f"grad_accum={args.accum}", "data.source=synthetic",
            f"data.vocab_size={args.vocab}", "data.val_windows=2", f"steps={runs}", f"eval_every={runs}",
            f"checkpoint_every={runs}", f"compile={args.compile}", f"parallel={parallel}", f"device={args.device}",
            "warmup=2"]
    if method != "baseline":  # the fused kernels' chunked two-phase schedule, as `mhar bench step`
        over += ["stream.schedule=two-phase", f"stream.chunk={args.chunk}"]
    cfg = apply_train_overrides(train_preset(args.preset, method), over + args.overrides)

    run_dir = Path(tempfile.mkdtemp(prefix="mhar-bench-"))
    if parallel == "none":
        trainer = Trainer(cfg, run_dir, quiet=True, progress=False)
        rank, world = 0, 1
    else:
        from mhar.train.distributed import DistributedTrainer, broadcast_object, init_distributed

        info = init_distributed(args.device)
        rank, world = info.rank, info.world_size
        run_dir = Path(broadcast_object(str(run_dir)))
        trainer = DistributedTrainer(cfg, run_dir, quiet=True, progress=False)
    dev = trainer.device
    cuda = dev.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    tag = f"[{method} {parallel} x{world}]"
    if args.loop == "fit":
        trainer.save_checkpoint = lambda: None  # a timing run: nothing to resume
        trainer.fit()
        times = trainer.step_seconds[args.warmup:total]
        losses = [r["loss"] for r in read_metrics(run_dir)] if rank == 0 else []
    else:
        times, losses = [], []
        for i in range(total):
            sync()
            t0 = time.perf_counter()
            loss, grad_norm, lr = trainer.train_step()
            sync()
            dt = time.perf_counter() - t0
            trainer.step += 1
            losses.append(loss)
            if i >= args.warmup:
                times.append(dt)
            if rank == 0:
                print(f"{tag} step {i + 1} loss {loss:.4f} {dt * 1e3:.0f} ms", file=sys.stderr, flush=True)
    tokens = cfg.batch_size * cfg.grad_accum * cfg.seq_len * world
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else 0.0
    settings = {"compile": trainer.compile_mode(), "adamw": trainer.adamw, "cuda_graphs": trainer.use_graphs}
    del trainer
    release_memory()  # the next row's peak must not count this trainer (its model sits in reference cycles)
    if rank != 0:
        return None
    result = {
        "method": method, "parallel": parallel, "world_size": world, "preset": args.preset,
        "batch_per_gpu": cfg.batch_size, "seq_len": cfg.seq_len, "grad_accum": cfg.grad_accum,
        "global_tokens_per_step": tokens, **settings, "loop": args.loop, "stream": cfg.model.stream.__dict__,
        "warmup_steps": args.warmup, "timed_steps": args.steps, "step_s": times,
        "median_step_s": med, "tokens_per_s": tokens / med, "tokens_per_s_mean": tokens * len(times) / sum(times),
        "peak_mem_gib": peak, "losses": losses,
        "device": torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu",
        "gpus_visible": torch.cuda.device_count(),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "python": platform.python_version(), "commit": source_commit(),
        "command": " ".join(sys.argv), "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"{tag} {result['tokens_per_s']:.0f} tokens/s (median step {med * 1e3:.1f} ms, peak {peak:.1f} GiB; "
          f"compile {settings['compile']}, adamw {settings['adamw']}, graphs {settings['cuda_graphs']})",
          file=sys.stderr, flush=True)
    return result


def _write(result: dict | None, path: str | Path | None) -> None:
    if result is not None and path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=1) + "\n")


def run(args) -> None:
    _write(measure(args, args.method, args.parallel), args.json)
    if args.parallel != "none":
        from mhar.train.distributed import shutdown

        shutdown()


def suite(args) -> None:
    """One torchrun job of N processes measures everything, so processes start (and
    kernels compile) once: each mode in ``--modes`` in turn, every method in it; mode
    "none" runs the plain Trainer on rank 0 alone (the other ranks wait), the others
    run on all N ranks. Each result
    goes to ``--suite DIR/<method>_<parallel><gpus>.json`` as soon as it exists."""
    import torch.distributed as dist

    from mhar.train.distributed import init_distributed, shutdown

    info = init_distributed(args.device)
    out = Path(args.suite)
    try:
        for parallel in [m for m in args.modes.split(",") if m]:
            for method in args.methods.split(","):
                n = 1 if parallel == "none" else info.world_size
                try:
                    if parallel == "none":
                        result = measure(args, method, "none") if info.rank == 0 else None
                    else:
                        result = measure(args, method, parallel)
                    _write(result, out / f"{method}_{parallel}{n}.json")
                except Exception as err:  # keep the other measurements
                    print(f"[{method} {parallel} x{n}] FAILED on rank {info.rank}: {type(err).__name__}: {err}",
                          file=sys.stderr, flush=True)
                    if parallel != "none":
                        raise  # a collective failed: the group is not usable any more
                dist.barrier()
    finally:
        shutdown()


def table(paths: list[str]) -> str:
    rows = [json.loads(Path(p).read_text()) for p in paths]
    rows = [r for r in rows if "tokens_per_s" in r]
    single = {r["method"]: r for r in rows if r["world_size"] == 1}
    lines = ["| method | parallel | GPUs | compile / AdamW / graphs | tokens/s | speed-up vs 1 GPU | "
             "scaling efficiency | median step ms | peak GiB/GPU |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["method"] != "baseline", r["method"], r["world_size"], r["parallel"])):
        one = single.get(r["method"])
        sp = r["tokens_per_s"] / one["tokens_per_s"] if one else float("nan")
        # results written before session 61 have compile as a flag (off or full) and no record of the rest
        comp = r.get("compile", "?")
        comp = ("full" if comp else "off") if isinstance(comp, bool) else comp
        graphs = {True: "on", False: "off"}.get(r.get("cuda_graphs"), "?")
        how = f"{comp} / {r.get('adamw', '?')} / {graphs}"
        lines.append(f"| {r['method']} | {r['parallel']} | {r['world_size']} | {how} | {r['tokens_per_s']:,.0f} | "
                     f"{sp:.3f}x | {sp / r['world_size']:.1%} | {r['median_step_s'] * 1e3:.1f} | "
                     f"{r['peak_mem_gib']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default="baseline")
    p.add_argument("--parallel", default="none", choices=("none", "ddp", "fsdp"))
    p.add_argument("--preset", default="paper-350m")
    p.add_argument("--batch", type=int, default=16, help="micro-batch per GPU (default 16, the paper's 350M)")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--chunk", type=int, default=8, help="two-phase scheduling chunk for routed methods")
    p.add_argument("--compile", default="auto", choices=("auto", "regions", "full", "off"),
                   help="the trainer's compile setting (auto: regions on CUDA)")
    p.add_argument("--loop", default="fit", choices=("fit", "step"),
                   help="fit: Trainer.fit's own step times (as mhar train); step: train_step in a synchronised loop")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test only")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--json", default=None)
    p.add_argument("--table", nargs="*", default=None, help="print the table of these result files and exit")
    p.add_argument("--suite", default=None, metavar="DIR",
                   help="under torchrun: measure every method in --methods in every mode in --modes")
    p.add_argument("--methods", default="baseline,mhar")
    p.add_argument("--modes", default="none,ddp,fsdp", help="in this order; none: the plain Trainer on one GPU")
    p.add_argument("overrides", nargs="*", help="extra trainer overrides (key=value)")
    args = p.parse_args(argv)
    if args.table is not None:
        print(table(args.table))
        return
    if args.suite:
        suite(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
