"""`mhar probe`, `mhar maps`, `mhar report`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_WINDOWS = 16


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--windows", type=int, default=DEFAULT_WINDOWS,
                   help=f"validation windows to read (the run's own fixed windows; default {DEFAULT_WINDOWS})")
    p.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default 8)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, or auto (cuda when available)")


def register(subparsers) -> None:
    p = subparsers.add_parser("probe", help="disagreement probe of a trained run (SPEC.md section 4)",
                              description="H = 1 runs: per routing site, S query slices' own softmaxes against "
                              "the shared one, mean KL(slice || shared), a matched-norm random-query null and the "
                              "learned excess. H > 1 runs: each head's KL from the head consensus and the head-to-head "
                              "correlation. Prints a Markdown table; writes RUN/analysis/probe.{md,json}.")
    p.add_argument("run", help="run folder")
    p.add_argument("--slices", type=int, default=4, help="S, query slices for H = 1 runs (default 4; H > 1 runs use their heads)")
    p.add_argument("--draws", type=int, default=8, help="random queries for the null (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the null's random queries (default 0)")
    p.add_argument("-o", "--out", default=None, help="folder for probe.md / probe.json (default RUN/analysis)")
    _add_data_args(p)
    p.set_defaults(func=cmd_probe)

    p = subparsers.add_parser("maps", help="heatmaps of token-averaged routing weights (site x source, per head)",
                              description="Writes RUN/analysis/maps.png (one heatmap per head) and maps.json.")
    p.add_argument("run", help="run folder")
    p.add_argument("-o", "--out", default=None, help="folder for maps.png / maps.json (default RUN/analysis)")
    _add_data_args(p)
    p.set_defaults(func=cmd_maps)

    p = subparsers.add_parser("report", help="Markdown + HTML report over run folders",
                              description="Comparison table, loss curves, the H-sweep curve, probe tables and routing "
                              "maps for the given run folders (e.g. the runs of `mhar compare` and `mhar sweep`).")
    p.add_argument("runs", nargs="+", help="run folders (a folder holding run folders is expanded)")
    p.add_argument("-o", "--out", default="report", help="output folder (default ./report)")
    p.add_argument("--title", default="mhar report", help="the report's heading")
    p.add_argument("--no-probe", action="store_true", help="skip the probe")
    p.add_argument("--no-maps", action="store_true", help="skip the routing maps")
    p.add_argument("--slices", type=int, default=4, help="probe: S, query slices for H = 1 runs")
    p.add_argument("--draws", type=int, default=8, help="probe: random queries for the null")
    p.add_argument("--seed", type=int, default=0, help="probe: seed of the null's random queries")
    _add_data_args(p)
    p.set_defaults(func=cmd_report)


def _inputs(run, args):
    from mhar.analysis.runs import batches, load_run_model, validation_inputs

    if args.batch_size < 1:
        raise ValueError(f"--batch-size={args.batch_size} must be >= 1")
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"--device={args.device!r}: allowed cpu, cuda, cuda:N, auto")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device={args.device}: CUDA is not available")
    model, cfg, step = load_run_model(run, args.step)
    model = model.to(device)
    val = validation_inputs(cfg, args.windows)
    return model, step, val, lambda: (b.to(device) for b in batches(val, args.batch_size))


def cmd_probe(args) -> int:
    from mhar.analysis.probe import probe_model

    model, step, val, make = _inputs(args.run, args)
    r = probe_model(model, make(), args.slices, args.draws, args.seed)
    r.run = str(args.run)
    out = Path(args.out) if args.out else Path(args.run) / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    md = f"Run {args.run}, checkpoint step {step}, {val.shape[0]} validation windows of {val.shape[1]} tokens.\n\n"
    md += r.to_markdown()
    (out / "probe.md").write_text(md)
    (out / "probe.json").write_text(r.to_json() + "\n")
    print(md)
    print(f"wrote {out / 'probe.md'} and {out / 'probe.json'}", file=sys.stderr)
    return 0


def cmd_maps(args) -> int:
    from mhar.analysis.maps import plot_map, routing_map

    model, step, val, make = _inputs(args.run, args)
    m = routing_map(model, make(), title=f"{Path(args.run).name} (step {step})")
    out = Path(args.out) if args.out else Path(args.run) / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    png = plot_map(m, out / "maps.png")
    m.save_json(out / "maps.json")
    print(f"wrote {png} and {out / 'maps.json'} ({m.heads} head(s), {len(m.sites)} sites, {m.tokens} tokens)")
    return 0


def expand_runs(paths: list[str]) -> list[Path]:
    """Run folders; a folder that is not a run but holds runs is replaced by them (sorted)."""
    from mhar.analysis.runs import config_path, is_run_folder

    out: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(f"{p}: a file, not a run folder" if p.exists() else f"{p}: no such run folder")
        if is_run_folder(p):
            out.append(p)
            continue
        # saved model folders (config.json without a training config) beside the runs are not runs
        kids = sorted(c for c in p.iterdir() if is_run_folder(c))
        if not kids:
            config_path(p)  # a saved model folder: says so
            raise FileNotFoundError(f"{p}: not a run folder and holds no run folders")
        out.extend(kids)
    return out


def cmd_report(args) -> int:
    from mhar.analysis.maps import routing_map
    from mhar.analysis.probe import probe_model
    from mhar.analysis.report import build_report

    runs = expand_runs(args.runs)

    def analyse(run: Path):
        if args.no_probe and args.no_maps:
            return None, None
        what = " and ".join(w for w, off in (("probe", args.no_probe), ("maps", args.no_maps)) if not off)
        print(f"mhar report: {run.name}: {what}", file=sys.stderr, flush=True)  # each run takes a while
        model, step, val, make = _inputs(run, args)
        probe = None if args.no_probe else probe_model(model, make(), args.slices, args.draws, args.seed)
        rmap = None if args.no_maps else routing_map(model, make(), title=f"{run.name} (step {step})")
        return probe, rmap

    md, htm = build_report(runs, args.out, analyse, args.title)
    print(f"wrote {md} and {htm} ({len(runs)} runs)")
    return 0
