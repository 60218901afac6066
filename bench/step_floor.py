"""Byte and FLOP floors of a training step, per preset and routing schedule (issue 6).

Counts, from the shapes alone, the bytes the depth read must move per step and the
matmul FLOPs of the model, and turns them into times with a measured copy bandwidth
and a measured matmul rate. Compare with bench/results/step_*.json (measured).

The "as built" row counts the two-phase kernels' own traffic too (``bench/routing.py
--floors``'s model: fp32 partial rows, coefficients, the sites' gradient rows).

A second table is the baseline's own floor by part, for its MFU: the matrix products
and attention at the 989 TFLOP/s peak, the optimiser's bytes (fp32 parameter, gradient
and two moments read, parameter and moments written, the gradient read again for the
clip's norm: 32 bytes a parameter), the loss kernel's (the bf16 logits read twice and
written once) and, from ``bench/region_bytes.py``'s JSON files when ``--regions`` names
their folders (``regions_<100m|350m|1b>.json``; the first folder holding a preset's file
wins), the compiled regions' bytes, all at the copy bandwidth; then the step those floors
add up to and its MFU.

A third table, with ``--profiles`` (folders of ``bench/profile_step.py``'s
``profile_<preset>_baseline_*.tsv``), sets the measured step beside its kernels by kind
and asks what the MFU bar leaves for everything but the matrix products and attention
when those two run as measured (the products in the step run faster than the same
products alone, ``bench/gemm_rate.py``, and cuDNN is the fastest attention on this
stack, ``bench/attention_bench.py``): the bar's step time minus the two, against the
floors of the rest (optimiser, loss kernel, compiled regions) and what the rest and
the gaps between kernels measure.

    python bench/step_floor.py --copy-gbs 4270 --matmul-tflops 788
    python bench/step_floor.py --copy-gbs 4246 --regions bench/results/session16/8_region_bytes
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
from pathlib import Path

from mhar.bench_cli import PAPER_MICROBATCH, PEAK_FLOPS
from mhar.model import get_preset
from mhar.model.decoder import Decoder

import torch


def source_reads(n_sites: int, schedule: str, chunk: int, block: int) -> tuple[int, int]:
    """(reads of one source-sized tensor in forward, same in backward: reads + writes)."""
    if block:  # block routing: completed blocks once per block, plus the partial sum per later sublayer
        n_blocks = math.ceil((n_sites - 1) / block)
        fwd = sum(1 + b for b in range(n_blocks)) + (n_sites - 1 - n_blocks) + (n_blocks + 1)
    elif schedule == "one-pass":
        fwd = sum(range(1, n_sites + 1))  # site l reads l sources
    else:
        fwd, existing = 0, 1
        for start in range(0, n_sites - 1, chunk):
            size = min(chunk, n_sites - 1 - start)
            fwd += existing + sum(range(size))  # phase 1 once, phase 2 the new ones
            existing += size
        fwd += n_sites  # final read
    # backward: every source read again and its gradient written; the read's output and grad read once per site
    return fwd + n_sites, 2 * fwd + 2 * n_sites


def block_two_phase_extras(n_sites: int, block: int, sum_in_product: bool = False) -> int:
    """Source-sized tensors that two-phase block routing moves besides its sources (which
    ``source_reads`` counts): every sublayer's phase-1 row (its o, bf16) written by phase
    1 and read by phase 2 or finalize, its gradient row written by that site's backward
    and read by phase 1's, and each in-block sublayer's running sum formed by an add (two
    reads and a write; the reads' gradients are summed in-kernel, session 34), or with
    ``sum_in_product`` (``stream.sum_in_product``) by its output projection, whose
    epilogue reads the sum so far as its C operand and writes the new sum in place of
    the output: one read."""
    n_sub = n_sites - 1
    n_blocks = math.ceil(n_sub / block)
    return 4 * n_sub + (1 if sum_in_product else 3) * (n_sub - n_blocks)


def accumulation_bytes(n_sites: int) -> int:
    """Source-sized tensors moved by autograd summing the per-site gradients of each source
    in full one-pass routing: each site returns one gradient per source it read, and every
    contribution after a source's first is an add (read two, write one)."""
    pairs = sum(range(1, n_sites + 1))  # (site, source) pairs
    n_sources = n_sites  # the embedding and every sublayer output
    return 3 * (pairs - n_sources)


def one_pass_reads(n_sites: int, block: int) -> tuple[int, int, int]:
    """One-pass reads as built (full routing: block 0): (registered source reads over all
    sites, reads of block routing's unregistered running partial sum, registered sources)."""
    n_sub = n_sites - 1
    if not block:
        return sum(range(1, n_sites + 1)), 0, n_sites
    registered = extras = 0
    for i in range(n_sub):
        registered += 1 + i // block  # the embedding and the completed blocks
        extras += 1 if i % block else 0  # the running partial sum of the current block
    n_sources = 1 + math.ceil(n_sub / block)
    return registered + n_sources, extras, n_sources  # + the final read over every source


def baseline_floor(preset: str, copy_gbs: float, regions_dir: str = "") -> dict[str, float | None]:
    """The baseline step's floor by part in ms (see the module docstring); "regions" is None
    without a region_bytes.py file for the preset. "mfu": the MFU of a step at the sum."""
    batch, seq = PAPER_MICROBATCH[preset]
    tokens = batch * seq
    cfg = get_preset(preset)
    with torch.device("meta"):
        model = Decoder(cfg)
    flops = model.flops_per_token(seq)
    attention = 6 * cfg.n_layers * seq * cfg.n_heads * cfg.attn_head_dim
    params = sum(p.numel() for p in model.parameters())
    ms = lambda n_bytes: n_bytes / (copy_gbs * 1e9) * 1e3  # noqa: E731
    parts: dict[str, float | None] = {
        "matmul": (flops - attention) * tokens / PEAK_FLOPS * 1e3,
        "attention": attention * tokens / PEAK_FLOPS * 1e3,
        "optimizer": ms(32 * params),
        "loss kernel": ms(3 * tokens * cfg.vocab_size * 2),
        "regions": None,
    }
    name = f"regions_{preset.removeprefix('paper-')}.json"
    f = next((Path(d) / name for d in regions_dir.split(",") if d and (Path(d) / name).exists()), None)
    if f is not None:
        parts["regions"] = ms(json.loads(f.read_text())["total_gb"] * 1e9)
    total = sum(v for v in parts.values() if v is not None)
    parts["total"] = total
    parts["mfu"] = flops * tokens / (total * 1e-3) / PEAK_FLOPS
    return parts


@functools.cache
def _routing_bench():
    """bench/routing.py, loaded from its file beside this one (under its own module name)."""
    spec = importlib.util.spec_from_file_location("mhar_bench_routing", Path(__file__).with_name("routing.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def whole_step_floor(*args, **kwargs) -> dict:
    """bench/routing.py's whole-step byte model of the two-phase kernels as built."""
    return _routing_bench().whole_step_floor(*args, **kwargs)


MFU_BAR = {"paper-100m": 0.40, "paper-350m": 0.50, "paper-1b": 0.50}


def profile_kinds(profile_dirs: str, preset: str) -> tuple[dict[str, float], str]:
    """Kernel ms per step by kind of the baseline's graphed step, from the first of
    ``profile_dirs`` (comma list) holding ``profile_<preset>_baseline_*.tsv``, and its path."""
    for d in profile_dirs.split(","):
        for f in sorted(Path(d).glob(f"profile_{preset}_baseline_*.tsv")) if d else []:
            if f.name.endswith("_launches.tsv") or "_eager" in f.name or "_ckpt" in f.name:
                continue  # the launch lists, and steps other than the graphed one
            kinds: dict[str, float] = {}
            for line in f.read_text().splitlines()[1:]:
                kind, _, ms, _ = line.split("\t", 3)
                kinds[kind] = kinds.get(kind, 0.0) + float(ms)
            return kinds, str(f)
    return {}, ""


def newest_baseline(measured_dir: str, preset: str) -> tuple[float | None, str]:
    """The step time of the newest baseline row for ``preset`` (one microbatch per update)
    in any ``step_*.json`` under ``measured_dir`` (``mhar bench step``'s files, by their
    recorded date), and that file's path; (None, "") when there is none."""
    best = (None, "", "")
    for f in sorted(Path(measured_dir).rglob("step_*.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or "results" not in data:
            continue
        date = data.get("meta", {}).get("date", "")
        for r in data["results"]:
            if (r.get("method") == "baseline" and r.get("preset") == preset and r.get("accum", 1) == 1
                    and "step_ms" in r and date >= best[2]):
                best = (r["step_ms"], str(f), date)
    return best[0], best[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copy-gbs", type=float, default=4270.0, help="measured device-to-device copy, GB/s")
    ap.add_argument("--matmul-tflops", type=float, default=788.0, help="measured bf16 matmul rate")
    ap.add_argument("--measured", default="bench/results",
                    help="folder searched (with its subfolders) for mhar bench step's step_*.json: the newest "
                         "baseline row of each preset is the measured baseline")
    ap.add_argument("--regions", default="", help="folders (comma list) with bench/region_bytes.py's "
                                                  "regions_<size>.json")
    ap.add_argument("--profiles", default="", help="folders (comma list) with bench/profile_step.py's "
                                                   "profile_<preset>_baseline_*.tsv: the third table")
    args = ap.parse_args()
    rows, sources = [], []
    for preset, (batch, seq) in PAPER_MICROBATCH.items():
        cfg = get_preset(preset)
        with torch.device("meta"):
            flops_tok = Decoder(cfg).flops_per_token(seq)
        tokens = batch * seq
        compute_ms = flops_tok * tokens / (args.matmul_tflops * 1e12) * 1e3
        src_bytes = tokens * cfg.d_model * 2  # one bf16 source
        n_sites = cfg.num_sublayers + 1
        base_ms, source = newest_baseline(args.measured, preset)
        if source:
            sources.append(f"{preset}: {source}")

        def row(preset, name, total):
            routing_ms = total * src_bytes / (args.copy_gbs * 1e9) * 1e3
            ratio = base_ms / (base_ms + routing_ms) if base_ms else float("nan")
            return (preset, name, f"{compute_ms:.1f}", f"{total * src_bytes / 1e9:.1f}", f"{routing_ms:.1f}",
                    f"{base_ms:.1f}" if base_ms else "-", f"{ratio:.3f}")
        for name, schedule, block in [("full one-pass", "one-pass", 0), ("full two-phase S=8", "two-phase", 0),
                                      ("block (8 blocks) two-phase", "two-phase", math.ceil(cfg.num_sublayers / 8))]:
            fwd, bwd = source_reads(n_sites, schedule, 8, block)
            rows.append(row(preset, name, fwd + bwd))
            if block:
                rows.append(row(preset, name + " + its rows and running-sum adds",
                                fwd + bwd + block_two_phase_extras(n_sites, block)))
                extras = block_two_phase_extras(n_sites, block, sum_in_product=True)
                rows.append(row(preset, name + " + its rows, the sums in the products", fwd + bwd + extras))
                # a design, not built: each later sublayer of a block merges its row with the
                # running sum inside its own compiled region (as the baseline's add runs in
                # its sublayer's), so its read's output is never written, nor read back in
                # backward with its gradient: 3 fewer per such sublayer
                in_block = (n_sites - 1) - math.ceil((n_sites - 1) / block)
                rows.append(row(preset, name + " + its rows, the sums in the products, the later reads in "
                                "their sublayers' regions (unbuilt)", fwd + bwd + extras - 3 * in_block))
            if schedule == "one-pass":  # before the GradientSink: the same plus autograd's gradient sums
                total = fwd + bwd + accumulation_bytes(n_sites)
                rows.append(row(preset, name + " + autograd sums", total))
        # as built now: one-pass, each registered source's gradient summed in the backward
        # kernel (one more read per contribution after the first)
        for name, block in [("full one-pass + in-kernel sums", 0),
                            ("block one-pass + in-kernel sums", math.ceil(cfg.num_sublayers / 8))]:
            registered, extras, n_sources = one_pass_reads(n_sites, block)
            reads = registered + extras
            total = (reads + n_sites) + (2 * reads + 2 * n_sites) + (registered - n_sources)
            rows.append(row(preset, name, total))
        # the two-phase kernels as built, with what the schedule moves besides the sources
        # (fp32 partial rows, the coefficients, the sites' gradient rows): bench/routing.py's
        # whole-step floor, with 8 heads
        built = whole_step_floor(cfg.d_model, n_sites, tokens, 8, heads=8)["total"]
        rows.append(row(preset, "full two-phase S=8 as built (8 heads)", built / src_bytes))
    print("| preset | routing | matmul floor ms (baseline) | routing GB/step | routing floor ms | measured baseline ms |"
          " best ratio at floor |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if sources:
        print("\nMeasured baselines (the newest step_*.json row of each preset): " + "; ".join(sources))
    print(f"\nThe baseline's floor by part, ms (products at {PEAK_FLOPS / 1e12:.0f} TFLOP/s, bytes at "
          f"{args.copy_gbs:.0f} GB/s; compiled regions from --regions):\n")
    print("| preset | matmul | attention | optimiser | loss kernel | compiled regions | sum | MFU at the sum |")
    print("|---|---|---|---|---|---|---|---|")
    for preset in PAPER_MICROBATCH:
        p = baseline_floor(preset, args.copy_gbs, args.regions)
        cells = [f"{p[k]:.1f}" if p[k] is not None else "-" for k in
                 ("matmul", "attention", "optimizer", "loss kernel", "regions", "total")]
        print(f"| {preset} | " + " | ".join(cells) + f" | {100 * p['mfu']:.1f}% |")
    if args.profiles:
        print_bar_budget(args)


def print_bar_budget(args) -> None:
    """The third table (see the module docstring)."""
    print("\nThe MFU bar against the measured step, ms (kernels by kind from the profile; 'rest': the "
          "optimiser, loss kernel, compiled regions and other kernels; 'gaps': the step less its kernels):\n")
    print("| preset | step (MFU) | products | attention | rest | gaps | bar: step | bar leaves for rest + gaps "
          "| floor of the rest | MFU with the rest at its floor, no gaps |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    used = []
    for preset, (batch, seq) in PAPER_MICROBATCH.items():
        kinds, f = profile_kinds(args.profiles, preset)
        step, _ = newest_baseline(args.measured, preset)
        p = baseline_floor(preset, args.copy_gbs, args.regions)
        if not kinds or step is None or p["regions"] is None:
            continue
        used.append(f"{preset}: {f}")
        mfu = lambda ms: (p["total"] * p["mfu"]) / ms  # noqa: E731  (the model's FLOPs at the peak, in ms, over ms)
        products, attention = kinds.get("matmul", 0.0), kinds.get("attention", 0.0)
        rest = sum(kinds.values()) - products - attention
        gaps = step - sum(kinds.values())
        bar_step = p["total"] * p["mfu"] / MFU_BAR[preset]
        rest_floor = p["optimizer"] + p["loss kernel"] + p["regions"]
        print(f"| {preset} | {step:.1f} ({100 * mfu(step):.1f}%) | {products:.1f} | {attention:.1f} | {rest:.1f} "
              f"| {gaps:.1f} | {bar_step:.1f} ({100 * MFU_BAR[preset]:.0f}%) | {bar_step - products - attention:.1f} "
              f"| {rest_floor:.1f} | {100 * mfu(products + attention + rest_floor):.1f}% |")
    if used:
        print("\nProfiles: " + "; ".join(used))


if __name__ == "__main__":
    main()
