"""What the optimiser phase of a training step costs on a GPU, part by part, against its bytes.

After the (graphed) forward and backward, every step runs: the gradient-norm clip
(``clip_grad_norm_``: a norm over every gradient, then every gradient scaled) and AdamW
(fused: one multi-tensor kernel). Until session 8 it also zeroed the gradients, which a
graphed step no longer does (its first replay writes them; an eager step sets them to
None); the zeroing is still timed here, for comparison. Each part reads or writes
every parameter's fp32 state, so at 350M and 1B they are a visible share of the step.
This times each part alone on a model's real parameter shapes (random gradients), as
CUDA-event medians, next to its byte floor at the copy bandwidth measured in the same
run, and one alternative: the clip's scale folded into the fused AdamW kernel
(``grad_scale``, the AMP unscale path: the kernel divides each gradient as it reads
it). On the H200 that was no faster (the kernel writes the divided gradients back;
bench/results/step_h200.md, session 7). And the trainer's ``adamw=triton`` path (its
default on one GPU since session 10): the norm, then one Triton kernel that applies the
clip's scale as it reads each gradient and never writes it (``mhar.train.adamw_kernel``).

Each part is timed twice: as called (the host's time to queue it counts where the device
would otherwise wait), and with the host ahead (the device first sleeps, so only device
time counts). A training step's update is queued while the device still runs the
backward, unless the host waits for a value first (adamw=torch reads the norm before
its step), so the second figure is the one a step pays for queued work. Session 10's
first isolated timings (runs 1 and 2) were the first kind only.

    PYTHONPATH=src python bench/optimizer_bench.py --presets paper-350m,paper-1b
"""

from __future__ import annotations

import argparse

import torch

from mhar.bench_cli import PAPER_MICROBATCH, build
from mhar.train import adamw_kernel as AK
from mhar.train.adamw_kernel import TritonAdamW
from mhar.train.trainer import release_memory


def timed(fn, reps: int = 10, warmup: int = 3, host_ahead: bool = False) -> float:
    """Median ms of fn over reps, CUDA events around each call. host_ahead: the device
    first sleeps 20 ms, so that the host has queued all of fn's work before the device
    reaches it and the time is the device's alone (as in a training step, where the host
    queues the update while the device still runs the backward)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if host_ahead:
            torch.cuda._sleep(40_000_000)  # cycles: about 20 ms at the H200's clock
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return sorted(out)[len(out) // 2]


def copy_gbs() -> float:
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = timed(lambda: y.copy_(x))
    return 2 * x.numel() * 4 / (ms * 1e-3) / 1e9


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


def triton_alone(params, block: int, warps: int):
    """The Triton step with another kernel geometry (elements per program, warps); the
    launch reads the module's settings, and a fresh optimiser builds its chunk tables."""
    opt = TritonAdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)

    def step():
        saved = AK.BLOCK, AK.WARPS
        AK.BLOCK, AK.WARPS = block, warps
        try:
            opt.step()
        finally:
            AK.BLOCK, AK.WARPS = saved
    return step


def bench_preset(preset: str, bw: float, configs: list[tuple[int, int]]) -> list[tuple[str, str, float, float, float]]:
    model = build(preset, "baseline", PAPER_MICROBATCH[preset][1], [], 8, "cuda")
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    grads = [p.grad for p in params]
    fused = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    foreach = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    triton_adamw = TritonAdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)

    def norm_and_triton():  # what the trainer runs with adamw=triton: the scale stays on the device, the
        # norm is read back after the update is queued
        norm = total_norm(grads)
        triton_adamw.step(grad_scale=AK.clip_scale(norm, 1.0))
        float(norm)

    def folded():  # the clip's scale applied inside the fused kernel (grad / grad_scale)
        fused.grad_scale = torch.clamp(total_norm(grads) / 1.0, min=1.0).float()
        fused.step()
        del fused.grad_scale

    gb = n * 4 / 1e9  # one fp32 pass over every parameter
    parts = [
        ("clip_grad_norm_ (norm + scale)", lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), 3 * gb),
        ("  its norm alone", lambda: total_norm(grads), gb),
        ("AdamW fused step", fused.step, 7 * gb),
        ("AdamW foreach step", foreach.step, 7 * gb),
        ("zero the gradients (foreach)", lambda: torch._foreach_zero_(grads), gb),
        ("clip + fused step + zero (the step's optimiser phase)",
         lambda: (torch.nn.utils.clip_grad_norm_(params, 1.0), fused.step(), torch._foreach_zero_(grads)), 11 * gb),
        ("clip folded into the fused step + zero", lambda: (folded(), torch._foreach_zero_(grads)), 9 * gb),
        (f"Triton AdamW step alone ({AK.BLOCK} elements / {AK.WARPS} warps, the default)", triton_adamw.step, 7 * gb),
        ("norm + Triton AdamW with the clip folded in (adamw=triton)", norm_and_triton, 8 * gb),
        ("clip, its norm read, fused step (the same phase with adamw=torch)",
         lambda: (float(torch.nn.utils.clip_grad_norm_(params, 1.0)), fused.step()), 10 * gb),
        *((f"Triton AdamW step alone, {b} elements / {w} warps", triton_alone(params, b, w), 7 * gb)
          for b, w in configs),
    ]
    print(f"\n{preset}: {n / 1e6:.0f}M parameters, {len(params)} tensors")
    rows = []
    for name, fn, nbytes in parts:
        ms, device_ms = timed(fn), timed(fn, host_ahead=True)
        floor = nbytes / bw * 1e3
        rows.append((preset, name, ms, device_ms, floor))
        print(f"  {name:55s} {ms:7.2f} ms, device alone {device_ms:7.2f} ms   floor {floor:6.2f} ms "
              f"({100 * floor / device_ms:3.0f}% of copy bandwidth)", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="paper-350m,paper-1b")
    ap.add_argument("--triton-configs", default="", metavar="BLOCKxWARPS,...",
                    help="also time the Triton step with these geometries, e.g. 2048x8,4096x8")
    args = ap.parse_args()
    configs = [tuple(int(v) for v in c.split("x")) for c in args.triton_configs.split(",") if c]
    bw = copy_gbs()
    print(f"device-to-device copy: {bw:.0f} GB/s")
    rows = []
    for preset in args.presets.split(","):
        release_memory()
        rows += bench_preset(preset, bw, configs)
    print("\n| preset | part | ms | ms, device alone (host ahead) | byte floor ms |\n|---|---|---|---|---|")
    for preset, name, ms, device_ms, floor in rows:
        print(f"| {preset} | {name.strip()} | {ms:.2f} | {device_ms:.2f} | {floor:.2f} |")


if __name__ == "__main__":
    main()
