"""Routing benchmark: fused Triton kernels vs the reference, torch.compile and the peers.

    PYTHONPATH=src python bench/routing.py --out bench/results/routing_h200.json

Per-call time (one site over N = 2L+1 sources, 16,384 tokens, bf16), forward and
forward+backward, at the paper shapes d/L = 512/12, 1024/24, 1280/36; whole-step routing
time (every site of one model step: one-pass, and two-phase in chunks); achieved
bandwidth on the bytes the algorithm must move against a device-to-device copy
measured in the same run. Peers at H = 1: ``fused_attnres`` (fla-core) and
``attn_res`` (liger-kernel), skipped where they cannot run. Writes JSON and a Markdown
table (same stem) with the command, device, versions and commit.

Bytes the algorithm must move (bf16, M tokens, width d, N sources, e = 2 bytes):
forward  (N + 1) M d e  (read each source once, write the read);
backward (2N + 2) M d e (read each source, grad_y and y once, write each source's gradient).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import sys
import time
import traceback

import torch

from mhar import routing
from mhar.provenance import source_commit
from mhar.routing import op as rop
from mhar.routing import reference as R

SHAPES = [(512, 12), (1024, 24), (1280, 36)]


def log(*a):
    print(*a, flush=True)


def bench(fn, warmup=25, rep=150):
    import triton.testing as tt
    return tt.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


GRAPH_REPLAY = [False]  # --graph-replay


def bench_graph(fn, rep=100):
    """Median ms of ``fn`` replayed from a CUDA graph (``triton.testing.do_bench_cudagraph``
    captures it and replays it; nothing of the host's time is in the result)."""
    import triton.testing as tt
    return tt.do_bench_cudagraph(fn, rep=rep, return_mode="median")


def copy_bandwidth():
    n = 1 << 30  # 1 Gi bf16 elements = 2 GiB
    x = torch.randn(n // 1024, 1024, device="cuda").to(torch.bfloat16)
    y = torch.empty_like(x)
    t = bench(lambda: y.copy_(x), rep=300)
    gbs = 2 * x.numel() * 2 / (t * 1e-3) / 1e9
    del x, y
    torch.cuda.empty_cache()
    return gbs, t


def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


class Case:
    def __init__(self, d, n, tokens, heads_list, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.d, self.n, self.M = d, n, tokens
        self.srcs = [torch.randn(tokens, d, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
                     for _ in range(n)]
        self.q = (torch.randn(d, device="cuda", generator=g) * (2 / math.sqrt(d))).requires_grad_()
        self.g = (1 + 0.1 * torch.randn(d, device="cuda", generator=g)).requires_grad_()
        self.gy = torch.randn(tokens, d, device="cuda", generator=g).to(torch.bfloat16)

    def bytes_fwd(self):
        return (self.n + 1) * self.M * self.d * 2

    def bytes_bwd(self):
        return (2 * self.n + 2) * self.M * self.d * 2


def fns(case, route_fn):
    wrt = [*case.srcs, case.q, case.g]

    def fwd():
        with torch.no_grad():
            return route_fn(case.srcs, case.q, case.g)

    def fwdbwd():
        y = route_fn(case.srcs, case.q, case.g)
        return torch.autograd.grad(y, wrt, case.gy)

    return fwd, fwdbwd


def peak_extra(case, route_fn):
    """Extra peak memory of one fwd+bwd over the sources, in units of the sources' bytes."""
    src_bytes = case.n * case.M * case.d * 2
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    y = route_fn(case.srcs, case.q, case.g)
    gr = torch.autograd.grad(y, [*case.srcs, case.q, case.g], case.gy)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    del gr, y
    return extra / src_bytes


def ours(heads):
    def f(srcs, q, g):
        return routing.route(srcs, q, g, heads)
    return f


def eager_ref(heads):
    def f(srcs, q, g):
        return R.route(srcs, q, g, heads)
    return f


_compiled = {}


def compiled_ref(heads):
    if heads not in _compiled:
        _compiled[heads] = torch.compile(lambda srcs, q, g: R.route(srcs, q, g, heads))
    return _compiled[heads]


def peer_fla():
    from fla.ops.attnres import fused_attnres

    def f(srcs, q, g):
        return fused_attnres(q, srcs, g, rms_eps=1e-6)
    return f


def peer_liger():
    from liger_kernel.transformers.functional import liger_attn_res

    def f(srcs, q, g):
        # liger takes one stacked (N, ..., d) tensor; the stack is part of its cost here
        return liger_attn_res(torch.stack(list(srcs)), q, g, eps=1e-6)
    return f


_SAVE = [lambda: None]  # main() installs the results writer: every finished row is saved at once


def measure(name, case, fn_factory, results, key, check=None, slow=False, mem=False):
    try:
        t0 = time.time()
        route_fn = fn_factory()
        fwd, fwdbwd = fns(case, route_fn)
        y = fwd()  # compile / warm
        err = None
        if check is not None:
            err = rel(y, check)
        kw = dict(warmup=5, rep=60) if slow else {}
        tf = bench(fwd, **kw)
        tb = bench(fwdbwd, **kw)
        row = {"impl": name, "fwd_ms": tf, "fwdbwd_ms": tb, "rel_err_vs_ref": err,
               "fwd_GBs": case.bytes_fwd() / (tf * 1e-3) / 1e9,
               "fwdbwd_GBs": (case.bytes_fwd() + case.bytes_bwd()) / (tb * 1e-3) / 1e9,
               "setup_s": time.time() - t0}
        if GRAPH_REPLAY[0]:
            # the same call replayed from a CUDA graph: no host time, for ours and the peers alike
            try:
                row["fwdbwd_graph_ms"] = bench_graph(fwdbwd)
                row["fwdbwd_graph_GBs"] = (case.bytes_fwd() + case.bytes_bwd()) / (row["fwdbwd_graph_ms"] * 1e-3) / 1e9
            except Exception as e:
                row["graph_skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                log(f"  {name:>22}: graph replay failed ({row['graph_skipped']})")
        if mem:
            row["peak_extra_x_sources"] = peak_extra(case, route_fn)
        if name.startswith("mhar-triton"):
            try:
                row["fwd_gpu_ms"] = gpu_ms(fwd)
                row["fwdbwd_gpu_ms"] = gpu_ms(fwdbwd)
                row["fwdbwd_gpu_GBs"] = (case.bytes_fwd() + case.bytes_bwd()) / (row["fwdbwd_gpu_ms"] * 1e-3) / 1e9
            except Exception as e:
                log(f"  profiler failed: {e!r}")
        results.setdefault(key, []).append(row)
        log(f"  {name:>22}: fwd {tf:8.3f} ms  fwd+bwd {tb:8.3f} ms  ({row['fwdbwd_GBs']:.0f} GB/s)  err {err}")
        return y
    except Exception as e:  # a peer that cannot run a shape is skipped, with the reason
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        results.setdefault(key, []).append({"impl": name, "skipped": msg})
        log(f"  {name:>22}: skipped ({msg})")
        if os.environ.get("BENCH_TRACE"):
            traceback.print_exc()
        return None
    finally:
        torch.cuda.empty_cache()
        _SAVE[0]()


def whole_step(case, heads, chunk):
    """All 2L+1 sites of one step (site j reads sources 0..j-1), fwd+bwd.
    chunk=None: one-pass reads. chunk=S: two-phase, phase 1 over the sources that exist
    at the start of each chunk of S sites (one call, S queries), phase 2 per site."""
    n = case.n
    d = case.d
    gen = torch.Generator(device="cuda").manual_seed(1)
    Q = (torch.randn(n, d, device="cuda", generator=gen) * (2 / math.sqrt(d))).requires_grad_()
    G = (1 + 0.1 * torch.randn(n, d, device="cuda", generator=gen)).requires_grad_()
    wrt = [*case.srcs, Q, G]

    def step():
        # the sources registered with a GradientSink, as the routed stream does
        sink = routing.GradientSink()
        srcs = [sink.register(s) for s in case.srcs]
        scales = routing.KeyScales()  # each source's key-norm scales, once per step, as the routed stream
        outs = []
        if chunk is None:
            for j in range(1, n + 1):
                outs.append(routing.route(srcs[:j], Q[j - 1], G[j - 1], heads, sink=sink.span(0, j)))
        else:
            for j0 in range(1, n + 1, chunk):
                j1 = min(n + 1, j0 + chunk)
                rows = routing.route_partial_rows(srcs[:j0], Q[j0 - 1:j1 - 1], G[j0 - 1:j1 - 1], heads,
                                                  sink=sink.span(0, j0), scales=scales)  # as the routed stream
                for j in range(j0, j1):
                    one = rows[j - j0]
                    if j > j0:  # phase 2, fused: merged with the phase-1 row and normalised in one pass
                        outs.append(routing.route_merge(one, srcs[j0:j], Q[j - 1], G[j - 1], heads,
                                                        sink=sink.span(j0, j - j0), scales=scales))
                    else:
                        outs.append(routing.finalize(one, srcs[0].shape, srcs[0].dtype)[0])
        loss = sum((o * case.gy).float().sum() for o in outs)
        return torch.autograd.grad(loss, wrt)

    t = bench(step, warmup=100, rep=1000)  # ms of running each, as triton.testing.do_bench takes them
    return t, kernel_breakdown(step)


def whole_step_floor(d, n, tokens, chunk=None, heads=1, split=None):
    """Bytes the routing kernels of ``whole_step`` must move (bf16 sources, fp32 partials),
    as a dict: 'total', and for two-phase 'gather' (the phase-1 gather passes alone),
    'forward' (phase 1 and phase 2's forward kernels), 'phase1' (phase 1's forward alone)
    and 'coef' (the COEF passes alone).
    One-pass, per site: its sources read, their running sums read and written, the
    output written, and in backward its gradient and the output read. Two-phase, per
    chunk: phase 1 reads the old sources once and writes S fp32 partial rows; the COEF
    pass reads the sources and the S sites' bf16 upstream gradients (the rows in final
    form, session 17; fp32 rows of the partial's gradient before); the gather reads both
    again plus the running sums (read and write) and the coefficients; per site, phase 2
    reads the new sources (and their sums in backward) and its fp32 phase-1 row, writes
    the output, and in backward reads its gradient and the output (the (tokens, H)
    statistics left out throughout). ``split`` (default: several heads; session 18's
    phase-1 kernels with a head per program): each source read once more per step for its
    key-norm scales (op.KeyScales), and c stored per head."""
    r2, r4 = tokens * d * 2, tokens * d * 4
    if chunk is None:
        return {"total": sum(j * r2 + r2 + 2 * r2 + 3 * j * r2 for j in range(1, n + 1))}
    split = heads > 1 if split is None else split
    total = forward = n * r2 if split else 0  # the key-norm scales
    gather = phase1 = coef_pass = 0
    for j0 in range(1, n + 1, chunk):
        s = min(n + 1, j0 + chunk) - j0
        forward += j0 * r2 + s * r4 + sum(k * r2 + r4 + r2 for k in range(s))  # phase 1, phase 2
        phase1 += j0 * r2 + s * r4
        total += j0 * r2 + s * r4  # phase 1
        if s == 1:  # one query: the one-query backward (sources, sums, upstream row)
            total += 3 * j0 * r2 + r4
        else:
            coef = j0 * s * tokens * (3 * heads if split else 2 * heads + 1) * 4  # a, r dz (and c) per head
            g = j0 * r2 + s * r2 + 2 * j0 * r2 + coef  # gather: sources, upstream rows, sums, coefficients
            total += j0 * r2 + s * r2 + coef + g  # the COEF pass, then the gather
            gather += g
            coef_pass += j0 * r2 + s * r2 + coef
        for k in range(s):  # k new sources at the chunk's (k+1)-th site
            total += k * r2 + r4 + r2 + 2 * r2 + 3 * k * r2
    return {"total": total, "gather": gather, "forward": forward, "phase1": phase1, "coef": coef_pass}


def block_step_floor(d, sublayers, tokens, block):
    """Bytes of block routing's one-pass reads over a step (the routed stream's
    block form, blocks of ``block`` sublayers), per site as ``whole_step_floor``'s
    one-pass: site i reads the embedding, the completed blocks and, after a block's
    first sublayer, the block's running sum; the final site reads every summary. The
    running sum's own adds (an elementwise pass per sublayer) are not routing and are
    left out."""
    r2 = tokens * d * 2
    total = 0
    for i in range(sublayers + 1):
        j = 1 + i // block + (1 if i < sublayers and i % block else 0)
        if i == sublayers:
            j = 1 + -(-sublayers // block)
        total += j * r2 + r2 + 2 * r2 + 3 * j * r2
    return total


def print_floors(tokens, copy_gbs, chunk):
    ms = lambda b: f"{b / 1e9:.1f} ({b / copy_gbs / 1e6:.1f})"  # noqa: E731
    print(f"| d/N/H | one-pass GB (ms) | two-phase S={chunk} GB (ms) | its forward GB (ms) | of it phase 1 GB (ms) "
          "| its COEF passes GB (ms) | its gather passes GB (ms) |")
    print("|---|---|---|---|---|---|---|")
    for d, L in SHAPES:
        n = 2 * L + 1
        for h in (1, 8):
            one = whole_step_floor(d, n, tokens)["total"]
            two = whole_step_floor(d, n, tokens, chunk, h)
            print(f"| {d}/{n}/H{h} | {ms(one)} | {ms(two['total'])} | {ms(two['forward'])} | {ms(two['phase1'])} "
                  f"| {ms(two['coef'])} | {ms(two['gather'])} |")
    print("\n| d/sublayers | block routing, 8 blocks, one-pass GB (ms) |\n|---|---|")
    for d, L in SHAPES:
        block = -(-2 * L // 8)
        print(f"| {d}/{2 * L} (blocks of {block}) | {ms(block_step_floor(d, 2 * L, tokens, block))} |")


def write_phase1_config(results, path):
    """The fastest two-phase config (kernel time: the phase-1 backward's settings and the
    kernels' warps) for each width and head kind of the whole-step rows so far, as
    MHAR_ROUTING_CONFIG entries ("WIDTH,MULTI_HEAD"; the paper widths are their own
    padded widths)."""
    picks = {}
    for key, rows in results["whole_step"].items():
        d, _, h = key.split("/")
        two_phase = [r for r in rows if r["schedule"] != "one-pass"]
        if two_phase:
            best = min(two_phase, key=lambda r: r["kernel_ms"])
            picks[f"{d},{int(int(h[1:]) > 1)}"] = best["phase1"]
    with open(path, "w") as f:
        json.dump(picks, f, indent=1)
    log(f"phase-1 picks -> {path}: {picks}")


def kernel_breakdown(fn, iters=2):
    """Device time per call of fn, in all and per kernel (the top 8 by time), from the
    profiler: excludes host overhead."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as prof
    fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    per = {}
    for e in p.key_averages():
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)
        if us:
            per[e.key] = (us / iters / 1000.0, e.count // iters)
    top = sorted(per.items(), key=lambda kv: -kv[1][0])[:8]
    # the routing kernels' launches of the first profiled call, in order (us each)
    events = sorted((e for e in p.events() if e.device_type == DeviceType.CUDA and e.name.startswith("_")),
                    key=lambda e: e.time_range.start)
    return {"kernel_ms": sum(v[0] for v in per.values()),
            "top": [{"name": k[:60], "ms": round(v[0], 3), "calls": v[1]} for k, v in top],
            "launches": [[e.name, round(e.time_range.elapsed_us(), 1)] for e in events[:len(events) // iters]]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/routing_h200.json")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--shapes", default="all")
    ap.add_argument("--heads", default="1,8,16")
    ap.add_argument("--no-compiled", action="store_true")
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--no-step", action="store_true")
    ap.add_argument("--step-only", action="store_true", help="only the whole step (no per-call rows)")
    ap.add_argument("--no-peers", action="store_true", help="skip fla and liger")
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--no-one-pass", action="store_true", help="the whole step two-phase only (no one-pass rows)")
    ap.add_argument("--phase1", default="", metavar="JSON",
                    help='the whole step\'s phase-1 backward configs, {label: config or null}, instead of PHASE1')
    ap.add_argument("--tune", action="store_true", help="sweep kernel tile sizes first")
    ap.add_argument("--profile", action="store_true", help="print a kernel-time breakdown of one fwd+bwd")
    ap.add_argument("--variants", action="store_true", help="also time our kernels with other tile configs")
    ap.add_argument("--variant-configs", default="", metavar="JSON",
                    help='with --variants: the configs to time, {"name": {config}, ...} (a JSON string or @file), '
                         'e.g. \'{"pad": {"pad_heads": true}, "bwd 2 warps": {"bwd_warps": 2}}\'')
    ap.add_argument("--write-config", default="", help="after --tune, write the chosen tile configs here (JSON for "
                    "MHAR_ROUTING_CONFIG / mhar.routing.op.load_config_table)")
    ap.add_argument("--write-phase1-config", default="",
                    help="after the whole step, write the fastest phase-1 backward per width and head kind "
                         "(least kernel time among the two-phase rows) here (JSON for MHAR_ROUTING_CONFIG)")
    ap.add_argument("--graph-replay", action="store_true",
                    help="also time each per-call fwd+bwd replayed from a CUDA graph (host time excluded), peers too")
    ap.add_argument("--floors", type=float, default=0, metavar="COPY_GBS",
                    help="print the whole step's byte floors at this copy bandwidth (GB/s) and exit (no GPU)")
    ap.add_argument("--compiled-keys", default="512/25/H1,512/25/H8,1024/49/H1",
                    help="d/N/H cases to run torch.compile of the reference on (compiling is slow); 'all'")
    args = ap.parse_args()
    if args.floors:
        return print_floors(args.tokens, args.floors, args.chunk)
    assert torch.cuda.is_available(), "bench/routing.py needs a CUDA GPU"
    GRAPH_REPLAY[0] = args.graph_replay
    if args.phase1:
        PHASE1[:] = [(f", {name}" if name else "", cfg) for name, cfg in json.loads(args.phase1).items()]
    if args.variant_configs:
        text = args.variant_configs
        text = open(text[1:]).read() if text.startswith("@") else text
        VARIANTS[:] = [(f"mhar-triton {name}", cfg) for name, cfg in json.loads(text).items()]
    routing.set_backend("auto")
    import triton

    meta = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "commit": source_commit(short=False),
            "tokens": args.tokens, "dtype": "bfloat16", "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    for mod, dist in (("fla", "fla-core"), ("liger_kernel", "liger-kernel")):
        try:
            m = __import__(mod)
            # liger has no __version__: the installed distribution's
            meta[mod] = getattr(m, "__version__", None) or importlib.metadata.version(dist)
        except Exception as e:
            meta[mod] = f"unavailable ({type(e).__name__})"
    log(json.dumps(meta))
    copy_gbs, copy_ms = copy_bandwidth()
    meta["copy_GBs"] = copy_gbs
    log(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    heads_list = [int(h) for h in args.heads.split(",")]
    shapes = SHAPES if args.shapes == "all" else [tuple(int(v) for v in s.split("/")) for s in args.shapes.split(",")]
    results = {"meta": meta, "per_call": {}, "whole_step": {}, "tune": {}}

    def save():
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
        write_md(results, args.out[:-5] + ".md")

    _SAVE[0] = save
    for d, L in shapes:
        n = 2 * L + 1
        case = Case(d, n, args.tokens, heads_list)
        log(f"== d={d} L={L} N={n} tokens={args.tokens}")
        if args.tune:
            tune(case, results, f"{d}/{n}")
            save()
            if args.write_config:
                with open(args.write_config, "w") as f:
                    json.dump({f"{w},{int(m)}": c for (w, m), c in rop.CONFIG_TABLE.items()}, f, indent=1)
        if args.profile:
            for h in (1, 8):
                profile(case, h)
        for h in ([] if args.step_only else heads_list):
            key = f"{d}/{n}/H{h}"
            with torch.no_grad():
                refy = R.route(case.srcs, case.q, case.g, h)
            measure("mhar-triton", case, lambda: ours(h), results["per_call"], key, check=refy, mem=True)
            if args.variants:
                for vname, cfg in VARIANTS:
                    rop.TUNE = cfg
                    measure(vname, case, lambda: ours(h), results["per_call"], key, check=refy)
                    rop.TUNE = None
            if not args.no_eager and h in (1, 8):
                measure("eager-reference", case, lambda: eager_ref(h), results["per_call"], key, slow=True, mem=True)
            if not args.no_compiled and h in (1, 8) and (args.compiled_keys == "all" or key in args.compiled_keys.split(",")):
                measure("compiled-reference", case, lambda: compiled_ref(h), results["per_call"], key, check=refy)
            del refy
            save()
        if 1 in heads_list and not args.no_peers and not args.step_only:
            # the peers last: liger at 1280/73 takes minutes, and a run cut by its time
            # limit should still have every head count of ours
            key = f"{d}/{n}/H1"
            with torch.no_grad():
                refy = R.route(case.srcs, case.q, case.g, 1)
            measure("fla fused_attnres", case, peer_fla, results["per_call"], key, check=refy, mem=True)
            measure("liger attn_res", case, peer_liger, results["per_call"], key, check=refy, mem=True)
            del refy
        if not args.no_step:
            for h in [h for h in (1, 8) if h in heads_list]:
                # one-pass, then two-phase with each phase-1 backward (see op._PHASE1_BACKWARD)
                one_pass = () if args.no_one_pass else ((None, "", None),)
                for chunk, label, override in (*one_pass, *((args.chunk, lab, t) for lab, t in PHASE1)):
                    rop.TUNE = override
                    try:
                        t, kern = whole_step(case, h, chunk)
                        name = "one-pass" if chunk is None else f"two-phase S={chunk}{label}"
                        results["whole_step"].setdefault(f"{d}/{n}/H{h}", []).append(
                            {"schedule": name, "fwdbwd_ms": t, **kern,
                             # the phase-1 config it ran (the paper widths are their padded widths)
                             "phase1": {k: rop._cfg(d, h > 1).get(k)
                                        for k in (*rop._PHASE1_BACKWARD, *rop._PHASE1_DOT, "fwd_warps",
                                                  "bwd_warps", "bwd_sum_warps")}})
                        log(f"  whole step H={h} {name}: {t:.2f} ms wall, {kern['kernel_ms']:.2f} ms kernels")
                        for k in kern["top"]:
                            log(f"    {k['ms']:8.3f} ms {k['calls']:4d}x {k['name']}")
                    except Exception as e:
                        log(f"  whole step failed: {e!r}")
                    rop.TUNE = None
                    torch.cuda.empty_cache()
            save()
            if args.write_phase1_config:
                write_phase1_config(results, args.write_phase1_config)
        del case
        torch.cuda.empty_cache()
    results["config_table"] = {f"{k[0]}{'/multi-head' if k[1] else '/one head'}": v for k, v in rop.CONFIG_TABLE.items()}
    save()
    log(open(args.out[:-5] + ".md").read())


def profile(case, heads):
    from torch.profiler import ProfilerActivity, profile as prof
    _, fwdbwd = fns(case, ours(heads))
    fwdbwd()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            fwdbwd()
        torch.cuda.synchronize()
    log(f"-- profile H={heads} (3 x fwd+bwd)")
    log(p.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=40))


VARIANTS = [("mhar-triton pf1", {"fwd_pf": 1, "bwd_pf": 1})]
# (elements per tile, warps, prefetch depth[, backward programs per SM])
FWD_CONFIGS = [(1024, 1, 1), (1024, 2, 1), (1024, 4, 1), (2048, 4, 1), (1024, 2, 2)]
BWD_CONFIGS = [(1024, 1, 1, 16), (1024, 2, 1, 16), (1024, 4, 1, 8), (1024, 4, 2, 8), (2048, 4, 1, 8),
               (1024, 2, 2, 16)]
# the whole step's two-phase rows: the default configs, other gather settings (sources
# per program, the product's precision for bf16) and the two-phase kernels' warps.
# Session 4's other candidates (split-column, tensor-core, queries-tile, token-major
# gather) were slower and are gone
# (bench/results/history/routing_h200_session4.md); so are the gathers of sessions 5-8
# and session 9's first one and its prefetch (see _bwd_gather_kernel), whose rows are in
# routing_h200.md and session9/. --phase1 replaces this list.
PHASE1 = [("", None)] + [(", " + name, cfg) for name, cfg in (
    ("gather tf32", {"gather_precision": "tf32"}),
    # phase 1's rows as autograd views, whose gradients autograd stacks (before session 12)
    ("rows stacked by autograd", {"direct_rows": False}),
    # the forward and backward kernels' warps in the whole step (the per-call sweep
    # picked them; with 8 heads they carry most of the gap to one head)
    ("fwd 1 warp", {"fwd_warps": 1}), ("fwd 2 warps", {"fwd_warps": 2}),
    ("bwd 1 warp", {"bwd_warps": 1}), ("bwd 2 warps", {"bwd_warps": 2}),
    # phase 1's forward with one program per query, and as products without the pipeline,
    # and the COEF pass likewise (session 11, op's "fwd_dot" and "coef_dot", the defaults
    # for several heads of 128 lanes or fewer)
    ("fwd one program per query", {"fwd_dot": False}), ("COEF one program per query", {"coef_dot": False}),
    ("as products, one stage", {"dot_stages": 1}))]
# (the S-query loop, {"bwd_twopass": False}, measured 1.6-2x slower at cf14cbd)


def tune(case, results, key):
    """Sweep tile configs (elements per tile, warps, prefetch depth, backward programs
    per SM) for the forward and backward kernels alone (launched directly; the backward
    adding into running sums, as in training), at H = 1 and 8; the fastest for each goes
    into the library's table (one head, several heads)."""
    d = case.d
    q1, g1 = case.q.detach()[None], case.g.detach()[None]
    sink = routing.GradientSink()
    sink.buffers = [torch.zeros_like(s) for s in case.srcs]  # running sums that already exist
    sums = sink.span(0, case.n)
    rows = []
    choice = {1: {}, 8: {}}
    for kind, configs in (("fwd", FWD_CONFIGS), ("bwd", BWD_CONFIGS)):
        for h in (1, 8):
            times = {}
            for cfg in configs:
                names = ("elems", "warps", "pf", "progs_per_sm")[:len(cfg)]
                named = {f"{kind}_{n}": v for n, v in zip(names, cfg)}
                rop.TUNE = named
                try:
                    if kind == "fwd":
                        t = bench(lambda: rop._triton_forward(case.srcs, q1, g1, h, 1e-6, True), rep=40)
                    else:
                        # the backward as the routed stream runs it (all but a step's first
                        # call): every source's gradient added into a running sum in-kernel
                        y, lse = rop._triton_forward(case.srcs, q1, g1, h, 1e-6, True)
                        t = bench(lambda: rop._triton_backward(case.srcs, q1, g1, case.gy[None], lse[None], None, y,
                                                               h, 1e-6, sums), rep=40)
                except Exception as e:
                    log(f"  tune {kind} {cfg} H={h}: failed {e!r}")
                    t = float("inf")
                rop.TUNE = None
                times[cfg] = (t, named)
                rows.append({"kind": kind, "H": h, **dict(zip(names, cfg)), "ms": t})
                log(f"  tune {kind} H={h} {dict(zip(names, cfg))}: {t:.3f} ms")
            choice[h].update(min(times.values(), key=lambda v: v[0])[1])
    for h in (1, 8):
        rop.CONFIG_TABLE[(rop.padded_width(d, h), h > 1)] = choice[h]
        log(f"  chosen for d={d} H={h}: {choice[h]}")
    results["tune"][key] = {"rows": rows, "choice": {f"H{h}": c for h, c in choice.items()}}


def gpu_ms(fn, iters=3):
    """Device (kernel) time per call from the profiler: excludes host overhead."""
    return kernel_breakdown(fn, iters)["kernel_ms"]


def _graph_cell(row, copy):
    if "fwdbwd_graph_ms" in row:
        return f"{row['fwdbwd_graph_ms']:.3f} ({100 * row['fwdbwd_graph_GBs'] / copy:.0f}%)"
    return f"failed: {row['graph_skipped']}" if "graph_skipped" in row else ""


def write_md(results, path):
    meta = results["meta"]
    copy = meta.get("copy_GBs", float("nan"))
    lines = ["# Routing benchmark", "",
             f"- command: `{meta['command']}`", f"- device: {meta['device']}; torch {meta['torch']}, triton {meta['triton']}, "
             f"python {meta['python']}; fla {meta.get('fla')}, liger-kernel {meta.get('liger_kernel')}",
             f"- commit: {meta['commit']}; date {meta['date_utc']} UTC; {meta['tokens']} tokens, {meta['dtype']}",
             f"- device-to-device copy: {copy:.0f} GB/s (bytes read + written)", "",
             "## Per call (one site over N = 2L+1 sources)", "",
             "Wall times are CUDA-event medians of the whole call (host overhead included); "
             "kernel ms is device time from the profiler (ours only); graph replay (with --graph-replay) is "
             "the call replayed from a CUDA graph, host time excluded, for every implementation.", "",
             "| d/N/H | impl | fwd ms | fwd+bwd ms | fwd+bwd GB/s | % of copy | kernel fwd / fwd+bwd ms | kernel % of copy "
             "| peak extra (x sources) | rel err | graph replay fwd+bwd ms (% of copy) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, rows in results["per_call"].items():
        for r in rows:
            if "skipped" in r:
                lines.append(f"| {key} | {r['impl']} | skipped: {r['skipped']} | | | | | | | | |")
                continue
            pk = r.get("peak_extra_x_sources")
            err = r.get("rel_err_vs_ref")
            kg = (f"{r['fwd_gpu_ms']:.3f} / {r['fwdbwd_gpu_ms']:.3f}" if "fwdbwd_gpu_ms" in r else "")
            kp = f"{100 * r['fwdbwd_gpu_GBs'] / copy:.0f}%" if "fwdbwd_gpu_GBs" in r else ""
            lines.append(f"| {key} | {r['impl']} | {r['fwd_ms']:.3f} | {r['fwdbwd_ms']:.3f} | {r['fwdbwd_GBs']:.0f} | "
                         f"{100 * r['fwdbwd_GBs'] / copy:.0f}% | {kg} | {kp} | {'' if pk is None else f'{pk:.2f}'} | "
                         f"{'' if err is None else f'{err:.1e}'} | {_graph_cell(r, copy)} |")
    if results.get("tune"):
        lines += ["", "## Tile configs chosen by the sweep (per d, the fastest at H = 1 and at H = 8)", ""]
        for key, t in results["tune"].items():
            lines.append(f"- {key}: {t['choice']}")
    if results["whole_step"]:
        lines += ["", "## Whole step (all 2L+1 sites, fwd+bwd)", "",
                  "Wall: CUDA-event median; kernels: profiler device time; top kernels: ms (calls) per step.", "",
                  "| d/N/H | schedule | wall ms | kernel ms | top kernels |", "|---|---|---|---|---|"]
        for key, rows in results["whole_step"].items():
            for r in rows:
                top = "; ".join(f"{k['name'][:40]} {k['ms']:.1f} ({k['calls']})" for k in r.get("top", [])[:3])
                lines.append(f"| {key} | {r['schedule']} | {r['fwdbwd_ms']:.2f} | {r.get('kernel_ms', float('nan')):.2f} "
                             f"| {top} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
