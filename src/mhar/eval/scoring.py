"""Scoring: batched log-likelihoods, multiple choice, LAMBADA, generation, perplexity.

Every evaluator returns ``(metrics, records)``: a dict of aggregate numbers and one
record per item (its id plus what paired statistics need: ``correct``, ``correct_norm``,
``loss`` ...), so two evaluations of the same items can be paired later.
"""

from __future__ import annotations

import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from mhar.eval.adapter import EvalModel
from mhar.eval.tasks import Task, gsm8k_extract


@dataclass
class Scored:
    logprob: float      # sum of log p(continuation tokens | context)
    greedy: bool        # every continuation token is the argmax
    n_tokens: int


def _encode_pair(model: EvalModel, context: str, continuation: str, cache: dict) -> tuple[list[int], list[int]]:
    """Tokenise as lm-evaluation-harness does: trailing spaces of the context move to the
    continuation; the continuation's tokens are those of context+continuation after the
    context's, so the boundary merges exactly as in running text."""
    n_sp = len(context) - len(context.rstrip())
    if n_sp:
        continuation = context[-n_sp:] + continuation
        context = context[:-n_sp]
    if not context:
        return [model.prefix_token], model.encode(continuation)
    ctx = cache.get(context)
    if ctx is None:
        ctx = cache[context] = model.encode(context)
    whole = model.encode(context + continuation)
    if whole[:len(ctx)] != ctx:  # a merge across the boundary: fall back to separate encodings
        return ctx, model.encode(continuation)
    return ctx, whole[len(ctx):]


def loglikelihoods(model: EvalModel, requests: Sequence[tuple[str, str]], batch_tokens: int = 4096,
                   progress: bool = True, desc: str = "loglikelihood", pack: bool = True,
                   skip_too_long: bool = False) -> list[Scored | None]:
    """Log-likelihood of each continuation given its context, batched by a token budget
    (longest first, right padding: causal attention makes the padding harmless). The LM
    head is applied only at the continuation positions.

    With ``pack`` (and a model that takes a custom attention pattern), requests sharing a
    context are packed into one sequence: the context once, then every continuation, each
    attending to the context and to itself only, with positions restarting after the
    context. The numbers are those of scoring each request alone (up to float rounding).

    A continuation longer than the model's window cannot be scored; it is an error, or with
    ``skip_too_long`` its result is None (never a score at a wrong position)."""
    cache: dict = {}
    enc: list[tuple[list[int], list[int]]] = []
    kept = []  # the requests scored, in order: enc[j] is requests[kept[j]]
    for i, (ctx, cont) in enumerate(requests):
        c, k = _encode_pair(model, ctx, cont, cache)
        if model.add_bos and model.bos_id is not None:
            c = [model.bos_id] + c
        if not k:
            raise ValueError(f"empty continuation for context ending {ctx[-40:]!r}")
        if len(k) > model.max_len:
            if not skip_too_long:
                raise ValueError(f"a continuation of {len(k)} tokens does not fit the model's window of "
                                 f"{model.max_len} tokens")
            continue
        full = (c + k)[-(model.max_len + 1):]
        enc.append((full[:-len(k)], full[-len(k):]))
        kept.append(i)
    # units: one context and the requests that share it
    packed_ok = pack and model.packed_hidden_fn is not None
    groups: dict[tuple, list[int]] = {}
    for i, (c, _) in enumerate(enc):
        groups.setdefault(tuple(c) if packed_ok else (i,), []).append(i)
    units: list[list[int]] = []
    for members in groups.values():
        c = enc[members[0]][0]
        if len(c) + sum(len(enc[i][1]) - 1 for i in members) > model.max_len:
            units += [[i] for i in members]
        else:
            units.append(members)

    def unit_len(u: list[int]) -> int:
        return len(enc[u[0]][0]) + sum(len(enc[i][1]) - 1 for i in u)

    units.sort(key=lambda u: -unit_len(u))
    batches, cur, cur_max = [], [], 0
    for u in units:
        n = unit_len(u)
        if cur and max(cur_max, n) * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, cur_max = [], 0
        cur.append(u)
        cur_max = max(cur_max, n)
    if cur:
        batches.append(cur)

    out: list[Scored | None] = [None] * len(enc)
    bar = progress_bar(progress, len(enc), desc, "req")
    for batch in batches:
        T = max(unit_len(u) for u in batch)
        B = len(batch)
        ids = torch.zeros(B, T, dtype=torch.long)
        use_pack = packed_ok and any(len(u) > 1 for u in batch)
        if use_pack:
            pos = torch.zeros(B, T, dtype=torch.long)
            allowed = torch.eye(T, dtype=torch.bool).repeat(B, 1, 1)
        rows, cols, targets, owners = [], [], [], []
        for r, u in enumerate(batch):
            c = enc[u[0]][0]
            nc = len(c)
            seq = list(c)
            if use_pack:
                pos[r, :nc] = torch.arange(nc)
                allowed[r, :nc, :nc] = torch.ones(nc, nc, dtype=torch.bool).tril()
            for i in u:
                k = enc[i][1]
                s0 = len(seq)  # where this continuation's inputs k[:-1] start
                seq += k[:-1]
                m = len(k) - 1
                if use_pack and m:
                    pos[r, s0:s0 + m] = torch.arange(nc, nc + m)
                    allowed[r, s0:s0 + m, :nc] = True
                    allowed[r, s0:s0 + m, s0:s0 + m] = torch.ones(m, m, dtype=torch.bool).tril()
                rows += [r] * len(k)
                cols += [nc - 1] + list(range(s0, s0 + m))
                targets += k
                owners.append((i, len(k)))
            ids[r, :len(seq)] = torch.tensor(seq)
        h = model.packed_hidden_fn(ids, pos, allowed) if use_pack else model.hidden(ids)
        sel = h[torch.tensor(rows), torch.tensor(cols)]
        logp = F.log_softmax(model.head(sel).float(), dim=-1)
        tgt = torch.tensor(targets, device=logp.device)
        tok_lp = logp.gather(1, tgt[:, None])[:, 0]
        tok_greedy = logp.argmax(-1) == tgt
        p0 = 0
        for i, n in owners:
            out[i] = Scored(float(tok_lp[p0:p0 + n].sum()), bool(tok_greedy[p0:p0 + n].all()), n)
            p0 += n
        bar.update(len(owners))
    bar.close()
    every: list[Scored | None] = [None] * len(requests)
    for j, i in enumerate(kept):
        every[i] = out[j]
    return every


def _binom_se(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n) if n > 1 else float("nan")


def evaluate_mc(model: EvalModel, task: Task, batch_tokens: int = 4096, progress: bool = True):
    """acc: argmax of the summed log-likelihood. acc_norm: argmax of the log-likelihood
    divided by the answer's length in characters without the space that separates it from
    the context (lm-eval's acc_norm divides by len(choice), the target delimiter " " left
    out). acc_per_char: the same with that space counted (OLMES's 'acc_per_char')."""
    reqs, spans = [], []
    for it in task.items:
        r = it.requests()
        spans.append((len(reqs), len(r)))
        reqs += r
    scored = loglikelihoods(model, reqs, batch_tokens, progress, desc=task.name, skip_too_long=True)
    items = [(it, s, n) for it, (s, n) in zip(task.items, spans) if None not in scored[s:s + n]]
    records = []
    for it, s, n in items:
        lp = np.array([scored[s + j].logprob for j in range(n)])
        chars = np.array([len(c) for c in it.continuations], dtype=float)
        answer_chars = np.array([max(1, len(c) - c.startswith(" ")) for c in it.continuations], dtype=float)
        pred, pred_norm, pred_pc = int(lp.argmax()), int((lp / answer_chars).argmax()), int((lp / chars).argmax())
        records.append({"id": it.id, "gold": it.gold, "pred": pred, "pred_norm": pred_norm, "pred_per_char": pred_pc,
                        "correct": int(pred == it.gold), "correct_norm": int(pred_norm == it.gold),
                        "correct_per_char": int(pred_pc == it.gold),
                        "logprobs": [round(float(x), 4) for x in lp]})
    n = len(records)
    acc = sum(r["correct"] for r in records) / max(n, 1)
    acc_norm = sum(r["correct_norm"] for r in records) / max(n, 1)
    acc_pc = sum(r["correct_per_char"] for r in records) / max(n, 1)
    chance = float(np.mean([1.0 / len(it.continuations) for it, _, _ in items])) if n else float("nan")
    return ({"acc": acc, "acc_stderr": _binom_se(acc, n), "acc_norm": acc_norm,
             "acc_norm_stderr": _binom_se(acc_norm, n), "acc_per_char": acc_pc,
             "acc_per_char_stderr": _binom_se(acc_pc, n), "chance": chance, "n": n,
             **_skipped(len(task.items) - n)}, records)


def _skipped(k: int) -> dict[str, int]:
    """Items left out because an answer alone is longer than the model's window (a tiny
    model's 256 tokens on a few PIQA solutions): counted, never scored at a wrong position."""
    return {"skipped_too_long": k} if k else {}


def evaluate_word(model: EvalModel, task: Task, batch_tokens: int = 4096, progress: bool = True):
    """LAMBADA: the last word counts as right when greedy decoding reproduces all of its
    tokens (lm-eval's lambada acc); also the perplexity of the last word."""
    scored = loglikelihoods(model, [(it.context, it.continuation) for it in task.items], batch_tokens,
                            progress, desc=task.name, skip_too_long=True)
    pairs = [(it, s) for it, s in zip(task.items, scored) if s is not None]
    records = [{"id": it.id, "correct": int(s.greedy), "logprob": round(s.logprob, 4), "n_tokens": s.n_tokens}
               for it, s in pairs]
    n = len(records)
    acc = sum(r["correct"] for r in records) / max(n, 1)
    ppl = math.exp(-sum(s.logprob for _, s in pairs) / max(n, 1)) if n else float("nan")
    return {"acc": acc, "acc_stderr": _binom_se(acc, n), "ppl": ppl, "n": n,
            **_skipped(len(task.items) - n)}, records


def evaluate_gen(model: EvalModel, task: Task, progress: bool = True, max_new_tokens: int | None = None,
                 batch_tokens: int = 4096):
    """Greedy generation until a stop string; strict exact match of the extracted answer
    (GSM8K: the number after 'The answer is'), plus a flexible last-number match. Prompts
    of similar length are generated together, as many as fit ``batch_tokens`` with their
    ``max_new_tokens`` (at least one)."""
    max_new = max_new_tokens or task.max_new_tokens
    prompts = []
    for it in task.items:
        prompt = model.encode(it.prompt)
        if model.add_bos and model.bos_id is not None:
            prompt = [model.bos_id] + prompt
        prompts.append(prompt[-max(1, model.max_len - max_new):])
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # longest first: little padding
    texts: dict[int, str] = {}
    with progress_bar(progress, len(order), task.name, "items") as bar:
        i = 0
        while i < len(order):
            rows = max(1, batch_tokens // (len(prompts[order[i]]) + max_new))
            batch = order[i:i + rows]
            outs = model.generate_batch([prompts[j] for j in batch], max_new, [task.items[j].stop for j in batch])
            for j, out in zip(batch, outs):
                texts[j] = model.decode(out)
            i += len(batch)
            bar.update(len(batch))
    records = []
    for j, it in enumerate(task.items):
        text = texts[j]
        for s in it.stop:
            text = text.split(s)[0]
        strict, flex = gsm8k_extract(text, strict=True), gsm8k_extract(text, strict=False)
        gold = it.answer.replace(",", "").strip()
        records.append({"id": it.id, "gold": gold, "pred": strict, "correct": int(strict == gold),
                        "correct_flex": int(flex == gold), "output": text})
    n = len(records)
    em = sum(r["correct"] for r in records) / max(n, 1)
    flex = sum(r["correct_flex"] for r in records) / max(n, 1)
    return {"exact_match": em, "exact_match_stderr": _binom_se(em, n), "exact_match_flex": flex, "n": n}, records


# -- progress ------------------------------------------------------------------------

class _Lines:
    """Plain progress lines on stderr, for logs and pipes (``progress="lines"``): one when
    a tenth more is done and at least 30 s have passed since the last, so a long task
    (hours of GSM8K generation on a CPU) shows it is alive without filling the log."""

    def __init__(self, total: int, desc: str, unit: str):
        self.total, self.desc, self.unit = total, desc, unit
        self.done, self.t0 = 0, time.monotonic()
        self.last_t, self.next_done = self.t0, total / 10

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.done >= self.next_done and now - self.last_t >= 30 and self.done < self.total:
            rate = self.done / max(now - self.t0, 1e-9)
            print(f"[mhar eval] {self.desc}: {self.done}/{self.total} {self.unit} "
                  f"({100 * self.done / self.total:.0f}%, {rate:.1f} {self.unit}/s)", file=sys.stderr, flush=True)
            self.last_t, self.next_done = now, self.done + self.total / 10

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bar(progress: bool | str, total: int, desc: str, unit: str = "it"):
    """tqdm's bar (``progress=True``), none (False), or plain lines (``"lines"``)."""
    if progress == "lines":
        return _Lines(total, desc, unit)
    return tqdm(total=total, desc=desc, disable=not progress, unit=unit, leave=False)


# -- loss and perplexity ----------------------------------------------------------

def _window_losses(model: EvalModel, windows: list[list[int]], batch_tokens: int, progress: bool,
                   desc: str, scored: list[int] | None = None) -> list[tuple[float, int]]:
    """Summed next-token NLL and the number of predicted tokens of each window: all of its
    targets, or with ``scored`` only the last ``scored[i]`` of window i (the earlier tokens
    are context only)."""
    n_scored = scored or [len(w) - 1 for w in windows]
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i]))
    out: list[tuple[float, int] | None] = [None] * len(windows)
    bar = progress_bar(progress, sum(n_scored), desc, "tok")
    i = 0
    while i < len(order):
        T = len(windows[order[i]])
        bsz = max(1, batch_tokens // max(T, 1))
        batch = order[i:i + bsz]
        i += len(batch)
        ids = torch.zeros(len(batch), T, dtype=torch.long)
        mask = torch.zeros(len(batch), T - 1, dtype=torch.bool)
        for r, j in enumerate(batch):
            ids[r, :len(windows[j])] = torch.tensor(windows[j])
            mask[r, len(windows[j]) - 1 - n_scored[j]:len(windows[j]) - 1] = True
        h = model.hidden(ids[:, :-1])
        logits = model.head(h[mask]).float()
        nll = F.cross_entropy(logits, ids[:, 1:][mask].to(logits.device), reduction="none")
        pos = 0
        for r, j in enumerate(batch):
            n = n_scored[j]
            out[j] = (float(nll[pos:pos + n].sum()), n)
            pos += n
        bar.update(int(mask.sum()))
    bar.close()
    return out  # type: ignore[return-value]


def read_texts(paths: Iterable[str | Path]) -> list[tuple[str, str]]:
    """(name, text) documents from text files, folders of them, or JSONL files with a
    'text' field (one document a line)."""
    import json
    docs = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"text file {p} does not exist")
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.suffix == ".jsonl":
                for k, line in enumerate(f.read_text(encoding="utf-8").splitlines()):
                    if not line.strip():
                        continue
                    try:
                        text = json.loads(line)["text"]
                    except (json.JSONDecodeError, KeyError, TypeError) as err:
                        why = "not JSON" if isinstance(err, json.JSONDecodeError) else "no 'text' field"
                        raise ValueError(f"{f}:{k + 1}: {why} (JSONL documents are lines of "
                                         '{"text": "..."})') from None
                    docs.append((f"{f.name}:{k}", text))
            elif f.suffix in (".txt", ".md", ".raw", ".text", ""):
                docs.append((f.name, f.read_text(encoding="utf-8", errors="replace")))
    if not docs:
        raise ValueError(f"no text documents found in {', '.join(map(str, paths))}")
    return docs


def _rolling_windows(toks: list[int], seq_len: int) -> list[tuple[list[int], int, int]]:
    """lm-eval's rolling log-likelihood windows (``get_rolling_token_windows`` with
    ``context_len=1``) of one document, ``toks`` being the prefix token then the text's
    tokens: ``(window, scored, end)``, the last ``scored`` targets of ``window`` predicted,
    ``toks[end - 1]`` the last of them. Every target is predicted once, in chunks of
    ``seq_len``, each chunk seeing only the token before it; a shorter last chunk sees a
    whole window of the tokens before it, as lm-eval's does."""
    out = []
    n = len(toks) - 1  # targets: toks[1:]
    for s in range(0, n, seq_len):
        e = min(s + seq_len, n) + 1
        start = s if s == 0 or e - s == seq_len + 1 else e - seq_len - 1
        out.append((toks[start:e], e - 1 - s, e))
    return out


def _score_texts(model: EvalModel, texts: list[str], seq_len: int | None, batch_tokens: int, progress: bool,
                 limit: int | None = None):
    """The rolling log-likelihood windows of each text (``_rolling_windows``), the first
    ``limit`` of them scored: per window ``(nll, tokens)``, the text it belongs to and the end
    of its targets in that text's tokens; and each text's tokens (prefix token first)."""
    seq_len = min(seq_len or model.max_len, model.max_len)
    windows, scored, owner, ends, doc_toks = [], [], [], [], []
    for d, text in enumerate(texts):
        toks = [model.prefix_token] + model.encode(text)
        doc_toks.append(toks)
        for w, k, e in _rolling_windows(toks, seq_len):
            windows.append(w)
            scored.append(k)
            owner.append(d)
            ends.append(e)
    if limit:
        windows, scored, owner, ends = windows[:limit], scored[:limit], owner[:limit], ends[:limit]
    res = _window_losses(model, windows, batch_tokens, progress, "ppl", scored)
    return res, owner, ends, doc_toks


def _window_records(names: list[str], owner: list[int], res: list[tuple[float, int]]) -> list[dict]:
    return [{"id": f"{names[o]}#{k}", "loss": r[0] / r[1], "tokens": r[1]}
            for k, (o, r) in enumerate(zip(owner, res))]


def evaluate_text_ppl(model: EvalModel, docs: list[tuple[str, str]], seq_len: int | None = None,
                      batch_tokens: int = 8192, progress: bool = True, limit: int | None = None):
    """Token-level loss and perplexity of text documents. Each document is scored on its
    own, as lm-eval's rolling log-likelihood: its first token conditioned on the model's
    prefix token (BOS/EOS), then chunks of ``seq_len`` predicted tokens, each window
    starting fresh (``_rolling_windows``). Also word perplexity (per whitespace word) and
    bits per byte, which compare across tokenizers."""
    res, owner, ends, doc_toks = _score_texts(model, [t for _, t in docs], seq_len, batch_tokens, progress, limit)
    nll = sum(r[0] for r in res)
    ntok = sum(r[1] for r in res)
    # words and bytes of the text scored: a document cut by ``limit`` counts only the text of
    # its scored tokens (else word ppl and bits per byte divide a part's NLL by the whole)
    covered: dict[int, int] = {}
    for d, e in zip(owner, ends):
        covered[d] = max(covered.get(d, 0), e)
    scored_text = [docs[d][1] if e == len(doc_toks[d]) else model.decode(doc_toks[d][1:e])
                   for d, e in sorted(covered.items())]
    nwords = sum(len(t.split()) for t in scored_text)
    nbytes = sum(len(t.encode("utf-8")) for t in scored_text)
    records = _window_records([n for n, _ in docs], owner, res)
    loss = nll / max(ntok, 1)
    return ({"loss": loss, "ppl": math.exp(loss), "word_ppl": math.exp(nll / max(nwords, 1)),
             "bits_per_byte": nll / max(nbytes, 1) / math.log(2), "tokens": ntok, "n": len(records)}, records)


# -- WikiText as lm-eval's `wikitext` task -------------------------------------------

# The split files of WikiText-2/103 raw (a note suggests --wikitext when one is scored without it)
WIKITEXT_FILES = ("wiki.train.raw", "wiki.valid.raw", "wiki.test.raw")


def _is_article_heading(line: str) -> bool:
    """A top-level heading ``" = Title = "`` starts a Wikipedia article. The rule of the
    Hugging Face dataset ``EleutherAI/wikitext_document_level`` (lm-eval's ``wikitext``
    data): with ``= = =`` and ``= =`` closed up to ``===`` and ``==`` and the line
    stripped, it starts with ``"= "`` and ends with ``" ="``. So a sub-heading
    ``" = = Career = = "`` (``"== Career =="``) stays inside its article."""
    s = line.replace("= = =", "===").replace("= =", "==").strip()
    return s.startswith("= ") and s.endswith(" =")


def split_wikitext_articles(text: str) -> list[str]:
    """A WikiText ``.raw`` text as the pages of ``EleutherAI/wikitext_document_level``:
    lines (split on ``"\n"``) grouped from one article heading to the next, each page its
    lines joined by ``"\n"`` (heading included). A blank stretch before the first heading
    is no page; the last page runs to the end of the text."""
    pages, lines = [], []
    for line in text.split("\n"):
        if _is_article_heading(line):
            page = "\n".join(lines)
            if page.strip():
                pages.append(page)
            lines = []
        lines.append(line)
    pages.append("\n".join(lines))
    return pages


# lm-eval's `wikitext_detokenizer` (lm_eval/tasks/wikitext/preprocess_wikitext.py), rule for rule and
# in its order: a string is a plain replacement (str.replace), a compiled pattern a re.sub.
_WIKITEXT_DETOKENIZER: list[tuple[str | re.Pattern, str]] = [
    # possessives "players ' union" -> "players' union"; the pattern is lm-eval's as written: it
    # matches only a literal "/' 5/" and writes "/'[0-9]/", kept so the output is the same
    ("s '", "s'"),
    (re.compile(r"/' [0-9]/"), r"/'[0-9]/"),
    # number separators: "1 @,@ 000" -> "1,000", "3 @.@ 5" -> "3.5", "well @-@ known" -> "well-known"
    (" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."),
    # punctuation followed by a space loses the space before it
    (" : ", ": "), (" ; ", "; "), (" . ", ". "), (" ! ", "! "), (" ? ", "? "), (" , ", ", "),
    # no spaces just inside brackets and quotes ("( a b )" -> "(a b)"; the match may span lines)
    (re.compile(r"\(\s*([^\)]*?)\s*\)"), r"(\1)"),
    (re.compile(r"\[\s*([^\]]*?)\s*\]"), r"[\1]"),
    (re.compile(r"{\s*([^}]*?)\s*}"), r"{\1}"),
    (re.compile(r"\"\s*([^\"]*?)\s*\""), r'"\1"'),
    (re.compile(r"'\s*([^']*?)\s*'"), r"'\1'"),
    # headings "= = Career = =" -> "== Career =="; degrees "5 ° C" -> "5°C"
    ("= = = =", "===="), ("= = =", "==="), ("= =", "=="), (" \u00b0 ", "\u00b0"),
    # no spaces around line breaks; " N " -> " 1 "; "John 's" -> "John's"
    (" \n", "\n"), ("\n ", "\n"), (" N ", " 1 "), (" 's", "'s"),
]


def wikitext_detokenize(page: str) -> str:
    """The text lm-eval's ``wikitext`` task gives the model for a page (it mirrors
    lm-eval's ``wikitext_detokenizer``; see ``_WIKITEXT_DETOKENIZER``)."""
    for pattern, repl in _WIKITEXT_DETOKENIZER:
        page = pattern.sub(repl, page) if isinstance(pattern, re.Pattern) else page.replace(pattern, repl)
    return page


def wikitext_counts(page: str) -> tuple[int, int]:
    r"""Words and bytes of a page as lm-eval's ``wikitext`` counts them: on the original
    page (before detokenising), words as ``len(re.split(r"\s+", page))`` (the empty
    pieces before a leading and after a trailing space count too), bytes in UTF-8."""
    return len(re.split(r"\s+", page)), len(page.encode("utf-8"))


def evaluate_wikitext_ppl(model: EvalModel, docs: list[tuple[str, str]], seq_len: int | None = None,
                          batch_tokens: int = 8192, progress: bool = True, limit: int | None = None):
    """WikiText scored as lm-eval's ``wikitext`` task: each ``.raw`` text split into
    articles (``split_wikitext_articles``), each article detokenised
    (``wikitext_detokenize``) and scored on its own by rolling log-likelihood (as
    ``evaluate_text_ppl``), then word perplexity, byte perplexity and bits per byte over
    the words and bytes of the original articles (``wikitext_counts``), summed over all
    articles: lm-eval's ``word_perplexity``, ``byte_perplexity``, ``bits_per_byte``.
    ``limit`` keeps the first N articles, whole (lm-eval's ``--limit``)."""
    articles = []
    for name, text in docs:
        if not any(_is_article_heading(line) for line in text.split("\n")):
            raise ValueError(f"{name}: no WikiText article heading (a line ' = Title = '); "
                             f"--wikitext reads the .raw files of WikiText-2/103")
        articles += [(f"{name}:{k}", page) for k, page in enumerate(split_wikitext_articles(text))]
    if limit:
        articles = articles[:limit]
    res, owner, _, _ = _score_texts(model, [wikitext_detokenize(p) for _, p in articles], seq_len, batch_tokens,
                                    progress)
    nll = sum(r[0] for r in res)
    ntok = sum(r[1] for r in res)
    counts = [wikitext_counts(p) for _, p in articles]
    nwords, nbytes = sum(w for w, _ in counts), sum(b for _, b in counts)
    records = _window_records([n for n, _ in articles], owner, res)
    loss = nll / max(ntok, 1)
    return ({"loss": loss, "ppl": math.exp(loss), "word_ppl": math.exp(nll / max(nwords, 1)),
             "byte_ppl": math.exp(nll / max(nbytes, 1)), "bits_per_byte": nll / max(nbytes, 1) / math.log(2),
             "tokens": ntok, "n": len(records), "articles": len(articles)}, records)


def dataset_windows(dataset_dir: str | Path, seq_len: int, num_windows: int | None = None,
                    seed: int = 1234) -> torch.Tensor:
    """Validation windows (N, seq_len + 1) of a dataset folder, chosen exactly as training
    chooses them (``mhar.data.validation_windows``), so the numbers pair with a run's."""
    from mhar.data import TokenDataset, validation_windows
    d = Path(dataset_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is a file, not a dataset folder (made by `mhar data build`)" if d.exists()
                                else f"dataset folder {d} does not exist")
    return validation_windows(TokenDataset(d), seq_len=seq_len, num_windows=num_windows, seed=seed)


def evaluate_windows(model: EvalModel, windows, batch_tokens: int = 8192, progress: bool = True):
    """Validation loss over fixed token windows (N, T+1): the mean next-token
    cross-entropy over all predicted tokens, its standard error across windows, and
    per-window losses (records) for pairing."""
    rows = [list(map(int, w)) for w in (windows.tolist() if hasattr(windows, "tolist") else windows)]
    if not rows:
        raise ValueError("no validation windows")
    if len(rows[0]) - 1 > model.max_len:
        raise ValueError(f"window of {len(rows[0]) - 1} tokens exceeds the model's max length {model.max_len}")
    res = _window_losses(model, rows, batch_tokens, progress, "val loss")
    nll, ntok = sum(r[0] for r in res), sum(r[1] for r in res)
    records = [{"id": f"window{k}", "loss": r[0] / r[1], "tokens": r[1]} for k, r in enumerate(res)]
    per = np.array([r["loss"] for r in records])
    se = float(per.std(ddof=1) / math.sqrt(len(per))) if len(per) > 1 else float("nan")
    return {"loss": nll / ntok, "loss_stderr": se, "ppl": math.exp(nll / ntok), "tokens": ntok,
            "n": len(records)}, records
