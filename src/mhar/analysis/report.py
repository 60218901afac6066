"""One Markdown + HTML report over several run folders: comparison table, loss
curves, the H-sweep curve (loss against H), the probe table and the routing maps.

The report is a list of blocks rendered twice: ``report.md`` links the PNGs in
``img/``; ``report.html`` is self-contained (PNGs embedded as base64).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from mhar.analysis.maps import RoutingMap, plot_map
from mhar.analysis.probe import ProbeResult
from mhar.analysis.runs import RunSummary, summarize_run


# ----------------------------------------------------------------------------- blocks

@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str = ""
    left: int = 1  # leading text columns (left-aligned); the rest are numbers


@dataclass
class Image:
    path: Path      # absolute path of the PNG
    alt: str


@dataclass
class Report:
    title: str
    out: Path
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> None:
        self.blocks.extend(blocks)


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def render_markdown(r: Report) -> str:
    out = [f"# {r.title}", ""]
    for b in r.blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Table):
            if b.caption:
                out += [b.caption, ""]
            out.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            out.append("|" + "|".join("---" if i < b.left else "---:" for i in range(len(b.header))) + "|")
            for row in b.rows:
                out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
            out.append("")
        elif isinstance(b, Image):
            out += [f"![{b.alt}]({b.path.relative_to(r.out).as_posix()})", ""]
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 8px}
td{text-align:right}td.l{text-align:left}th{background:#f3f3f3}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}.cap{color:#555;font-size:0.9em}"""


def render_html(r: Report) -> str:
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{html.escape(r.title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(r.title)}</h1>"]
    for b in r.blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Table):
            if b.caption:
                out.append(f"<p class='cap'>{html.escape(b.caption)}</p>")
            out.append("<table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in b.header) + "</tr>")
            for row in b.rows:
                out.append("<tr>" + "".join(("<td class='l'>" if i < b.left else "<td>") + f"{html.escape(str(c))}</td>"
                                            for i, c in enumerate(row)) + "</tr>")
            out.append("</table>")
        elif isinstance(b, Image):
            data = base64.b64encode(b.path.read_bytes()).decode("ascii")
            out.append(f"<img alt='{html.escape(b.alt)}' src='data:image/png;base64,{data}'>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- pieces

def _f(x: float | None, nd: int = 4) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def method_label(s: RunSummary) -> str:
    st = s.stream
    m = st.get("method", "?")
    if m == "routed":
        base = "AttnRes" if s.heads == 1 else f"MHAR H={s.heads}"
        return base + (f", block S={s.block_size}" if s.block_size else "")
    if m == "delta":
        return f"delta H={s.heads}, S={s.block_size}"
    if m == "hyper":
        return f"hyper-conn. n={st.get('hyper_n', 4)}"
    return "baseline" if m == "standard" else str(m)


def _baseline(runs: Sequence[RunSummary], like: RunSummary | None = None) -> RunSummary | None:
    """The first finished baseline run; with ``like``, only one with the same setup
    (everything but the method: shape, data, budget, seed), so differences are paired."""
    for s in runs:
        if s.stream.get("method") == "standard" and s.tail_mean is not None and (like is None or s.setup == like.setup):
            return s
    return None


def comparison_table(runs: Sequence[RunSummary]) -> Table:
    header = ["run", "method", "params", "routing params", "last step", "final val loss",
              "tail-mean val loss", "vs baseline", "tokens/s"]
    with_mfu = any(s.mfu for s in runs)  # runs on a GPU of known peak
    if with_mfu:
        header.append("MFU")
    rows = []
    for s in runs:
        p = s.params
        base = _baseline(runs, like=s)
        delta = "" if base is None or s is base or s.tail_mean is None else f"{s.tail_mean - base.tail_mean:+.4f}"
        rows.append([s.name, method_label(s), f"{p['total']:,}" if p else "n/a",
                     f"{p['routing']:,} ({p['routing_pct']:.3f}%)" if p else "n/a", str(s.last_step),
                     _f(s.final_val), _f(s.tail_mean) + (f" (last {min(s.tail_k, len(s.val))})" if s.val else ""),
                     delta, f"{s.tokens_per_s:,.0f}" if s.tokens_per_s else "n/a"])
        if with_mfu:
            rows[-1].append(f"{100 * s.mfu:.1f}%" if s.mfu else "n/a")
    cap = ("Tail-mean: the mean of the last tail_k validation evaluations (SPEC.md section 4). "
           "'vs baseline': tail-mean minus that of the baseline run with the same setup (shape, data, "
           "budget, seed; blank when there is none); negative is better.")
    return Table(header, rows, cap, left=2)


def plot_loss_curves(runs: Sequence[RunSummary], path: Path) -> Path | None:
    if not any(s.val or s.train for s in runs):
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mhar.train.metrics import method_colours

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for s, colour in zip(runs, method_colours([s.method for s in runs])):  # a method's colour in every plot
        label = f"{s.name} ({method_label(s)})"
        if s.val:
            axes[0].plot(*zip(*s.val), marker=".", label=label, color=colour)
        if s.train:
            steps, loss = zip(*s.train)
            ema, sm = [], None
            for v in loss:  # light smoothing for readability
                sm = v if sm is None else 0.9 * sm + 0.1 * v
                ema.append(sm)
            axes[1].plot(steps, ema, label=label, color=colour)
    axes[0].set_title("validation loss")
    axes[1].set_title("training loss (EMA 0.9)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def h_sweep(runs: Sequence[RunSummary]) -> dict[str, list[tuple[int, float, str]]]:
    """Routed (and delta) runs grouped by everything that shapes them but H (preset,
    width, depth, stream method, block size, training budget): series of (H, tail-mean,
    run name), kept when a group has at least two distinct H values."""
    groups: dict[str, list[tuple[int, float, str]]] = {}
    keys: dict[tuple[str, str, int], str] = {}  # (setup, stream method, block size) -> label
    for s in runs:
        method = s.stream.get("method")
        if method not in ("routed", "delta") or s.tail_mean is None:
            continue
        m = s.model
        shape = (f", delta S={s.block_size}" if method == "delta"
                 else f", block S={s.block_size}" if s.block_size else ", full routing")
        key = f"{s.preset or '?'} d={m.get('d_model', '?')} L={m.get('n_layers', '?')}{shape}, {s.steps} steps"
        # the setup leaves out the stream: its method and block size are part of the group, as the label says
        group = (s.setup, method, s.block_size)
        if group not in keys:  # one group per setup and block size; a repeated label gets a number
            keys[group] = key if key not in keys.values() else f"{key} ({len(keys) + 1})"
        groups.setdefault(keys[group], []).append((s.heads, s.tail_mean, s.name))
    return {k: sorted(v) for k, v in groups.items() if len({h for h, _, _ in v}) >= 2}


def baseline_lines(series: dict[str, list[tuple[int, float, str]]],
                   runs: Sequence[RunSummary]) -> list[tuple[float, str]]:
    """The H-sweep plot's dashed lines, (tail-mean, label): the paired baseline of each
    group's setup, once per baseline run (the curves of one setup, e.g. full and block
    routing, share it)."""
    by_name = {s.name: s for s in runs}
    groups: dict[str, tuple[RunSummary, list[str]]] = {}  # baseline name -> (baseline, its groups)
    for key, pts in series.items():
        b = _baseline(runs, like=by_name[pts[0][2]])
        if b is not None:
            groups.setdefault(b.name, (b, []))[1].append(key)
    # a baseline that serves only some of the curves names its setup
    return [(b.tail_mean, f"baseline ({b.name})" if len(keys) == len(series) else
             f"baseline ({b.name}: {b.preset or '?'} d={b.model.get('d_model', '?')} L={b.model.get('n_layers', '?')}, "
             f"{b.steps} steps)") for b, keys in groups.values()]


def plot_h_sweep(series: dict[str, list[tuple[int, float, str]]], path: Path,
                 baselines: list[tuple[float, str]] | None = None) -> Path | None:
    if not series:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for key, pts in series.items():
        hs = sorted({h for h, _, _ in pts})
        mean = [sum(v for h2, v, _ in pts if h2 == h) / sum(1 for h2, _, _ in pts if h2 == h) for h in hs]
        ax.scatter([h for h, _, _ in pts], [v for _, v, _ in pts], s=12, alpha=0.5)
        ax.plot(hs, mean, marker="o", label=key)
    for value, label in baselines or []:
        ax.axhline(value, color="gray", ls="--", label=label)
    ax.set_xscale("log", base=2)
    hs_all = sorted({h for pts in series.values() for h, _, _ in pts})
    ax.set_xticks(hs_all)
    ax.set_xticklabels([str(h) for h in hs_all])
    ax.minorticks_off()
    ax.set_xlabel("routing heads H")
    ax.set_ylabel("tail-mean validation loss")
    ax.set_title("H sweep")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def probe_tables(name: str, r: ProbeResult) -> list:
    if r.kind == "slices":
        cap = (f"{name}: H = 1, S = {r.slices} slices; score = mean over tokens and slices of KL(slice || shared); "
               f"null = {r.draws} random queries of matched norm (seed {r.seed}); {r.tokens} tokens.")
        header = ["site", "sources", "query norm", "learned KL", "null KL", "learned excess"]
        rows = [[f"{s.index} {s.name}" + (" (trivial)" if s.trivial else ""), str(s.num_sources), _f(s.query_norm, 3),
                 _f(s.learned), f"{_f(s.null)} ± {_f(s.null_std)}", _f(s.excess)] for s in r.sites]
        o = r.overall
        rows.append([f"overall ({o['sites']} sites)", "", "", _f(o["learned"]), _f(o["null"]), _f(o["excess"])])
        return [Table(header, rows, cap)]
    cap = (f"{name}: H = {r.heads}; deviation = mean over tokens of KL(head || head consensus); null = {r.draws} "
           f"random queries of matched norm (seed {r.seed}); head corr. = mean Pearson correlation between "
           f"heads' weights over (token, source); {r.tokens} tokens.")
    header = ["site", "sources", "query norm", "mean deviation", "null", "excess", "head corr."] + \
             [f"h{h}" for h in range(r.heads)]
    rows = []
    for s in r.sites:
        rows.append([f"{s.index} {s.name}" + (" (trivial)" if s.trivial else ""), str(s.num_sources),
                     _f(s.query_norm, 3), _f(s.learned), f"{_f(s.null)} ± {_f(s.null_std)}", _f(s.excess),
                     _f(s.head_correlation, 3)] + [_f(v) for v in s.head_deviation])
    o = r.overall
    rows.append([f"overall ({o['sites']} sites)", "", "", _f(o["learned"]), _f(o["null"]), _f(o["excess"]),
                 _f(o["head_correlation"], 3)] + [_f(v) for v in o["head_deviation"]])
    return [Table(header, rows, cap)]


def probe_summary_table(results: Sequence[tuple[str, ProbeResult]]) -> Table:
    header = ["run", "probe", "learned", "null", "learned excess", "head corr."]
    rows = []
    for name, r in results:
        o = r.overall
        kind = f"slices S={r.slices} (H=1)" if r.kind == "slices" else f"head deviation (H={r.heads})"
        rows.append([name, kind, _f(o["learned"]), _f(o["null"]), _f(o["excess"]),
                     _f(o.get("head_correlation"), 3) if r.kind == "heads" else ""])
    return Table(header, rows, "Overall means over the routing sites that read at least two sources.", left=2)


# ----------------------------------------------------------------------------- the report

Analyser = Callable[[Path], tuple[ProbeResult | None, RoutingMap | None]]


def build_report(runs: Sequence[str | Path], out: str | Path, analyse: Analyser | None = None,
                 title: str = "mhar report") -> tuple[Path, Path]:
    """Write ``out/report.md`` and ``out/report.html`` (and ``out/img/*.png``).
    ``analyse(run_path)`` returns the run's (probe, map) or Nones; it is called only
    for runs with a routed or delta stream."""
    if not runs:
        raise ValueError("report needs at least one run folder")
    summaries = [summarize_run(r) for r in runs]
    names = [s.name for s in summaries]
    for i, s in enumerate(summaries):  # keep image names unique
        if names.count(s.name) > 1:
            s.name = f"{s.name}-{i}"
    out = Path(out)
    img = out / "img"
    img.mkdir(parents=True, exist_ok=True)
    rep = Report(title, out)
    rep.add(Para(f"Generated {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} from "
                 f"{len(summaries)} run folder(s): " + ", ".join(str(s.path) for s in summaries) + "."))

    rep.add(Heading("Comparison"), comparison_table(summaries))
    rep.add(Heading("Loss curves"))
    curves = plot_loss_curves(summaries, img / "loss_curves.png")
    rep.add(Image(curves, "loss curves") if curves else Para("No metrics recorded in these runs."))

    rep.add(Heading("H sweep"))
    series = h_sweep(summaries)
    sweep = plot_h_sweep(series, img / "h_sweep.png", baseline_lines(series, summaries))
    if sweep:
        rows = [[key, str(h), _f(v), n] for key, pts in series.items() for h, v, n in pts]
        rep.add(Image(sweep, "H sweep"), Table(["group", "H", "tail-mean val loss", "run"], rows, left=1))
    else:
        rep.add(Para("Not drawn: no group of routed or delta runs (same preset, width, depth, stream, block size "
                     "and steps) with at least two values of H."))

    routed = [s for s in summaries if s.routes]
    probes: list[tuple[str, ProbeResult]] = []
    maps: list[tuple[str, Path]] = []
    skipped: list[str] = []
    if analyse is not None:
        for s in routed:
            try:
                probe, rmap = analyse(s.path)
            except FileNotFoundError as err:  # e.g. a run still before its first checkpoint: said in the report
                skipped.append(f"{s.name}: not analysed ({err}).")
                print(f"mhar report: warning: {s.name} not analysed: {err}", file=sys.stderr)
                continue
            if probe is not None:
                probes.append((s.name, probe))
            if rmap is not None:
                maps.append((s.name, plot_map(rmap, img / f"map_{_safe(s.name)}.png")))
    rep.add(Heading("Disagreement probe"))
    for note in skipped:
        rep.add(Para(note))
    if probes:
        rep.add(Para("H = 1 runs: SPEC.md section 4's probe. Each site's query and normalised keys are cut into S "
                     "contiguous slices; each slice's own softmax over the sources is compared with the shared one "
                     "by KL(slice || shared), averaged over tokens and slices; the null is the same score for random "
                     "queries of the same norm; learned excess = learned - null. H > 1 runs: each head's deviation "
                     "KL(head || head consensus) from the mean of the heads' weights, with the same null."))
        rep.add(probe_summary_table(probes))
        for name, p in probes:
            rep.add(Heading(name, 3), *probe_tables(name, p))
    else:
        rep.add(Para("No probe: no run with a routed or delta stream" if not routed else "Probe not computed."))
    rep.add(Heading("Routing maps"))
    if maps:
        rep.add(Para("Token-averaged routing weights on validation text: one heatmap per head, routing sites (rows) "
                     "against sources (columns); grey: not available at that site. Every row sums to one."))
        for name, p in maps:
            rep.add(Heading(name, 3), Image(p, f"routing map {name}"))
    else:
        rep.add(Para("No maps: no run with a routed or delta stream" if not routed else "Maps not computed."))

    md, htm = out / "report.md", out / "report.html"
    md.write_text(render_markdown(rep))
    htm.write_text(render_html(rep))
    return md, htm


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
