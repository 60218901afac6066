"""Pair two evaluations (folders written by ``mhar eval --out``) item by item, and
tail-means of validation-loss curves from run folders."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mhar.eval.runner import RECORDS_VERSION, load_records, records_version
from mhar.eval.stats import mcnemar_exact, paired_bootstrap, paired_tail_mean, tail_mean


def _tasks_in(d: Path) -> list[str]:
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is not an evaluation folder (run `mhar eval MODEL --out {d}` first)")
    return sorted(p.stem for p in d.glob("*.jsonl"))


def compare_dirs(dir_a: str | Path, dir_b: str | Path, tasks: list[str] | None = None, metric: str | None = None,
                 n_boot: int = 10000, seed: int = 0, confidence: float = 0.95) -> list[dict[str, Any]]:
    """For each task both folders hold: items paired by id, the paired bootstrap CI of the
    difference (B - A) and, for 0/1 outcomes, the exact McNemar test."""
    da, db = Path(dir_a), Path(dir_b)
    common = sorted(set(_tasks_in(da)) & set(_tasks_in(db)))
    if tasks:
        missing = [t for t in tasks if t not in common]
        if missing:
            raise ValueError(f"task(s) {', '.join(missing)} not in both {da} and {db} (common: {', '.join(common)})")
        common = tasks
    if not common:
        raise ValueError(f"{da} and {db} share no evaluated task")
    versions = {d: records_version(d) for d in (da, db)}
    if None not in versions.values() and len(set(versions.values())) > 1:
        old = [str(d) for d, v in versions.items() if v < RECORDS_VERSION]
        raise ValueError(f"{da} and {db} hold records of different formats ({versions[da]} and {versions[db]}: "
                         "HellaSwag's item ids and correct_norm changed in format 2), so their items would not "
                         f"pair: re-evaluate {' and '.join(old) or 'the older folder'} with this version")
    rows = []
    for task in common:
        ra, rb = load_records(da, task), load_records(db, task)
        ids = [i for i in ra if i in rb]
        if not ids:
            raise ValueError(f"{task}: no item ids in common (different --limit seeds or data?)")
        sample = ra[ids[0]]
        m = metric or ("correct" if "correct" in sample else "loss")
        if m not in sample or m not in rb[ids[0]]:
            raise ValueError(f"{task}: records have no field {m!r} (fields: {', '.join(sample)})")
        a = [float(ra[i][m]) for i in ids]
        b = [float(rb[i][m]) for i in ids]
        boot = paired_bootstrap(a, b, n_boot=n_boot, seed=seed, confidence=confidence)
        row = {"task": task, "metric": m, "n": len(ids), "only_a": len(ra) - len(ids), "only_b": len(rb) - len(ids),
               "bootstrap": boot.to_dict()}
        if all(x in (0.0, 1.0) for x in a + b):
            row["mcnemar"] = mcnemar_exact(a, b).to_dict()
        rows.append(row)
    return rows


def _p(p: float, n_boot: int) -> str:
    return f"< {1 / n_boot:.0e}" if p == 0 else f"{p:.4f}"


def format_comparison(rows: list[dict], name_a: str, name_b: str) -> str:
    lines = [f"A = {name_a}", f"B = {name_b}", "",
             "| task | metric | n | A | B | B - A | 95% CI | bootstrap p | McNemar n01/n10 | McNemar p |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r["bootstrap"]
        pct = r["metric"].startswith("correct")
        f = (lambda x: f"{100 * x:.2f}") if pct else (lambda x: f"{x:.4f}")
        mc = r.get("mcnemar")
        lines.append(f"| {r['task']} | {r['metric']} | {r['n']} | {f(b['mean_a'])} | {f(b['mean_b'])} | "
                     f"{f(b['diff'])} | [{f(b['ci_low'])}, {f(b['ci_high'])}] | {_p(b['p_value'], b['n_boot'])} | "
                     + (f"{mc['n01']}/{mc['n10']} | {mc['p_value']:.4g} |" if mc else "- | - |"))
        if r["only_a"] or r["only_b"]:
            lines.append(f"|  | (unpaired items left out: {r['only_a']} only in A, {r['only_b']} only in B) |"
                         + " |" * 8)
    return "\n".join(lines)


# -- loss curves from run folders -----------------------------------------------

VAL_KEYS = ("val_loss", "valid_loss", "validation_loss", "eval_loss", "val/loss", "loss_val")


def read_val_curve(run: str | Path, key: str | None = None) -> list[tuple[int, float]]:
    """(step, value) of every validation evaluation in a run's metrics.jsonl."""
    run = Path(run)
    path = run / "metrics.jsonl" if run.is_dir() else run
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (a run folder holds metrics.jsonl)")
    curve = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            rec = json.loads(line)
            keys = [key] if key else [k for k in VAL_KEYS if k in rec]
            if keys and keys[0] in rec and rec[keys[0]] is not None:
                v = float(rec[keys[0]])
                if math.isfinite(v):
                    curve.append((int(rec.get("step", n)), v))
    if not curve:
        raise ValueError(f"{path}: no validation records (looked for {key or ', '.join(VAL_KEYS)})")
    curve.sort()
    return curve


def tail_from_runs(runs: list[str | Path], k: int = 11, key: str | None = None) -> dict[str, Any]:
    curves = [read_val_curve(r, key) for r in runs]
    out: dict[str, Any] = {"k": k, "runs": []}
    for r, c in zip(runs, curves):
        out["runs"].append({"run": str(r), "evals": len(c), "last_step": c[-1][0],
                            **tail_mean([v for _, v in c], k).to_dict()})
    if len(curves) == 2:
        a, b = dict(curves[0]), dict(curves[1])
        steps = sorted(set(a) & set(b))
        if not steps:
            raise ValueError("the two runs share no evaluation step; pairing needs the same eval schedule")
        out["paired"] = {"common_evals": len(steps), "steps": steps[-k:],
                         **paired_tail_mean([a[s] for s in steps], [b[s] for s in steps], k).to_dict()}
    return out


def format_tail(res: dict) -> str:
    fewer = min(r["evals"] for r in res["runs"]) < res["k"]
    lines = [f"tail-mean of the last {res['k']} validation evaluations"
             + (" (all of them, where a run has fewer)" if fewer else ""), "",
             "| run | evals | last step | tail-mean | stderr |", "|---|---|---|---|---|"]
    for r in res["runs"]:
        lines.append(f"| {r['run']} | {r['evals']} | {r['last_step']} | {r['mean']:.4f} | {r['stderr']:.4f} |")
    if "paired" in res:
        p = res["paired"]
        lines += ["", f"paired (B - A over {p['k']} common evaluations): {p['mean']:+.4f} ± {p['stderr']:.4f} (stderr)"]
    return "\n".join(lines)
