"""`mhar params`: parameter counts for any preset and method."""

from __future__ import annotations

import argparse

from mhar.model.config import METHODS, PRESETS, get_preset, with_method
from mhar.model.decoder import count_parameters


def _millions(n: int) -> str:
    return f"{n / 1e6:,.2f}M"


def run_params(args: argparse.Namespace) -> int:
    presets = list(PRESETS) if args.preset == "all" else args.preset.split(",")
    methods = list(METHODS) if args.methods == "all" else args.methods.split(",")
    rows = []
    for preset in presets:
        for method in methods:
            cfg = with_method(get_preset(preset), method, args.overrides)
            c = count_parameters(cfg)
            rows.append((preset, method, _millions(c["total"]), _millions(c["non_embedding"]),
                         f"{c['routing']:,}", f"{c['routing_pct']:.4f}%"))
    header = ("preset", "method", "total", "non-embedding", "routing", "routing %")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(v).rjust(w) if i > 1 else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    return 0


def register(sub) -> None:
    p = sub.add_parser("params", help="parameter counts (total, non-embedding, routing overhead)",
                       description="Print parameter counts for presets and methods without allocating weights. "
                                   f"Presets: {', '.join(PRESETS)}. Methods: {', '.join(METHODS)}, or NAME-hH.")
    p.add_argument("--preset", default="all", help="a preset, a comma list, or 'all' (default)")
    p.add_argument("--methods", default="baseline,hyper,attnres,mhar,mhar-block,delta",
                   help="comma list of methods, or 'all'")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. stream.heads=4")
    p.set_defaults(func=run_params)
