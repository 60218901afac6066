"""Registers, stack and shared memory of the routing kernels, compiled offline for sm_90 (no GPU needed).

Compiles each kernel with triton's own compiler for an H100/H200 target (or, with --arch,
an A100's or a 100 KB-shared-memory GPU's), as the launcher
would specialise it at the paper widths (bf16 sources, 16-byte aligned tables, every lane
valid), and reads the cubin's resource usage with the cuobjdump that ships with triton.
It also counts the layout conversions in the compiled TTGIR, and those inside loop bodies
(once per iteration: per source in the source loops), with the largest tensor they move,
the asynchronous copies (cp.async: loads triton's pipeliner fetches ahead, once per
stage), and each SASS loop's instructions and barriers per warp and iteration (with
``--opcodes``, also its most frequent opcodes: where the instructions go).
The numbers quoted in docs/kernels.md and bench/results/ for register pressure come from
this script (run with triton 3.6, the GPU machine's version).

    PYTHONPATH=src python bench/compile_sm90.py                    # every kernel below
    PYTHONPATH=src python bench/compile_sm90.py --kernels twopass --gather-sources 4 --gather-warps 2
    PYTHONPATH=src python bench/compile_sm90.py --kernels dot     # phase 1 as matrix products
    PYTHONPATH=src python bench/compile_sm90.py --kernels dot --shapes 1280/1   # one head: one tile, lane groups
    PYTHONPATH=src python bench/compile_sm90.py --kernels twopass --shapes 1280/8 --maxnreg 128 --opcodes
    PYTHONPATH=src python bench/compile_sm90.py --kernels hyper   # the hyper-connection glue
    PYTHONPATH=src python bench/compile_sm90.py --kernels adamw   # the fused AdamW
    PYTHONPATH=src python bench/compile_sm90.py --kernels residency --shapes 512/8,1024/8,1280/8
    PYTHONPATH=src python bench/compile_sm90.py --kernels residency --arch 89   # an L40S / RTX 4090's limits
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from mhar.routing import occupancy
from mhar.routing import triton_kernels as tk
from mhar.routing.op import (_PHASE1_BACKWARD, _PHASE1_DOT, _chunk_lanes, _chunks_first, _gather_walk, _head_parts, _pow2,
                             _split_width)

SHAPES = [(512, 8), (1024, 1), (1024, 8), (1280, 1), (1280, 8)]
# G: the phase-1 kernels' table of the queries' gradient pointers, typed like gref (bf16
# rows of a phase-1 read's sites in final form, op._RowGrads)
POINTERS = {"table": "*i64", "gtable": "*i64", "ref": "*bf16", "W": "*fp32", "WB": "*bf16", "G": "*i64",
            "gref": "*bf16", "STAT": "*fp32",
            "OFF": "*fp32", "Y": "*bf16", "DW": "*fp32", "OUT_M": "*fp32", "OUT_L": "*fp32", "OUT_O": "*fp32",
            "M0": "*fp32", "L0": "*fp32", "O0": "*fp32", "CA": "*fp32", "CB": "*fp32", "CC": "*fp32",
            "PM": "*fp32", "PGO": "*fp32", "PGL": "*fp32", "RSTD": "*fp32", "GT": "*i64", "CT": "*i64",
            "PC": "*fp32"}
# the COEF pass's coefficients as two bf16 parts (op's coef_parts; --coef-parts): CA and
# CB bf16
PARTS = {"on": _PHASE1_BACKWARD["coef_parts"]}
PARTS_POINTERS = {"CA": "*bf16", "CB": "*bf16"}
SCALARS = {"eps": "fp32"}  # every other runtime argument is an i32
OPTIONS: dict = {}  # compile options from the command line: --stages (num_stages), --maxnreg
DIVISIBLE: set = set()  # integer arguments specialised as multiples of 16 (--divisible)


def resources(fn, constexprs: dict, warps: int, pointers: dict | None = None, maxnreg: int | None = None,
              sass: bool = True) -> dict:
    """pointers: argument types that differ from POINTERS for this kernel; maxnreg: a
    register cap for this compile (else --maxnreg's, if given); sass: also read the SASS
    (its loops and opcodes; a third of the time of a compile)."""
    names = list(fn.arg_names)
    # constexpr parameters left at their defaults are constexprs too
    constexprs = {p.name: p.default for p in fn.params if p.is_constexpr and p.has_default} | constexprs
    types = {**POINTERS, **(pointers or {})}
    sig = {k: "constexpr" if k in constexprs else types.get(k, SCALARS.get(k, "i32")) for k in names}
    # pointers are 16-byte aligned; integer arguments the launcher sees divisible by 16
    # (--divisible) are specialised as such, as triton's launcher does
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in names if k in types or k in DIVISIBLE}
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(k),): v for k, v in constexprs.items()},
                    attrs=attrs)
    options = {"num_warps": warps, **OPTIONS, **({"maxnreg": maxnreg} if maxnreg else {})}
    kernel = triton.compile(src, target=GPUTarget("cuda", ARCH["capability"], 32), options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
        if sass:
            sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    ptx = kernel.asm["ptx"]
    return {"regs": int(re.search(r"REG:(\d+)", out).group(1)), "stack": int(re.search(r"STACK:(\d+)", out).group(1)),
            "shared": kernel.metadata.shared,
            "layout_conversions": kernel.asm["ttgir"].count("convert_layout"),
            "sass_loops": sass_loops(sass) if sass else "-",
            "async_copies": kernel.asm["ttgir"].count("async_copy_global_to_local"),
            "in_loops": loop_conversions(kernel.asm["ttgir"]), "ttgir": kernel.asm["ttgir"],
            "opcodes": loop_opcodes(sass) if sass else "-",
            # memory instructions by width: 16-byte vectors, and 2-byte scalar ones (bf16 without vectorisation)
            "v4": len(re.findall(r"(?:ld|st)\.global[\w.]*\.v4", ptx)),
            "b16": len(re.findall(r"(?:ld|st)\.global[\w.]*\.(?:b16|u16)\b", ptx))}


# The GPU compiled for (--arch): its compute capability and what one SM holds. The
# default is the H100 / H200 (sm_90); the others' limits are CUDA's (shared memory per
# SM, resident blocks and warps per SM) for the A100 (sm_80) and the consumer and
# workstation GPUs (sm_86, sm_89: 100 KB of shared memory).
ARCHS = {90: occupancy.H100,
         80: occupancy.SMLimits(shared=167936, programs=32, warps=64),
         86: occupancy.SMLimits(shared=102400, programs=16, warps=48),
         89: occupancy.SMLimits(shared=102400, programs=24, warps=48)}
ARCH = {"capability": 90}


def resident_per_sm(registers: int, shared: int, warps: int) -> dict:
    """What one SM of the --arch GPU holds of a kernel: the library's rule (CUDA's
    occupancy calculator; mhar.routing.occupancy), which sizes the persistent grids at
    run time too."""
    return occupancy.resident_per_sm(registers, shared, warps, ARCHS[ARCH["capability"]])


def waves(asked: int, fit: int) -> str:
    """How a persistent grid of ``asked`` programs per SM runs when ``fit`` are resident:
    whole waves, or a partial last wave (its programs run at a fraction of the SM's
    occupancy while holding a full share of the work: up to twice the kernel's time)."""
    if fit == 0:
        return "does not fit"
    if asked <= fit:
        return "1"
    return str(asked // fit) if asked % fit == 0 else f"{asked / fit:.2f}: a partial wave"


def _loop_bodies(sass: str) -> list[list[str]]:
    """The instructions of each loop of the SASS (a backward branch and its target), in
    order; an outer loop's body includes its inner loops'."""
    code = [(int(m.group(1), 16), m.group(2)) for line in sass.splitlines()
            for m in [re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)] if m]
    bodies = []
    for addr, ins in code:
        m = re.search(r"\bBRA\s+(?:`\()?(0x[0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < addr:
            bodies.append([i for a, i in code if int(m.group(1), 16) <= a <= addr])
    return bodies


def sass_loops(sass: str) -> str:
    """Each loop of the SASS as "instructions / barriers", per warp and iteration; an outer
    loop's count includes its inner loops'."""
    barrier = re.compile(r"(@!?U?P\w+\s+)?BAR\b")
    loops = [f"{len(body)} / {sum(bool(barrier.match(i)) for i in body)}" for body in _loop_bodies(sass)]
    return ", ".join(loops) or "-"


def loop_opcodes(sass: str, top: int = 12) -> str:
    """Each loop's most frequent opcodes per iteration (predicates and modifiers dropped),
    e.g. "IMAD 137, ISETP 103, ...": where a loop's instructions go (address arithmetic,
    conversions, matrix products, memory)."""
    out = []
    for body in _loop_bodies(sass):
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", i).split()[0].split(".")[0] for i in body)
        out.append(", ".join(f"{op} {n}" for op, n in ops.most_common(top)))
    return "; ".join(out) or "-"


def loop_conversions(ttgir: str, nesting: int = 1) -> str:
    """The layout conversions inside loop bodies nested at least ``nesting`` deep (each runs
    once per iteration: per source in the source loops, which in the persistent backward
    are inside the loop over token tiles), as "count (largest tensor shape)"."""
    depth, loops, found = 0, [], []
    for line in ttgir.splitlines():
        if "convert_layout" in line and len(loops) >= nesting:
            shape = re.search(r"tensor<([\dx]+)x\w+,", line)
            found.append(shape.group(1) if shape else "?")
        opened = depth
        depth += line.count("{") - line.count("}")
        if "scf.for" in line and depth > opened:
            loops.append(depth)
        while loops and depth < loops[-1]:
            loops.pop()
    sizes = sorted(found, key=lambda s: math.prod(int(v) for v in s.split("x") if v.isdigit()))
    return f"{len(found)} ({sizes[-1]})" if found else "0"


def tile(d: int, heads: int) -> dict:
    dh = d // heads
    da, db = _split_width(dh)
    return dict(d=d, dh=dh, H=heads, HP=_pow2(heads), DA=da, DB=db, DC=_chunk_lanes(da, db, heads),
                CF=_chunks_first(), HAS_B=db > 0, EVEN=True, ALIGN=16)


def hyper_rows(row) -> None:
    """The hyper-connection glue's kernels, specialised as the launcher does for paper
    shapes (the stream length K and stride divisible by 16); d and H do not apply."""
    from mhar.streams import hyper
    from mhar.streams import hyper_kernels as hk

    types = {name: "*bf16" for name in ("X", "XOUT", "MIXED", "GX", "GM", "DX", "Y", "OUT", "G", "DY")}
    types.update({name: "*fp32" for name in ("A", "P0", "PM", "B", "PB")}, K="i32", stride_x="i32")
    for fn in (hk._mix_fwd_kernel, hk._mix_bwd_kernel, hk._update_fwd_kernel, hk._update_bwd_kernel):
        r = resources(fn, {"N": 4, "NP": 4, "BLOCK": hyper._BLOCK}, hyper._WARPS, types)
        row(fn.fn.__name__ if hasattr(fn, "fn") else str(fn), "-", "-", hyper._WARPS, r)


def adamw_rows(row) -> None:
    """The fused AdamW kernel (mhar.train.adamw_kernel), as the optimiser launches it."""
    from mhar.train import adamw_kernel as ak

    types = {"CHUNK_T": "*i32", "CHUNK_S": "*i64", "P": "*i64", "G": "*i64", "M": "*i64", "V": "*i64",
             "NUMEL": "*i64", "SCALE": "*fp32"}
    SCALARS.update({k: "fp32" for k in ("decay", "beta1", "one_minus_beta1", "beta2", "one_minus_beta2",
                                        "step_size", "bc2_sqrt")})
    for block, warps in dict.fromkeys(((ak.BLOCK, ak.WARPS), *ADAMW_VARIANTS)):
        r = resources(ak._adamw_kernel, {"BLOCK": block, "ALIGN": 16}, warps, types)
        row(f"_adamw_kernel ({block} elements)", "-", "-", warps, r)


def persistent_launches(d: int, heads: int) -> list[tuple]:
    """The routing's persistent launches (programs that loop over the tokens, as many as
    the config asks per SM) at width d with ``heads`` heads, as the library configures
    them for bf16 rows and phase-1 reads of 8 queries: (name, kernel, constexprs, pointer
    types, warps, register cap, programs asked per SM). Phase 1's product kernels at up to
    their tokens a step (reads of few sources), the fused COEF pass where the config has
    it, and phase 2's backward adding into running sums."""
    import torch

    from mhar.routing import op

    dh, cfg, tile_ = op._geometry(d, heads, 16384, "bwd_sum", 16)
    bf16 = torch.empty(0, dtype=torch.bfloat16)
    out = []
    fwd, coef = (op._dot_tile(cfg, key, dh, heads, 8, 16, bf16) for key in ("fwd_dot", "coef_dot"))
    fwd, coef = (None if t is None else dict(t, d=d) for t in (fwd, coef))  # d: a constexpr the launch passes
    parts = cfg["coef_parts"]
    coef_ptrs = PARTS_POINTERS if parts else None
    if fwd is not None:
        c = dict(fwd, STAGES=cfg["fwd_dot_stages"] or fwd["STAGES"])
        split = cfg["fwd_split"] and heads > 1
        if split:
            c.update(SPLIT=True, SCALES=True, HP=1)
            asked, warps, cap = cfg["fwd_split_progs_per_sm"], cfg["fwd_split_warps"], cfg["fwd_split_maxnreg"]
        else:
            c.update(SCALES=fwd["VH"] and cfg["dot_group_scales"])
            asked, warps, cap = cfg["fwd_dot_progs_per_sm"], cfg["dot_warps"], None
        tokens = cfg["dot_group_tokens" if fwd["VH"] else "dot_tokens"] if c["SCALES"] else 1
        for tok in (1, 2, 4):
            if tok <= tokens:
                out.append((f"phase 1 forward{', a head per program' if split else ''}, {tok} token(s) a step",
                            tk._fwd_dot_kernel, dict(c, TOK=tok), None, warps, cap, asked))
    if coef is not None:
        c = dict(coef, G_EXACT=True, PARTS=parts)
        split = op._coef_split(cfg, heads, 8)
        if split:
            c.update(SPLIT=True, SCALES=True, HP=1)
            asked, warps, cap = cfg["coef_split_progs_per_sm"], cfg["coef_split_warps"], cfg["coef_split_maxnreg"]
            for tok in (1, 2, 4):
                if tok <= cfg["coef_tokens"]:
                    out.append((f"COEF pass, a head per program, {tok} token(s) a step", tk._coef_dot_kernel,
                                dict(c, TOK=tok), coef_ptrs, warps, cap, asked))
            if cfg["coef_grads"]:
                g = dict(c, TOK=1, GRAD=True, GL=min(cfg["coef_grads_lanes"], coef["DA"]), W_LO=cfg["coef_grads_w_lo"],
                         STAGES=cfg["coef_grads_stages"] or c["STAGES"])
                out.append((f"fused COEF pass (GRAD, {g['GL']}-lane pieces)", tk._coef_dot_kernel, g, coef_ptrs,
                            warps, cfg["coef_grads_maxnreg"] or cap, cfg["coef_grads_progs_per_sm"] or asked))
        else:
            c.update(SCALES=coef["VH"] and cfg["dot_group_scales"])
            out.append(("COEF pass", tk._coef_dot_kernel, c, coef_ptrs, cfg["dot_warps"], None,
                        cfg["coef_dot_progs_per_sm"]))
    warps, cap = op._bwd_launch(cfg, True)
    c = dict(tile_, d=d, dh=dh, SINGLE=True, FINAL=True, ACCUM=True, PF=cfg["bwd_pf"], PARTIAL=2, CLAIM=True)
    out.append(("phase 2 backward into running sums", tk._bwd_kernel, c, {"G": "*bf16"}, warps, cap,
                cfg["bwd_progs_per_sm"]))
    return out


def residency_rows(shapes: list[tuple[int, int]]) -> None:
    """A table of the persistent launches at ``shapes`` (``persistent_launches``): what each
    compiles to, how many of its programs an SM holds, and in how many waves the programs
    the config asks for run."""
    print("| launch | d | H | warps | cap | registers | stack bytes | shared bytes | programs an SM holds "
          "(by registers / shared memory) | asked per SM | waves | launched per SM after the first launch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d, heads in shapes:
        for name, fn, c, pointers, warps, cap, asked in persistent_launches(d, heads):
            r = resources(fn, c, warps, pointers, cap, sass=False)
            fit = resident_per_sm(r["regs"], r["shared"], warps)
            print(f"| {name} | {d} | {heads} | {warps} | {cap or '-'} | {r['regs']} | {r['stack']} | {r['shared']} | "
                  f"{fit['fit']} ({fit['registers']} / {fit['shared']}) | {asked} | {waves(asked, fit['fit'])} | "
                  f"{occupancy.whole_waves(asked, fit['fit'])} |", flush=True)


# (elements per program, warps): session 9's 4096 / 8 took 166 registers (one program per
# SM) and ran at half the fused AdamW's speed on the H200 (bench/results/session10/)
ADAMW_VARIANTS = [(4096, 8), (2048, 8), (1024, 4), (512, 4), (2048, 4)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="single,twopass", help="single: the one-query kernels (backward with and "
                    "without running sums); twopass: the two-pass phase-1 backward (COEF pass and gather); hyper: "
                    "the hyper-connection glue (n = 4 streams, bf16, the library's block and 4 warps); adamw: the "
                    "fused AdamW kernel; residency: the routing's persistent launches as the library configures "
                    "them, the programs an SM holds against those the config asks for")
    ap.add_argument("--warps", default="1", help="comma list of warps for the source-loop kernels")
    ap.add_argument("--gather-sources", type=int, default=16, help="sources per gather program (KS)")
    ap.add_argument("--gather-cols", type=int, default=128, help="columns per gather chunk")
    ap.add_argument("--gather-warps", type=int, default=4)
    ap.add_argument("--gather-precision", default=_PHASE1_BACKWARD["gather_precision"],
                    help="the gather's products for bf16 sources: bf16x3 (the library's), tf32x3 or tf32")
    ap.add_argument("--dot-sources", type=int, default=16, help="sources per block of the dot kernels")
    ap.add_argument("--dot-queries", type=int, default=8, help="the dot kernels' padded queries per chunk (SP: the "
                    "two-phase chunk S rounded up to a power of two, at least 8)")
    ap.add_argument("--dot-warps", default="8", help="comma list of warps for the dot kernels (the library's: 8)")
    ap.add_argument("--lane-groups", type=int, default=_PHASE1_DOT["dot_lane_groups"],
                    help="one head's lane groups in the dot kernels (op's dot_lane_groups; 0: none)")
    ap.add_argument("--dot-precision", default="bf16x2", help="comma list of the dot kernels' input precisions "
                    "(the library uses bf16x2; tl.dot's tf32x3 overflows shared memory in the COEF pass)")
    ap.add_argument("--shapes", default=",".join(f"{d}/{h}" for d, h in SHAPES), help="comma list of d/H")
    ap.add_argument("--stages", type=int, default=0, help="num_stages (default: triton's)")
    ap.add_argument("--maxnreg", type=int, default=0, help="a register cap per thread for every kernel (triton's "
                    "maxnreg; the library caps the gather at 96 at d = 1280: op.CONFIG_TABLE)")
    ap.add_argument("--coef-parts", choices=("on", "off"), help="the COEF passes and the gather with the "
                    "coefficients as two bf16 parts or as fp32 (op's coef_parts; default: the library's setting, on)")
    ap.add_argument("--opcodes", action="store_true", help="after the table, each kernel's loops' most frequent "
                    "SASS opcodes per iteration")
    ap.add_argument("--tokens", default="1", help="comma list of tokens at a time (TOK) for the split product "
                    "kernels and the gather (op's dot_tokens, gather_tokens: reads of at most 16 / TOK sources)")
    ap.add_argument("--divisible", default="", help="comma list of integer arguments to compile as multiples of 16, "
                    "as triton's launcher specialises them when they are (e.g. n_tok,n_q for 16 queries)")
    ap.add_argument("--arch", type=int, default=90, choices=sorted(ARCHS), help="the compute capability to compile "
                    "for and whose SM limits to apply (90: H100 / H200; 80: A100; 86, 89: 100 KB of shared memory)")
    args = ap.parse_args()
    ARCH["capability"] = args.arch
    DIVISIBLE.update(v for v in args.divisible.split(",") if v)
    tokens = [int(v) for v in args.tokens.split(",")]
    if args.coef_parts:
        PARTS["on"] = args.coef_parts == "on"
    if args.stages:
        OPTIONS["num_stages"] = args.stages
    if args.maxnreg:
        OPTIONS["maxnreg"] = args.maxnreg
    shapes = [tuple(int(v) for v in x.split("/")) for x in args.shapes.split(",")]
    kinds = args.kernels.split(",")
    if "residency" in kinds:
        residency_rows(shapes)
        kinds.remove("residency")
        if not kinds:
            return
        print()
    print("| kernel | d | H | warps | registers | stack bytes | shared bytes | layout conversions "
          "| of them in loops (largest) | asynchronous copies | 16-byte / 2-byte memory ops "
          "| SASS loops: instructions / barriers |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    opcodes: list[str] = []

    def row(name, d, heads, w, r):
        print(f"| {name} | {d} | {heads} | {w} | {r['regs']} | {r['stack']} | {r['shared']} | "
              f"{r['layout_conversions']} | "
              f"{r['in_loops']} | {r['async_copies']} | {r['v4']} / {r['b16']} | {r['sass_loops']} |", flush=True)
        if args.opcodes:
            opcodes.append(f"- {name} ({d}/{heads}, {w} warps): {r['opcodes']}")

    for kind in kinds:
        if kind == "hyper":
            hyper_rows(row)
            continue
        if kind == "adamw":
            adamw_rows(row)
            continue
        for d, heads in shapes:
            for w in [int(v) for v in args.warps.split(",")] if kind in ("single", "twopass") else []:
                if kind == "single":
                    c = dict(tile(d, heads), BM=1, PF=1, FINAL=True, SCALE_OUT=None)
                    row("_fwd_kernel", d, heads, w, resources(tk._fwd_kernel, c, w))
                    # phase 2 (a phase-1 row to start from), writing its newest source's
                    # key-norm scales (op's merge_scales)
                    c = dict(tile(d, heads), BM=1, PF=1, FINAL=True, INIT=True, LAST_SCALE=True)
                    row("_fwd_kernel (phase 2, scales)", d, heads, w,
                        resources(tk._fwd_kernel, c, w, {"SCALE_OUT": "*fp32"}))
                    for accum in (False, True):
                        c = dict(tile(d, heads), BM=1, PF=1, SINGLE=True, FINAL=True, ACCUM=accum, COEF=False,
                                 PARTIAL=False)
                        r = resources(tk._bwd_kernel, c, w, {"G": "*bf16"})  # a final read's grad_y
                        row(f"_bwd_kernel{' (sums)' if accum else ''}", d, heads, w, r)
                elif kind == "twopass":
                    c = dict(tile(d, heads), BM=1, PF=1, SINGLE=True, FINAL=False, ACCUM=False, COEF=True,
                             PARTIAL=False, PARTS=PARTS["on"])
                    row("_bwd_kernel (COEF)", d, heads, w,
                        resources(tk._bwd_kernel, c, w, PARTS_POINTERS if PARTS["on"] else None))
            if kind == "dot":  # phase 1's forward and COEF pass as matrix products (op's fwd_dot, coef_dot)
                t = tile(d, heads)
                pa, pb = _head_parts(t["dh"])
                c = dict(d=d, dh=t["dh"], H=heads, HP=t["HP"], DA=pa, DB=pb, KS=args.dot_sources,
                         SP=args.dot_queries, ALIGN=16)
                for w in [int(v) for v in args.dot_warps.split(",")]:
                    for prec in args.dot_precision.split(","):
                        for fn in (tk._fwd_dot_kernel, tk._coef_dot_kernel):
                            for stages in (1, 3):
                                exact = {"G_EXACT": prec == "bf16x2", "PARTS": PARTS["on"] and prec == "bf16x2"} \
                                    if fn is tk._coef_dot_kernel else {}
                                row(f"{fn.fn.__name__} ({args.dot_sources} sources, {prec}, {stages} stages)", d,
                                    heads, w, resources(fn, dict(c, PREC=prec, STAGES=stages, **exact), w,
                                                        PARTS_POINTERS if exact.get("PARTS") else None))
                            g = args.lane_groups
                            if heads == 1 and g > 1 and d % g == 0:  # one head as lane groups (VH)
                                ga, gb = _head_parts(d // g)
                                for scales, stages in ((False, 3), (True, 2), (True, 3)):
                                    # the forward reading the scales can take several tokens (dot_group_tokens)
                                    toks = tokens if scales and fn is tk._fwd_dot_kernel else [1]
                                    for tok in toks:
                                        cg = dict(c, dh=d // g, H=g, HP=_pow2(g), DA=ga, DB=gb, PREC=prec,
                                                  STAGES=stages, VH=True, SCALES=scales, TOK=tok, **exact)
                                        many = f", {tok} tokens at a time" if tok > 1 else ""
                                        row(f"{fn.fn.__name__} ({args.dot_sources} sources, {prec}, {stages} stages, "
                                            f"{g} lane groups{', scales read' if scales else ''}{many})", d, heads, w,
                                            resources(fn, cg, w, PARTS_POINTERS if exact.get("PARTS") else None))
                            if heads > 1:  # a head per program (fwd_split, coef_split)
                                for sw, stages in ((1, 1), (1, 3), (2, 3)):
                                    for tok in tokens:
                                        many = f", {tok} tokens at a time" if tok > 1 else ""
                                        row(f"{fn.fn.__name__} ({args.dot_sources} sources, {prec}, {stages} stages,"
                                            f" a head per program{many})", d, heads, sw,
                                            resources(fn, dict(c, HP=1, PREC=prec, STAGES=stages, SPLIT=True,
                                                               SCALES=True, TOK=tok, **exact),
                                                      sw, PARTS_POINTERS if exact.get("PARTS") else None))
                                    if fn is tk._coef_dot_kernel and exact.get("G_EXACT"):  # coef_grads
                                        row(f"{fn.fn.__name__} ({args.dot_sources} sources, {prec}, {stages} stages,"
                                            f" a head per program, gradients formed: GRAD)", d, heads, sw,
                                            resources(fn, dict(c, HP=1, PREC=prec, STAGES=stages, SPLIT=True,
                                                               SCALES=True, TOK=1, GRAD=True, GL=min(64, pa),
                                                               **exact), sw,
                                                      PARTS_POINTERS))
            if kind == "twopass":
                t = tile(d, heads)
                ks = args.gather_sources
                geo = _gather_walk(d, t["dh"], args.gather_cols)
                # bf16 gradient rows (a phase-1 read's sites in final form): EXACT, as the library;
                # c in a part per head when the COEF pass runs a head per program (CH); the
                # sources and sums as products as the library's default (XDOT)
                for tok in tokens:  # TOK tokens per program: NSEG segments of gradient and w rows (op's)
                    c = dict(d=d, dh=t["dh"], H=heads, **geo, KS=ks, SP=8, ALIGN=16, ACCUM=True,
                             PREC=args.gather_precision, EXACT=True, CH=heads, XDOT=_PHASE1_BACKWARD["gather_xdot"],
                             PARTS=PARTS["on"], TOK=tok, NSEG=_pow2(tok + 2))
                    many = f", {tok} tokens per program" if tok > 1 else ""
                    row(f"_bwd_gather_kernel ({ks} sources, chunks of {args.gather_cols}, {args.gather_precision}"
                        f"{many})", d, heads, args.gather_warps,
                        resources(tk._bwd_gather_kernel, c, args.gather_warps,
                                  PARTS_POINTERS if PARTS["on"] else None))
    if opcodes:
        print("\nThe loops' most frequent SASS opcodes per iteration (per warp; loops as in the last column):")
        print("\n".join(opcodes))


if __name__ == "__main__":
    main()
