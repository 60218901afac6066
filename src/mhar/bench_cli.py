"""`mhar bench step`: training-step throughput, MFU and peak memory of every method,
side by side in one run, at the paper's shapes.

One step = forward + backward of ``--accum`` microbatches (one by default; gradients
accumulated), then one fused AdamW update, bf16 autocast,
fp32 master weights, ``torch.compile`` of the decoder (regional by default: each
sublayer kind compiles once), the LM head fused with the
loss in chunks (no full logits). On a GPU the forward and backward are replayed as one
CUDA graph by default (``--cuda-graphs``; ``both`` times every method both ways), so
the host's launch time is not what is measured. Routed methods use the routing op (fused kernels on
CUDA) with the stream's default schedule; ``METHOD@two-phase`` (or ``@one-pass``) picks
the schedule per method, so both can be compared in one run. ``METHOD+KEY=VALUE`` (one
``+`` per setting, after the schedule if any) sets model overrides for that method alone,
after the run's own: ``mhar-block,mhar-block+stream.sum_in_product=true`` times a
setting both ways in one process (with ``--interleave``, each against the same
baseline's steps).

MFU = model FLOPs per token x tokens/s / peak. Model FLOPs per token (training,
forward + backward = 3 x forward): 6 x (matmul parameters, LM head included,
embedding lookup excluded) + 6 x L x T x n_heads x head_dim for causal attention
(12 x L x T x n_heads x head_dim halved by the mask). Routing is not counted: it is
the overhead being measured. Peak: the GPU's dense bf16 peak from :mod:`mhar.gpu_peak`
(989 TFLOP/s for an H100 or H200 SXM, 312 for an A100, ...), or ``--peak-tflops``; a GPU
not in that table, or the CPU, gets no MFU ("-") unless one is given.

On a GPU each row also gives the SM clock (median and tenth percentile) and the power
draw over its timed steps, sampled every 100 ms by ``nvidia-smi`` (``mhar.gpu_clock``;
"-" without it): an H200 trains at these sizes at its 700 W cap, at about 1,750 MHz
rather than 1,980 (bench/results/step_h200.md, session 21), and a step time or MFU is
comparable only with the clock it ran at.

``--batch global`` runs the paper's global batch as one microbatch (64 x 2048, 32 x 1024,
32 x 1024 at 100M / 350M / 1B), as the trainer's presets do; the default is the issue's
reference microbatches (8 x 2048, 16 x 1024, 16 x 1024). On the H200 the larger
microbatch raised the baseline's MFU by 1.5-2.1 points (session 44).

``--accum N`` makes a step N microbatches (gradients accumulated, as the trainer's
``grad_accum``) and one update; ``--accum recipe`` takes the paper's global batch (64 /
32 / 32 sequences at 100M / 350M / 1B) in the paper's microbatches, 8, 2 and 2 of them.
Tokens/s and MFU count every token of the step. The default, 1, updates after every
microbatch, as sessions 6-15 measured. On the H200 the recipe's accumulation was not
faster per token (session 16, bench/results/step_h200.md): the accumulating replays add
into the gradients, and every kernel ran about 10% slower over the longer runs of
back-to-back work.

``--interleave`` times each method's steps in turn with the baseline's, both models alive
(their memory together must fit), and takes a method's ratio as the median of its step
pairs' ratios. Under the H200's power cap the clock moves from step to step: within one
process the same products took up to 16% longer in one step than in another
(bench/results/step_h200.md, session 48), so methods timed one after the other need not
see the same clocks; in turn, neighbouring steps do.

On a GPU, for the paper presets, a second table sets the rows against issue 6's bars
(set for the H200, bf16): the baseline's MFU (40% / 50% / 50% at 100M / 350M / 1B),
MHAR's throughput as a multiple of the baseline's (0.95 / 0.90 / 0.85) and block MHAR's
(0.97), every other method's peak memory (at most 1.05 of the baseline's), and H = 8
against H = 1 (``mhar`` at most 3% slower than ``attnres``). The throughput bars and H = 8
against H = 1 read the rows named exactly ``mhar``, ``mhar-block`` and ``attnres`` (not
``mhar@two-phase``); every bar needs the baseline in the run.

``--processes N`` runs the whole benchmark N times, each in a fresh Python process, one
after the other, and writes the median and range of every row over them
(``step_<tag>.json`` / ``.md``; each process's own files are ``step_<tag>_p<k>.*``). On
the H200 the same code's step time differs by up to 1% between processes and between
machines (compilation choices, clocks; bench/results/step_h200.md, session 29), as much
as a bar's margin, and one process cannot show that.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch._dynamo

from mhar.gpu_clock import ClockSampler, summarize
from mhar.gpu_peak import device_peak_tflops
from mhar.model import Decoder, get_preset
from mhar.model.config import SCHEDULES, with_method
from mhar.model.loss import linear_cross_entropy
from mhar.provenance import source_commit
from mhar.train.graphs import GraphedStep
from mhar.train.trainer import release_memory

PEAK_FLOPS = 989e12  # the H200's dense bf16 peak, issue 6's (rows use their own GPU's: mhar.gpu_peak)
# The issue's reference microbatches (the bench's default): tokens per step = batch x seq.
PAPER_MICROBATCH = {"paper-100m": (8, 2048), "paper-350m": (16, 1024), "paper-1b": (16, 1024)}
# The paper's global batch in sequences (SPEC section 4): one optimiser update per this many
PAPER_GLOBAL_BATCH = {"paper-100m": 64, "paper-350m": 32, "paper-1b": 32}
DEFAULT_METHODS = "baseline,hyper,attnres,mhar,mhar-block"
# Issue 6's bars for the paper presets (set for the H200, bf16): the baseline's MFU, and
# full MHAR's (H = 8) throughput as a multiple of the baseline's
STEP_BARS = {"paper-100m": {"baseline_mfu": 0.40, "mhar": 0.95},
             "paper-350m": {"baseline_mfu": 0.50, "mhar": 0.90},
             "paper-1b": {"baseline_mfu": 0.50, "mhar": 0.85}}
BLOCK_BAR = 0.97  # block MHAR's throughput, as a multiple of the baseline's
MEMORY_BAR = 1.05  # every other method's peak memory, as a multiple of the baseline's
HEADS_BAR = 1.03  # mhar's (H = 8) step time, as a multiple of attnres's (H = 1)
GRAPH_MODES = {"off": (False,), "on": (True,), "both": (False, True)}


def build(preset: str, method: str, seq_len: int, overrides: list[str], chunk: int, device: str) -> Decoder:
    cfg = get_preset(preset, "baseline")
    method, *own = method.split("+")  # e.g. "mhar-block+stream.sum_in_product=false"
    bad = [o for o in own if "=" not in o]
    if bad:
        raise ValueError(f"{'+'.join([method, *own])}: each +setting is KEY=VALUE; got {', '.join(bad)}")
    method, _, schedule = method.partition("@")  # e.g. "mhar@two-phase"
    settings = [f"stream.chunk={chunk}"]  # used when the schedule is two-phase
    if schedule:
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r} in {method}@{schedule}; allowed: {', '.join(SCHEDULES)}")
        settings.append(f"stream.schedule={schedule}")
    cfg.max_seq_len = max(cfg.max_seq_len, seq_len)
    return Decoder(with_method(cfg, method, [*settings, *overrides, *own])).to(device)


# torch.compile's "ran out of variants" switch and error (named for the cache before torch 2.6)
_RECOMPILE_LIMIT_ERRORS = tuple(getattr(torch._dynamo.exc, name) for name in ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")
                                if hasattr(torch._dynamo.exc, name))


def fail_on_recompile_limit():
    """A context in which torch.compile raises instead of running a function uncompiled
    once it has compiled the function's budget of variants (a benchmark must not time
    that as compiled)."""
    for flag in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"):
        if hasattr(torch._dynamo.config, flag):
            return torch._dynamo.config.patch(**{flag: True})
    return contextlib.nullcontext()


def prepare_step(model: Decoder, batch: int, seq_len: int, warmup: int, compile_mode: str, loss_chunk: int,
                 device: str, cuda_graphs: bool = False, adamw: str = "torch", accum: int = 1):
    """``model``'s training step, ready to time: compiled, warmed up and, with
    ``cuda_graphs``, captured. Returns ``(step, info)``: ``step(i)`` runs step i (``accum``
    microbatches, forward and backward each, the gradients accumulated, then one update)
    and returns its loss without waiting for the device; ``info`` holds "warmup_s" (the
    compiling, warm-up and capture) and "capture_peak" (the allocator's peak in bytes
    during the capture, where the graph's activations are allocated; 0 without a graph).
    ``adamw``: "torch" (clip_grad_norm_, then torch's fused AdamW) or "triton" (the
    norm, then :class:`~mhar.train.adamw_kernel.TritonAdamW` with the clip folded in)."""
    torch.manual_seed(0)
    hyper = dict(lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    if adamw == "triton":
        from mhar.train.adamw_kernel import TritonAdamW, clip_scale

        opt = TritonAdamW(model.parameters(), **hyper)
    else:
        opt = torch.optim.AdamW(model.parameters(), **hyper, fused=device == "cuda")
    body = model.hidden_states
    if compile_mode == "full":
        body = torch.compile(model.hidden_states)
    elif compile_mode == "regions":
        model.compile_regions()
    vocab = model.config.vocab_size

    def loss_fn(x, y):
        # autocast's weight-cast cache must be off under a CUDA graph's capture
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda", cache_enabled=not cuda_graphs):
            # as Decoder.loss does it (there the tied embedding's gradient goes into the head's);
            # a whole-model compile of hidden_states gets no hand-off to trace
            tied = model.tied_head_gradient(loss_chunk) if compile_mode != "full" else None
            h = body(x, tied=tied).flatten(0, 1)
            return linear_cross_entropy(h, model.output_weight, y.flatten(), loss_chunk, tied=tied)

    def update():
        if adamw == "triton":  # the norm, and its clip scale into the kernel (left on the device, as
            # clip_grad_norm_ leaves its own: neither path waits for the device here)
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
            opt.step(grad_scale=clip_scale(norm, 1.0))
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    # a step's microbatches: accum of the 4 batches below, in turn (x, y = data[i][:, :-1], [:, 1:])
    def micro(i):
        d = data[i % len(data)]
        return d[:, :-1], d[:, 1:]

    def eager_step(i):
        for k in range(accum):
            loss = loss_fn(*micro(i * accum + k))
            (loss / accum).backward()
        update()
        opt.zero_grad(set_to_none=True)
        return loss

    data = [torch.randint(0, vocab, (batch, seq_len + 1), device=device) for _ in range(4)]
    t_compile = time.perf_counter()
    for i in range(warmup):  # compiles, and creates the optimiser's state
        eager_step(i)
    step, capture_peak = eager_step, 0
    if cuda_graphs:
        # as the trainer: the first microbatch's graph writes the gradients, the others add
        graphed = GraphedStep(loss_fn, model.parameters(), *micro(0), scale=1.0 / accum, warmup=1)
        capture_peak = graphed.capture_peak_bytes

        def graphed_step(i):
            for k in range(accum):
                loss = graphed.run(*micro(i * accum + k), accumulate=k > 0)
            update()
            return loss
        step = graphed_step
        step(0)
    sync(device)
    return step, {"warmup_s": time.perf_counter() - t_compile, "capture_peak": capture_peak}


def step_result(model: Decoder, batch: int, seq_len: int, accum: int, times: list[float], peak_bytes: float,
                peak_tflops: float | None) -> dict:
    """A row's numbers from its timed steps (seconds, in order), its peak memory in bytes and
    the device's peak TFLOP/s (None: unknown, and the MFU is NaN)."""
    in_order = [1e3 * t for t in times]  # (a drift across them shows clocks changing under load)
    median = sorted(times)[len(times) // 2]  # (the upper median of an even count, as every row so far)
    tokens = batch * seq_len * accum
    flops = model.flops_per_token(seq_len)
    mfu = flops * tokens / median / (peak_tflops * 1e12) if peak_tflops else float("nan")
    return {"step_ms": 1e3 * median, "step_times_ms": in_order, "tokens_per_s": tokens / median, "mfu": mfu,
            "peak_mem_gb": peak_bytes / 1e9, "flops_per_token": flops, "accum": accum}


def time_step(model: Decoder, batch: int, seq_len: int, steps: int, warmup: int, compile_mode: str,
              loss_chunk: int, device: str, cuda_graphs: bool = False, trace_steps: int = 0,
              adamw: str = "torch", accum: int = 1, peak_tflops: float | None = None) -> dict:
    """Median step time, MFU and peak memory of ``model``'s training step (see
    :func:`prepare_step`) over ``steps`` timed steps. ``trace_steps``: that many more steps
    run, the same way, under ``torch.profiler`` (returned as "profiler"; bench/profile_step.py).
    ``peak_tflops``: the MFU's denominator (default: the device's, :mod:`mhar.gpu_peak`)."""
    if peak_tflops is None:
        peak_tflops = device_peak_tflops(device)[0]
    step, info = prepare_step(model, batch, seq_len, warmup, compile_mode, loss_chunk, device, cuda_graphs,
                              adamw, accum)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    # the clock the timed steps ran at: under the power cap it is not the GPU's maximum
    clocks = ClockSampler(torch.cuda.current_device()) if device == "cuda" else contextlib.nullcontext()
    with clocks:
        for i in range(steps):
            start = time.perf_counter()
            loss = step(i)
            sync(device)
            times.append(time.perf_counter() - start)
    profiler = None
    if trace_steps:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as profiler:
            for i in range(trace_steps):
                step(i)
            sync(device)
    # under a graph the activations were allocated once, at capture: its peak is the step's
    peak = max(torch.cuda.max_memory_allocated(), info["capture_peak"]) if device == "cuda" else float("nan")
    return {
        **step_result(model, batch, seq_len, accum, times, peak, peak_tflops),
        "warmup_s": info["warmup_s"],
        "loss": float(loss.detach()),
        "cuda_graphs": cuda_graphs,
        **(clocks.summary() if device == "cuda" else {}),
        **({"profiler": profiler} if trace_steps else {}),
    }


def error_row(err: Exception, oom_note: str = "") -> dict:
    """The row of a method that ran out of memory or of torch.compile's variants."""
    if isinstance(err, torch.OutOfMemoryError):
        return {"error": f"out of memory{oom_note}: {err}"[:200]}
    return {"error": f"torch.compile ran out of its variants for a function (recompile_limit): {err}"[:200]}


class _Prepared:
    """One method's model and prepared step in an interleaved run, with its memory: what
    it holds between steps (``resident``) and its peak (``peak``), both in bytes and
    counted from what was allocated before it was built, so that another model alive at
    the same time is not counted."""

    def __init__(self, model: Decoder, step, info: dict, before: int, cuda: bool):
        self.model, self.step, self.info = model, step, info
        self.resident = torch.cuda.memory_allocated() - before if cuda else 0
        self.peak = max(torch.cuda.max_memory_allocated(), info["capture_peak"]) - before if cuda else float("nan")
        self.loss = None

    def timed(self, i: int, device: str) -> float:
        """Runs step i and returns its seconds; on a GPU raises ``peak`` to the step's
        own peak (its resident memory and what the step allocated above it)."""
        cuda = device == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            at_start = torch.cuda.memory_allocated()
        start = time.perf_counter()
        self.loss = self.step(i)
        sync(device)
        seconds = time.perf_counter() - start
        if cuda:
            self.peak = max(self.peak, torch.cuda.max_memory_allocated() - at_start + self.resident)
        return seconds


def time_interleaved(preset: str, methods: list[str], batch: int, seq_len: int, accum: int, graphs: bool,
                     args: argparse.Namespace, device: str, adamw: str, peak_tflops: float | None) -> list[dict]:
    """``--interleave``: the baseline's and each other method's steps in turn (one of the
    baseline, one of the method, ``args.steps`` of each), both models alive, so that both
    run under the same clocks: on a power-capped GPU the clock moves from step to step
    (350M's products up to 16% apart on the H200, bench/results/step_h200.md, session
    48). A method's ratio to the baseline is the median over its steps of the baseline step's time just
    before over its own; the baseline's row takes its steps from every pair. Peak memory
    is each model's own (the other model alive beside it is not counted), with what the
    process keeps once allocated (workspaces, first allocated by the baseline) in every
    row, as a model run alone has it."""
    cuda = device == "cuda"
    others = [m for m in methods if m != "baseline"]
    release_memory()

    def prepare(method: str) -> _Prepared:
        print(f"[interleave] {preset} {method}{' (graph)' if graphs else ''}: build, "
              + ("" if args.compile == "off" else "compile, ") + ("capture, " if graphs else "")
              + f"{args.warmup} warm-up steps", file=sys.stderr, flush=True)
        before = torch.cuda.memory_allocated() if cuda else 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        model = build(preset, method, seq_len, args.overrides, args.chunk, device)
        model.activation_checkpointing = args.activation_checkpointing
        step, info = prepare_step(model, batch, seq_len, args.warmup, args.compile, args.loss_chunk, device, graphs,
                                  adamw, accum)
        return _Prepared(model, step, info, before, cuda)

    def row(p: _Prepared, times: list[float], samples: list) -> dict:
        return {**step_result(p.model, batch, seq_len, accum, times, p.peak, peak_tflops),
                "warmup_s": p.info["warmup_s"], "loss": float(p.loss.detach()), "cuda_graphs": graphs,
                "interleaved": True, **summarize(samples)}

    def failed(method: str, err: Exception) -> dict:
        return {"method": method, **error_row(err, " (--interleave holds two models at once)")}

    def free_other() -> None:
        # as release_memory, but torch.compile's code is dropped only where the baseline's
        # steps replay a CUDA graph: an eager baseline would recompile in its timed steps
        if graphs:
            torch._dynamo.reset()
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()

    def sampler() -> ClockSampler:  # (no samples without nvidia-smi, so none on a CPU)
        return ClockSampler(torch.cuda.current_device() if cuda else 0)

    with fail_on_recompile_limit():
        try:
            base = prepare("baseline")
        except (torch.OutOfMemoryError, *_RECOMPILE_LIMIT_ERRORS) as err:
            return [failed(m, err) for m in methods]
        base_resident = base.resident
        base_times, base_samples, other_rows = [], [], []
        for method in others:
            other = None
            try:
                other = prepare(method)
                print(f"[interleave] {preset}: baseline and {method}, {args.steps} timed steps each, in turn",
                      file=sys.stderr, flush=True)
                pair_base, pair_other = [], []
                with sampler() as clocks:
                    for i in range(args.steps):
                        pair_base.append(base.timed(i, device))
                        pair_other.append(other.timed(i, device))
                samples = clocks.samples
                r = row(other, pair_other, samples)
                r["throughput_vs_baseline"] = statistics.median(b / o for b, o in zip(pair_base, pair_other))
                r["baseline_step_ms"] = 1e3 * sorted(pair_base)[len(pair_base) // 2]
                base_times += pair_base
                base_samples += samples
            except (torch.OutOfMemoryError, *_RECOMPILE_LIMIT_ERRORS) as err:
                r = failed(method, err)
            other_rows.append(r)
            del other
            free_other()
        if not base_times:  # no other method ran: the baseline's steps on their own
            with sampler() as clocks:
                base_times = [base.timed(i, device) for i in range(args.steps)]
            base_samples = clocks.samples
        base_row = row(base, base_times, base_samples)
    if cuda:
        # What the process keeps once allocated (library workspaces, ...) came with the
        # baseline, the first model, and is in its peak; the others found it there. Add it
        # to theirs, as each would have allocated it alone: the baseline's allocation
        # between its steps less what freeing it gives back.
        held = torch.cuda.memory_allocated()
        del base
        release_memory()
        kept = max(0, base_resident - (held - torch.cuda.memory_allocated()))
        for r in other_rows:
            if "peak_mem_gb" in r:
                r["peak_mem_gb"] += kept / 1e9
    rows = iter(other_rows)
    return [{**(base_row if m == "baseline" else next(rows)), "method": m} for m in methods]


def _clock_cells(r: dict) -> str:
    """The SM MHz and W cells of a result row ("-" where nothing was sampled)."""
    if "sm_mhz" not in r:
        return "- | -"
    return f"{r['sm_mhz']:.0f} ({r['sm_mhz_p10']:.0f}) | {r['power_w']:.0f}"


def default_shape(preset: str) -> tuple[int, int]:
    """(microbatch, sequence length) by default: the issue's reference ones, 4 x 128 for other presets."""
    return PAPER_MICROBATCH.get(preset, (4, 128))


def microbatch(preset: str, batch: str) -> int:
    """``--batch``: a number of sequences; "global", the paper's global batch as one
    microbatch (the trainer presets'); "" (the default), the issue's reference microbatch."""
    if batch == "global":
        return PAPER_GLOBAL_BATCH.get(preset, default_shape(preset)[0])
    if batch:
        if not batch.isdigit() or int(batch) < 1:
            raise SystemExit(f"--batch takes a positive number of sequences or 'global'; got {batch!r}")
        return int(batch)
    return default_shape(preset)[0]


def positive_int(text: str, option: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise SystemExit(f"{option} takes a positive whole number; got {text!r}")
    return int(text)


def recipe_accum(preset: str, batch: int) -> int:
    """Microbatches per update for the paper's global batch (1 for other presets)."""
    total = PAPER_GLOBAL_BATCH.get(preset)
    if total is None:
        return 1
    if total % batch:
        raise ValueError(f"--accum recipe: {preset}'s global batch of {total} sequences is not a multiple of the "
                         f"microbatch {batch}; pass --accum N")
    return total // batch


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_bench_step(args: argparse.Namespace) -> int:
    if args.processes < 1:
        raise ValueError(f"--processes must be at least 1; got {args.processes}")
    if args.processes > 1:
        return run_in_processes(args)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    adamw = args.adamw if args.adamw != "auto" else ("triton" if device == "cuda" else "torch")  # as the trainer
    methods = args.methods.split(",")
    paper = [p for p in args.preset.split(",") if p in PAPER_MICROBATCH]
    if device == "cpu" and paper:  # runs, but a user may not expect hours on the CPU
        print(f"mhar bench step: no CUDA device, so {', '.join(paper)} runs on the CPU: a step can take "
              "minutes. For a quick check of the bench itself: --preset tiny", file=sys.stderr, flush=True)
    # the MFU's denominator: the GPU's own dense bf16 peak (989 TFLOP/s on an H100 / H200 SXM)
    peak, peak_source = device_peak_tflops(device, args.peak_tflops)
    if peak is None and device == "cuda":
        print(f"mhar bench step: {peak_source}; the MFU column is left empty", file=sys.stderr, flush=True)
    graph_mode = ("on" if device == "cuda" else "off") if args.cuda_graphs == "auto" else args.cuda_graphs
    if graph_mode != "off" and device != "cuda":
        raise SystemExit("--cuda-graphs needs a CUDA device")
    if args.interleave and "baseline" not in methods:
        raise SystemExit("--interleave times every method against the baseline, step by step: "
                         "put baseline in --methods")
    if args.interleave and graph_mode == "both":
        raise SystemExit("--interleave times the methods one way: pass --cuda-graphs on or off, not both")
    # Every preset's shape, and every method's model built on the meta device (no memory),
    # before anything runs: a typo in the last method fails now, not after minutes of timing.
    shapes = []
    for preset in args.preset.split(","):
        batch, seq_len = microbatch(preset, args.batch), args.seq_len or default_shape(preset)[1]
        accum = recipe_accum(preset, batch) if args.accum == "recipe" else positive_int(args.accum, "--accum")
        for method in methods:
            with torch.device("meta"):
                build(preset, method, seq_len, args.overrides, args.chunk, "meta")
        shapes.append((preset, batch, seq_len, accum))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for preset, batch, seq_len, accum in shapes:
        if args.interleave:
            graphs = GRAPH_MODES[graph_mode][0]
            for r in time_interleaved(preset, methods, batch, seq_len, accum, graphs, args, device, adamw, peak):
                r.update(preset=preset, batch=batch, seq_len=seq_len, cuda_graphs=graphs, accum=accum)
                results.append(r)
                print(json.dumps(r), flush=True)
            continue
        runs = [(m, g) for m in methods for g in GRAPH_MODES[graph_mode]]
        for k, (method, graphs) in enumerate(runs, 1):
            # compiling and warming up take from seconds to minutes: say what is running
            stages = "build, " + ("" if args.compile == "off" else "compile, ") + ("capture, " if graphs else "")
            print(f"[{k}/{len(runs)}] {preset} {method}{' (graph)' if graphs else ''}: {stages}"
                  f"{args.warmup} warm-up and {args.steps} timed steps", file=sys.stderr, flush=True)
            # The previous method's model is freed only by the cycle collector (compiled
            # modules refer back to themselves): without this, its weights (1.5 GB at
            # 350M) were still allocated and counted in this method's peak memory.
            release_memory()
            model = build(preset, method, seq_len, args.overrides, args.chunk, device)
            model.activation_checkpointing = args.activation_checkpointing
            try:
                # a function past torch.compile's budget of variants would run uncompiled
                # and be timed as if compiled: that row fails instead (session 8)
                with fail_on_recompile_limit():
                    r = time_step(model, batch, seq_len, args.steps, args.warmup, args.compile, args.loss_chunk,
                                  device, cuda_graphs=graphs, adamw=adamw, accum=accum, peak_tflops=peak)
            except (torch.OutOfMemoryError, *_RECOMPILE_LIMIT_ERRORS) as err:
                r = error_row(err)
            r.update(preset=preset, method=method, batch=batch, seq_len=seq_len, cuda_graphs=graphs, accum=accum)
            results.append(r)
            print(json.dumps(r), flush=True)
            del model
    # ratios against the baseline of the same preset, run the same way (graphed or not)
    base = {(r["preset"], r["cuda_graphs"]): r for r in results if r["method"] == "baseline" and "error" not in r}
    for r in results:
        b = base.get((r["preset"], r["cuda_graphs"]))
        if b and "error" not in r:
            # (an interleaved row has its own: the median of its steps' ratios)
            r.setdefault("throughput_vs_baseline", r["tokens_per_s"] / b["tokens_per_s"])
            r["memory_vs_baseline"] = r["peak_mem_gb"] / b["peak_mem_gb"] if device == "cuda" else float("nan")
    meta = {
        "command": " ".join(["mhar"] + sys.argv[1:]),
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "python": platform.python_version(), "commit": source_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "adamw": adamw,
        "peak_tflops": peak, "peak_from": peak_source,
        **({"interleaved": "each method's steps in turn with the baseline's"} if args.interleave else {}),
    }
    try:
        import triton
        meta["triton"] = triton.__version__
    except ImportError:
        pass
    if any("attention_kernel=fa4" in a for a in [args.methods, *args.overrides]):  # which FA4 its rows ran
        try:
            meta["flash-attn-4"] = importlib.metadata.version("flash-attn-4")
        except importlib.metadata.PackageNotFoundError:
            meta["flash-attn-4"] = "not installed (SDPA ran)"
    stem = out_dir / f"step_{args.tag or '_'.join(args.preset.split(','))}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    lines = [f"# Training-step benchmark ({meta['device']})", "",
             "| " + " | ".join(f"{k}: {v}" for k, v in meta.items()) + " |", "",
             "| preset | method | batch x seq x accum | step ms | tokens/s | MFU | peak GB | x baseline tput "
             "| x baseline mem | SM MHz, median (p10) | W |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"{_row_start(r)} {r['error']} |")
            continue
        lines.append(f"{_row_start(r)} {r['step_ms']:.1f} | "
                     f"{r['tokens_per_s']:,.0f} | {_percent(r['mfu'])} | {_number(r['peak_mem_gb'], '.2f')} | "
                     f"{_number(r.get('throughput_vs_baseline', float('nan')), '.3f')} | "
                     f"{_number(r.get('memory_vs_baseline', float('nan')), '.3f')} | {_clock_cells(r)} |")
    lines += bar_lines(results)
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot_ratios(results, stem.with_suffix(".png"), meta)
    print("\n".join(lines))
    print(f"plot: {stem.with_suffix('.png')}")
    return 0


def _label(r: dict) -> str:
    """A row's method as the tables and the plot show it."""
    return r["method"] + (" (graph)" if r["cuda_graphs"] else "")


def _percent(x: float) -> str:
    """A fraction as a percentage with one decimal; "-" for NaN (no MFU without a peak)."""
    return "-" if x != x else f"{100 * x:.1f}%"


def _number(x: float, fmt: str) -> str:
    """``x`` in ``fmt``; "-" for NaN (no peak memory, nor its ratio, on the CPU)."""
    return "-" if x != x else f"{x:{fmt}}"


def _row_start(r: dict) -> str:
    """A table line's first cells: preset, method, batch x seq x accum."""
    return f"| {r['preset']} | {_label(r)} | {r['batch']}x{r['seq_len']}x{r['accum']} |"


def bar_lines(results: list[dict]) -> list[str]:
    """A Markdown table of ``results`` (``mhar bench step`` rows, or their medians over
    processes) against issue 6's bars (``STEP_BARS``): one line per bar a row measures,
    for the paper presets' rows run on a GPU; none when no row measures one."""
    rows = []

    def add(r, bar, measured, needed, met):
        rows.append(f"{_row_start(r)} {bar} | {measured} | {needed} | {'met' if met else 'not met'} |")

    ok = [r for r in results if "error" not in r and r["preset"] in STEP_BARS]
    h1 = {(r["preset"], r["cuda_graphs"]): r for r in ok if r["method"] == "attnres"}
    for r in ok:
        bars, method = STEP_BARS[r["preset"]], r["method"]
        memory = r.get("memory_vs_baseline", float("nan"))
        if memory != memory:  # NaN: no GPU, no memory ratio, and MFU against the GPU's peak means nothing
            continue
        if method == "baseline":
            if r["mfu"] != r["mfu"]:  # NaN: a GPU whose peak is unknown
                continue
            add(r, "MFU", f"{100 * r['mfu']:.1f}%", f">= {100 * bars['baseline_mfu']:.0f}%",
                r["mfu"] >= bars["baseline_mfu"])
            continue
        ratio = r.get("throughput_vs_baseline")
        if method in ("mhar", "mhar-block") and ratio is not None:
            need = bars["mhar"] if method == "mhar" else BLOCK_BAR
            add(r, "throughput x baseline", f"{ratio:.3f}", f">= {need:.2f}", ratio >= need)
        add(r, "peak memory x baseline", f"{memory:.3f}", f"<= {MEMORY_BAR:.2f}", memory <= MEMORY_BAR)
        other = h1.get((r["preset"], r["cuda_graphs"]))
        if method == "mhar" and other is not None:
            slower = r["step_ms"] / other["step_ms"]
            add(r, "step time x attnres (H = 1)", f"{slower:.3f}", f"<= {HEADS_BAR:.2f}", slower <= HEADS_BAR)
    if not rows:
        return []
    return ["", "Against issue 6's bars (set for the H200, bf16):", "",
            "| preset | method | batch x seq x accum | bar | measured | needed | verdict |",
            "|---|---|---|---|---|---|---|", *rows]


_STEP_PARSER: list[argparse.ArgumentParser] = []  # `bench step`'s parser, set by register()


def step_argv(args: argparse.Namespace, **changes) -> list[str]:
    """The `mhar bench step` arguments that parse back to ``args`` with ``changes``, read
    off the parser's own actions (so an option added later is carried along)."""
    values = {**vars(args), **changes}
    argv, positional = [], []
    for action in _STEP_PARSER[0]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        value = values.get(action.dest)
        if not action.option_strings:
            positional += list(value or [])
        elif isinstance(action, argparse._StoreTrueAction):
            argv += [action.option_strings[0]] if value else []
        elif value is not None:
            argv += [action.option_strings[0], str(value)]
    return argv + positional  # (overrides are KEY=VALUE: none starts with a dash)


# the per-row numbers whose median and range --processes reports
_SPREAD_KEYS = ("step_ms", "tokens_per_s", "mfu", "peak_mem_gb", "throughput_vs_baseline", "memory_vs_baseline")


def run_in_processes(args: argparse.Namespace) -> int:
    """``--processes N``: the benchmark N times, each in a fresh process, then every row's
    median and range over them."""
    stem = args.tag or "_".join(args.preset.split(","))
    out_dir = Path(args.out)
    runs = []
    for k in range(1, args.processes + 1):
        tag = f"{stem}_p{k}"
        print(f"== process {k}/{args.processes}: mhar bench step ... --tag {tag}", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "mhar", "bench", "step", *step_argv(args, processes=1, tag=tag)]
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            raise SystemExit(f"mhar bench step: process {k} of {args.processes} exited with {rc}")
        runs.append(json.loads((out_dir / f"step_{tag}.json").read_text()))
    rows: dict[tuple, list[dict]] = {}
    for run in runs:
        for r in run["results"]:
            rows.setdefault((r["preset"], r["method"], r["cuda_graphs"]), []).append(r)
    results = []
    for (preset, method, graphs), rs in rows.items():
        ok = [r for r in rs if "error" not in r]
        row = {k: rs[0][k] for k in ("preset", "method", "batch", "seq_len", "cuda_graphs", "accum")}
        row["processes"] = len(ok)
        if len(ok) < len(rs):
            row["errors"] = [r["error"] for r in rs if "error" in r]
        for key in _SPREAD_KEYS:
            values = [r[key] for r in ok if key in r and r[key] == r[key]]  # (NaN: no memory ratio on the CPU)
            if values:
                row[key], row[key + "_min"], row[key + "_max"] = statistics.median(values), min(values), max(values)
            elif any(key in r for r in ok):
                row[key] = float("nan")
        results.append(row)
    meta = {**runs[0]["meta"], "command": " ".join(["mhar", "bench", "step", *step_argv(args)]),
            "processes": args.processes,
            "runs": [f"step_{stem}_p{k}.json" for k in range(1, args.processes + 1)]}
    (out_dir / f"step_{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))

    def cell(r, key, fmt, scale=1.0):
        if key + "_min" not in r:
            return "-"
        lo, mid, hi = (scale * r[key + s] for s in ("_min", "", "_max"))
        return f"{mid:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"

    lines = [f"# Training-step benchmark ({meta['device']}), {args.processes} processes: median (min-max)", "",
             "| " + " | ".join(f"{k}: {v}" for k, v in meta.items() if k != "runs") + " |", "",
             "| preset | method | batch x seq x accum | step ms | tokens/s | MFU % | peak GB | x baseline tput "
             "| x baseline mem | processes |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"{_row_start(r)} {cell(r, 'step_ms', '.1f')} | {cell(r, 'tokens_per_s', ',.0f')} | "
                     f"{cell(r, 'mfu', '.1f', 100.0)} | {cell(r, 'peak_mem_gb', '.2f')} | "
                     f"{cell(r, 'throughput_vs_baseline', '.3f')} | {cell(r, 'memory_vs_baseline', '.3f')} | "
                     f"{r['processes']}{' (' + str(len(r['errors'])) + ' failed)' if 'errors' in r else ''} |")
    lines += bar_lines([r for r in results if "tokens_per_s" in r])  # (medians; a row every process failed: none)
    (out_dir / f"step_{stem}.md").write_text("\n".join(lines) + "\n")
    plot_ratios(results, out_dir / f"step_{stem}.png", meta)
    print("\n".join(lines))
    return 0


def plot_ratios(results: list[dict], path: Path, meta: dict) -> None:
    """Throughput and peak memory of each method as a multiple of its preset's baseline,
    one panel each, a group of bars per preset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if "throughput_vs_baseline" in r]
    if not rows:
        return
    presets = list(dict.fromkeys(r["preset"] for r in rows))
    labels = list(dict.fromkeys(_label(r) for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(min(14.0, 4.0 + 1.6 * len(presets) + 0.3 * len(labels)), 4.6))
    width = 0.8 / len(labels)
    from mhar.train.metrics import method_colours

    # a method's colour as in compare's and the report's plots (the method without @schedule / +setting)
    method_of = {_label(r): r["method"].split("@")[0].split("+")[0] for r in rows}
    colours = method_colours([method_of[label] for label in labels])
    for ax, key, title in ((axes[0], "throughput_vs_baseline", "tokens/s ÷ baseline"),
                           (axes[1], "memory_vs_baseline", "peak memory ÷ baseline")):
        measured = any(math.isfinite(r.get(key, math.nan)) for r in rows)
        if not measured:  # the CPU has no peak-memory counter
            ax.text(0.5, 0.5, "not measured on this device", ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
        for j, label in enumerate(labels):
            xs, ys = [], []
            for i, preset in enumerate(presets):
                for r in rows:
                    if r["preset"] == preset and _label(r) == label:
                        xs.append(i + (j - (len(labels) - 1) / 2) * width)
                        ys.append(r[key])
            ax.bar(xs, ys, width, label=label, color=colours[j])
        if measured:
            ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(presets)), presets)
        ax.set_title(title)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(4, len(names)), fontsize=8, frameon=False)
    fig.suptitle(f"mhar bench step on {meta['device']} (commit {meta['commit']})", fontsize=10)
    fig.tight_layout(rect=(0, 0.06 * (1 + (len(names) - 1) // 4), 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks (bench step: training-step throughput per method)")
    bsub = p.add_subparsers(dest="bench_command", metavar="BENCH")
    s = bsub.add_parser("step", help="tokens/s, MFU and peak memory per method in one run",
                        description="Time training steps (forward, backward, AdamW) of each method at a preset's "
                                    "shape, side by side in one process; print a table and write "
                                    "OUT/step_TAG.json, .md and .png. Meant for a GPU (--preset tiny also runs on the "
                                    "CPU). The docstring of mhar.bench_cli explains each option in full.")
    s.add_argument("--preset", default="paper-100m", help="comma list: paper-100m, paper-350m, paper-1b, tiny")
    s.add_argument("--methods", default=DEFAULT_METHODS,
                   help="comma list; METHOD@two-phase or METHOD@one-pass sets the routing schedule, and "
                        "METHOD+KEY=VALUE a model override for that method alone (one + per setting)")
    s.add_argument("--batch", default="",
                   help="microbatch in sequences; global: the paper's global batch as one microbatch (64 / 32 / "
                        "32 at 100M / 350M / 1B, as the trainer presets); default: the issue's reference "
                        "microbatches (8 / 16 / 16)")
    s.add_argument("--seq-len", type=int, default=0, help="tokens per sequence (default 0: the preset's reference shape)")
    s.add_argument("--accum", default="1",
                   help="microbatches per optimiser update (default 1); recipe: the paper's global batch "
                        "(8 / 2 / 2 at 100M / 350M / 1B; 1 for other presets)")
    s.add_argument("--steps", type=int, default=30,
                   help="timed steps (median); enough back-to-back work that a power-capped GPU settles at its "
                        "sustained clock (the H200's 700 W cap lowers its clock within seconds: session 16)")
    s.add_argument("--warmup", type=int, default=4, help="untimed steps before the timed ones")
    s.add_argument("--chunk", type=int, default=8, help="two-phase chunk (sublayers) for full routing")
    s.add_argument("--loss-chunk", type=int, default=4096, help="tokens per fused LM-head/loss chunk (0: plain)")
    s.add_argument("--compile", choices=("regions", "full", "off"), default="regions",
                   help="regions: compile each sublayer once (fast to compile); full: the whole model")
    s.add_argument("--activation-checkpointing", action="store_true", help="recompute every sublayer in backward")
    s.add_argument("--adamw", choices=("auto", "torch", "triton"), default="auto",
                   help="the optimiser phase: clip_grad_norm_ + torch's fused AdamW, or the norm + one Triton "
                        "kernel with the clip folded in (mhar.train.adamw_kernel); auto: triton on CUDA, "
                        "as the trainer")
    s.add_argument("--cuda-graphs", choices=("auto", *GRAPH_MODES), default="auto",
                   help="replay each step's forward and backward as a CUDA graph (no host time); "
                        "auto: on with a GPU; both: every method twice, eager then graphed")
    s.add_argument("--peak-tflops", type=float, default=0.0,
                   help="the device's peak TFLOP/s for the MFU column (default 0: the GPU's dense bf16 peak from "
                        "mhar.gpu_peak's table, or MHAR_PEAK_TFLOPS; none on the CPU)")
    s.add_argument("-o", "--out", default="bench/results", help="folder for the step_TAG.* files")
    s.add_argument("--tag", default="", help="TAG in the file names (default: the presets, joined by _)")
    s.add_argument("--processes", type=int, default=1,
                   help="run the benchmark this many times, each in a fresh process, and report every row's "
                        "median and range (the spread between processes is as large as some bars' margins)")
    s.add_argument("--interleave", action="store_true",
                   help="time each method's steps in turn with the baseline's (one of each, both models alive: "
                        "their memory together must fit), so that both run under the same clocks; its ratio is "
                        "the median of the step pairs' ratios. On a power-capped GPU the clock moves from step to "
                        "step, and one method's steps after another's need not see the same clocks")
    s.add_argument("overrides", nargs="*", help="dotted model overrides")
    s.set_defaults(func=run_bench_step)
    _STEP_PARSER[:] = [s]
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
