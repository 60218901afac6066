"""Run a list of tasks on one model and save the results: ``results.json`` (metrics,
the command, versions) and one ``<task>.jsonl`` of per-item records for pairing."""

from __future__ import annotations

import datetime as _dt
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from mhar.eval.adapter import EvalModel
from mhar.eval.scoring import (WIKITEXT_FILES, dataset_windows, evaluate_gen, evaluate_mc, evaluate_text_ppl,
                               evaluate_windows, evaluate_wikitext_ppl, evaluate_word, read_texts)
from mhar.eval.tasks import load_task, subset
from mhar.provenance import source_commit


def parse_task_list(spec: str | list[str]) -> list[tuple[str, int | None]]:
    """'hellaswag,arc_easy:500' -> [('hellaswag', None), ('arc_easy', 500)]."""
    parts = spec if isinstance(spec, list) else [spec]
    out = []
    for part in parts:
        for tok in str(part).split(","):
            tok = tok.strip()
            if not tok:
                continue
            name, _, lim = tok.partition(":")
            if lim and not lim.isdigit():
                raise ValueError(f"task {tok!r}: the limit after ':' must be a whole number")
            out.append((name.strip().lower(), int(lim) if lim else None))
    return out


def run_tasks(model: EvalModel, tasks: list[tuple[str, int | None]], out_dir: str | Path | None = None,
              limit: int | None = None, shots: int | None = None, batch_tokens: int = 4096,
              data_files: dict[str, str] | None = None, ppl_files: list[str] | None = None,
              val_dataset: str | None = None, seq_len: int | None = None, seed: int = 1234,
              progress: bool | str = True, command: str | None = None, max_new_tokens: int | None = None,
              wikitext: bool = False, log=print) -> dict[str, Any]:
    """``ppl_files`` are scored as documents (result ``ppl``), or with ``wikitext`` as
    lm-eval's ``wikitext`` task (result ``wikitext``: per article, detokenised; ``limit``
    then keeps the first N articles). ``progress``: bars, none, or ``"lines"`` (plain
    lines on stderr, for logs)."""
    if wikitext and not ppl_files:
        raise ValueError("--wikitext scores the --ppl files as WikiText: give --ppl wiki.test.raw")
    results: dict[str, Any] = {}
    records_by_task: dict[str, list[dict]] = {}
    out = Path(out_dir) if out_dir else None
    if out:
        out.mkdir(parents=True, exist_ok=True)

    def finish(name: str, metrics: dict, records: list[dict], info: dict, seconds: float) -> None:
        metrics = {**metrics, **info, "seconds": round(seconds, 1)}
        results[name] = metrics
        records_by_task[name] = records
        if out:
            with (out / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
                for r in records:
                    fh.write(json.dumps(r) + "\n")
            _write_summary(out, model, results, command)
        log(format_metrics(name, metrics))

    if val_dataset:
        t0 = time.time()
        windows, info = val_windows_for(model, val_dataset, seq_len, limit)
        m, recs = evaluate_windows(model, windows, batch_tokens * 2, progress)
        finish("val_loss", m, recs, info, time.time() - t0)
    if ppl_files:
        t0 = time.time()
        score = evaluate_wikitext_ppl if wikitext else evaluate_text_ppl
        m, recs = score(model, read_texts(ppl_files), seq_len, batch_tokens * 2, progress, limit)
        finish("wikitext" if wikitext else "ppl", m, recs, {"source": ", ".join(map(str, ppl_files))},
               time.time() - t0)
    for name, task_limit in tasks:
        t0 = time.time()
        task = load_task(name, shots, data_files)
        full_n = len(task.items)
        task.items = subset(task.items, task_limit or limit, seed)
        if progress == "lines":  # a log shows which task is running (each prints its result when done)
            print(f"[mhar eval] {name}: {len(task.items)} of {full_n} items", file=sys.stderr, flush=True)
        info = {"source": task.source, "description": task.description, "of": full_n, "subset_seed": seed}
        if task.kind == "mc":
            m, recs = evaluate_mc(model, task, batch_tokens, progress)
        elif task.kind == "word":
            m, recs = evaluate_word(model, task, batch_tokens, progress)
        elif task.kind == "gen":
            m, recs = evaluate_gen(model, task, progress, max_new_tokens, batch_tokens)
        else:  # pragma: no cover
            raise ValueError(f"task kind {task.kind!r}")
        finish(name, m, recs, info, time.time() - t0)
    return {"results": results, "records": records_by_task}


def wikitext_note(ppl_files: list[str] | None) -> str | None:
    """A one-line hint when a WikiText split file is scored as one plain document."""
    names = [Path(f).name for f in ppl_files or [] if Path(f).name in WIKITEXT_FILES]
    if not names:
        return None
    return (f"note: {names[0]} is scored as one document; --wikitext scores it as lm-eval's wikitext task "
            f"(per article, detokenised, words and bytes of the original text)")


def val_windows_for(model: EvalModel, val: str, seq_len: int | None, limit: int | None):
    """``val`` is a dataset folder, or ``run``: the run's own dataset, sequence length and
    validation windows (what training logged as val loss)."""
    cfg = model.run_config
    seq_len = min(seq_len, model.max_len) if seq_len else None  # as --ppl's windows (the CLI says so)
    if val == "run":
        if cfg is None:
            raise ValueError("--val run needs a run folder as the model; give a dataset folder instead")
        from mhar.eval.adapter import run_dataset_dir
        ds = run_dataset_dir(cfg)
        if ds is None:
            from mhar.train.data import build_data
            data = build_data(cfg.data, seq_len or cfg.seq_len, 1, cfg.seed)
            windows = data.val
            return windows[:limit] if limit else windows, {"source": "run (synthetic)"}
        n = limit or cfg.data.val_windows
        sl = seq_len or cfg.seq_len
        return (dataset_windows(ds, sl, n, cfg.data.val_seed),
                {"source": f"run dataset {ds}", "seq_len": sl, "val_seed": cfg.data.val_seed})
    sl = seq_len or (cfg.seq_len if cfg is not None else min(model.max_len, 2048))
    return dataset_windows(val, sl, limit, 1234 if cfg is None else cfg.data.val_seed), {
        "source": str(val), "seq_len": sl}


_RATES = ("acc", "acc_norm", "acc_per_char", "exact_match", "exact_match_flex")  # shown as percentages


def format_metrics(name: str, m: dict) -> str:
    keys = [k for k in (*_RATES, "loss", "ppl", "word_ppl", "byte_ppl", "bits_per_byte", "chance") if k in m]
    parts = []
    for k in keys:
        v = m[k]
        se = m.get(f"{k}_stderr")
        if k in _RATES or k == "chance":
            parts.append(f"{k} {100 * v:.1f}" + (f" ± {100 * se:.1f}" if se is not None else ""))
        else:
            parts.append(f"{k} {v:.4f}" + (f" ± {se:.4f}" if se is not None else ""))
    skipped = f" ({m['skipped_too_long']} skipped: longer than the window)" if m.get("skipped_too_long") else ""
    articles = f" ({m['articles']} articles)" if "articles" in m else ""
    return f"{name:<14} n={m.get('n')}{articles}{skipped}  " + "  ".join(parts) + f"  ({m.get('seconds', 0):.0f}s)"


def summary_markdown(model_name: str, results: dict[str, dict]) -> str:
    """One Markdown table of every task's headline numbers (percentages for accuracies)."""
    lines = [f"# {model_name}", "", "| task | n | acc | acc_norm | other |", "|---|---|---|---|---|"]
    for name, m in results.items():
        def pct(k):
            if k not in m:
                return "-"
            se = m.get(f"{k}_stderr")
            return f"{100 * m[k]:.1f}" + (f" ± {100 * se:.1f}" if se is not None else "")
        other = []
        if "acc_per_char" in m:
            other.append(f"acc_per_char {pct('acc_per_char')}")
        if "exact_match" in m:
            other.append(f"exact_match {pct('exact_match')}")
        for k in ("loss", "ppl", "word_ppl", "byte_ppl", "bits_per_byte"):
            if k in m:
                other.append(f"{k} {m[k]:.4f}")
        if "chance" in m:
            other.append(f"chance {100 * m['chance']:.0f}")
        n = f"{m.get('n')}" + (f" of {m['of']}" if "of" in m else "") + (
            f" ({m['skipped_too_long']} too long)" if m.get("skipped_too_long") else "")
        lines.append(f"| {name} | {n} | {pct('acc')} | {pct('acc_norm')} | {', '.join(other)} |")
    return "\n".join(lines) + "\n"


# The per-item records' format, in results.json. 2: HellaSwag ids are the item's index where the
# dataset's own ids repeat, and correct_norm is lm-eval's acc_norm (before: OLMES's per-char).
# Records of two formats pair different items or metrics, so `compare` refuses to mix them.
RECORDS_VERSION = 2


def records_version(path: str | Path) -> int | None:
    """The records' format of an evaluation folder (1 when results.json predates the field;
    None without a results.json)."""
    p = Path(path) / "results.json"
    return json.loads(p.read_text()).get("records_version", 1) if p.exists() else None


def _write_summary(out: Path, model: EvalModel, results: dict, command: str | None) -> None:
    try:
        import transformers
        tv = transformers.__version__
    except ImportError:
        tv = None
    summary = {
        "model": model.name, "model_info": model.info, "command": command or " ".join(sys.argv),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "transformers": tv},
        "device": str(model.device), "commit": source_commit(), "records_version": RECORDS_VERSION,
        "results": results,
    }
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(out / "results.json")
    (out / "results.md").write_text(summary_markdown(model.name, results))


def load_records(path: str | Path, task: str) -> dict[str, dict]:
    """Per-item records of one task from an evaluation folder, keyed by item id."""
    p = Path(path) / f"{task}.jsonl"
    if not p.exists():
        raise FileNotFoundError(f"{p} not found (evaluate with --out {path} first)")
    out: dict[str, dict] = {}
    with p.open(encoding="utf-8") as fh:
        for r in map(json.loads, filter(str.strip, fh)):
            if r["id"] in out:  # pairing by id would silently drop items
                raise ValueError(f"{p}: item id {r['id']!r} occurs more than once; items pair by id, "
                                 f"so ids must be unique (re-evaluate with this version)")
            out[r["id"]] = r
    return out
