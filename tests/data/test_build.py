import numpy as np
import pytest

from mhar.data import TokenDataset, build_dataset
from mhar.data.sources import content_hash

from .conftest import make_docs, write_corpus


def split_docs(ds, split):
    toks = ds.tokens(split)
    ends = np.flatnonzero(toks == ds.eot_id)
    out, start = [], 0
    for e in ends:
        out.append(ds.decode(toks[start:e]))
        start = e + 1
    assert start == toks.size  # every document ends with the end-of-text token
    return out


def test_round_trip(ds, corpus_docs):
    train, val = split_docs(ds, "train"), split_docs(ds, "validation")
    assert sorted(train + val) == sorted(corpus_docs)
    assert ds.shards("train")[0].dtype == np.uint16
    assert ds.num_tokens("train") == ds.manifest["splits"]["train"]["tokens"] > 0
    assert ds.num_documents("train") + ds.num_documents("validation") == len(corpus_docs)
    assert ds.decode(ds.encode(corpus_docs[3])) == corpus_docs[3]
    assert ds.vocab_size == 320 and ds.tokenizer.get_vocab_size() == 320


def test_manifest_records_sources_and_tokenizer(ds, corpus_dir):
    m = ds.manifest
    assert m["complete"] is True and m["dtype"] == "uint16"
    assert m["tokenizer"]["kind"] == "bpe" and len(m["tokenizer"]["sha256"]) == 64
    (src,) = m["sources"]
    assert src["kind"] == "local" and src["location"] == str(corpus_dir.resolve()) and src["licence"]
    assert src["documents"] == 120
    assert m["splits"]["validation"]["documents"] > 0


def test_split_deterministic_and_disjoint(tmp_path, corpus_docs, ds):
    # Same documents in another order and layout -> the same split.
    c2 = write_corpus(tmp_path / "c2", list(reversed(corpus_docs)), kinds=("jsonl",))
    ds2 = TokenDataset(build_dataset([c2], tmp_path / "ds2", vocab_size=320, val_fraction=0.1))
    assert ds2.tokenizer_sha256 == ds.tokenizer_sha256  # the BPE sample does not depend on order either
    for split in ("train", "validation"):
        assert sorted(split_docs(ds2, split)) == sorted(split_docs(ds, split))
    train, val = set(split_docs(ds, "train")), set(split_docs(ds, "validation"))
    assert train and val and not (train & val)
    # The rule is the documented hash rule.
    for d in val:
        assert int.from_bytes(content_hash(d)[:8], "little") / 2**64 < 0.1


def test_bpe_sample_is_order_independent(tmp_path, corpus_docs):
    from mhar.data.build import _Sampler
    from mhar.data.sources import content_hash
    samples = []
    for docs in (corpus_docs, corpus_docs[::-1], corpus_docs[1::2] + corpus_docs[::2]):
        s = _Sampler(20_000)
        for d in docs:
            s.offer(content_hash(d), d)
        samples.append(s.texts())
    assert samples[0] == samples[1] == samples[2]
    assert 20_000 <= sum(map(len, samples[0])) < 20_000 + max(map(len, corpus_docs))


def test_build_is_deterministic(tmp_path, corpus_dir, built):
    again = build_dataset([corpus_dir], tmp_path / "again", vocab_size=320, val_fraction=0.1)
    for f in ("tokenizer.json", "train-00000.bin", "validation-00000.bin"):
        assert (again / f).read_bytes() == (built / f).read_bytes()


def test_exact_dedup(tmp_path):
    docs = make_docs(10, seed=3)
    root = write_corpus(tmp_path / "c", docs + docs[:4])  # 4 exact duplicates
    m = TokenDataset(build_dataset([root], tmp_path / "d", vocab_size=300)).manifest
    assert m["documents"] == 10 and m["dedup"]["duplicates_removed"] == 4


def test_parquet_source(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    docs = make_docs(12, seed=5)
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"body": docs, "n": list(range(12))}), tmp_path / "p" / "x.parquet")
    ds = TokenDataset(build_dataset([tmp_path / "p"], tmp_path / "d", vocab_size=300, text_field="body"))
    assert ds.manifest["documents"] == 12
    with pytest.raises(ValueError, match="x.parquet.*'text'"):
        build_dataset([tmp_path / "p"], tmp_path / "d2", vocab_size=300)


def test_shards_split_by_size(tmp_path, corpus_dir, corpus_docs):
    ds = TokenDataset(build_dataset([corpus_dir], tmp_path / "d", vocab_size=320, val_fraction=0.1, shard_tokens=2000))
    assert len(ds.shards("train")) > 3
    from .test_build import split_docs as sd
    assert sorted(sd(ds, "train") + sd(ds, "validation")) == sorted(corpus_docs)


def test_given_tokenizer_file_and_folder(tmp_path, corpus_dir, ds):
    tok_file = tmp_path / "tok" / "tokenizer.json"
    tok_file.parent.mkdir()
    ds.tokenizer.save(str(tok_file))
    for src in (tok_file, tok_file.parent):
        d = TokenDataset(build_dataset([corpus_dir], tmp_path / f"d-{src.name}", tokenizer=str(src), val_fraction=0.1))
        assert d.tokenizer_sha256 == ds.tokenizer_sha256
        assert d.manifest["tokenizer"]["kind"] == "file"
        assert d.num_tokens("train") == ds.num_tokens("train")


def test_existing_output_is_kept(tmp_path, corpus_dir, built):
    with pytest.raises(ValueError, match="already exists"):
        build_dataset([corpus_dir], built, vocab_size=320)
    assert TokenDataset(built).num_tokens("train") > 0


def test_literal_end_of_text_stays_inside_its_document(tmp_path):
    docs = make_docs(8, seed=11)
    docs[2] = "tokenizers use <|endoftext|> between documents\n" + docs[2]
    root = write_corpus(tmp_path / "c", docs)
    ds = TokenDataset(build_dataset([root], tmp_path / "d", vocab_size=300, val_fraction=0.0))
    assert ds.encode("<|endoftext|>") != [ds.eot_id]
    assert sorted(split_docs(ds, "train")) == sorted(docs)
    assert ds.manifest["splits"]["train"]["eot_tokens_inside_documents"] == 0


def test_bpe_end_of_text_is_last_id(ds, corpus_docs):
    assert ds.eot_id == ds.tokenizer_vocab_size - 1 == ds.tokenizer.token_to_id("<|endoftext|>")
    assert ds.decode([ds.eot_id]) == "<|endoftext|>"
    ids = ds.encode(corpus_docs[0])
    assert ds.eot_id not in ids and min(ids) >= 0


def test_end_of_text_of_a_custom_tokenizer(tmp_path, corpus_dir):
    from tokenizers import AddedToken
    from mhar.data import train_bpe
    import json as _json
    tok = train_bpe(make_docs(20, seed=2), 300)
    spec = _json.loads(tok.to_str())
    del spec["model"]["vocab"]["<|endoftext|>"]  # a tokenizer without any usual end-of-text token
    from tokenizers import Tokenizer
    tok = Tokenizer.from_str(_json.dumps(spec))
    tok.add_special_tokens([AddedToken("<|doc_end|>", special=True)])
    folder = tmp_path / "tok"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    with pytest.raises(ValueError, match="no end-of-text token.*--eot-token"):
        build_dataset([corpus_dir], tmp_path / "a", tokenizer=str(folder))
    assert not (tmp_path / "a").exists()
    ds = TokenDataset(build_dataset([corpus_dir], tmp_path / "b", tokenizer=str(folder), eot_token="<|doc_end|>"))
    assert ds.decode([ds.eot_id]) == "<|doc_end|>"
    (folder / "tokenizer_config.json").write_text(_json.dumps({"eos_token": {"content": "<|doc_end|>"}}))
    ds = TokenDataset(build_dataset([corpus_dir], tmp_path / "c", tokenizer=str(folder / "tokenizer.json")))
    assert ds.manifest["tokenizer"]["eot_token"] == "<|doc_end|>"


SPECIAL_TEXT_DOC = ("a chat is <|im_start|>user\nhi<|im_end|> and documents end with <|endoftext|>,"
                    " written here as text<|endoftext|>\n")


def assert_special_text_is_text(ds, docs, specials):
    """Exactly one end-of-text id per document (at its end), no other special id, and every
    document's ids decode back to its text."""
    ids = set(int(i) for i in ds.tokens("train")) | set(int(i) for i in ds.tokens("validation"))
    for t in specials:
        if ds.tokenizer.token_to_id(t) != ds.eot_id:
            assert ds.tokenizer.token_to_id(t) not in ids, t
    eots = int((ds.tokens("train") == ds.eot_id).sum() + (ds.tokens("validation") == ds.eot_id).sum())
    assert eots == len(docs)
    assert sorted(split_docs(ds, "train") + split_docs(ds, "validation")) == sorted(docs)
    for split in ("train", "validation"):
        assert ds.manifest["splits"][split]["eot_tokens_inside_documents"] == 0
    assert ds.manifest["tokenizer"]["encode_special_tokens"] is True
    # the dataset encodes text as its documents were: several ordinary ids, decoding back
    assert ds.encode_special_tokens is True
    for t in specials:
        ids = ds.encode(t)
        assert len(ids) > 1 and ds.eot_id not in ids and ds.decode(ids) == t, (t, ids)


def special_tokenizer_file(tmp_path):
    """A tokenizer.json (a small trained BPE) with "<|endoftext|>", "<|im_start|>" and
    "<|im_end|>" as added special tokens, which `tokenizers` matches inside raw text."""
    from tokenizers import AddedToken
    from mhar.data import train_bpe
    tok = train_bpe(make_docs(20, seed=2), 300)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    assert tok.encode("<|endoftext|>", add_special_tokens=False).ids == [tok.token_to_id("<|endoftext|>")]
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return path


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def test_special_token_text_of_a_tokenizer_file_stays_text(tmp_path):
    """A tokenizer.json whose added special tokens include the end-of-text token: a document
    holding "<|endoftext|>" and "<|im_start|>" as text gets no document boundary or control
    token inside it (the `tokenizers` library matches added special tokens in raw text)."""
    docs = make_docs(10, seed=12)
    docs[3] = SPECIAL_TEXT_DOC + docs[3]
    docs[6] = docs[6] + SPECIAL_TEXT_DOC
    tok_file = special_tokenizer_file(tmp_path)
    root = write_corpus(tmp_path / "c", docs)
    ds = TokenDataset(build_dataset([root], tmp_path / "d", tokenizer=str(tok_file), val_fraction=0.2))
    assert ds.manifest["tokenizer"]["kind"] == "file" and ds.eot_id == ds.tokenizer.token_to_id("<|endoftext|>")
    assert_special_text_is_text(ds, docs, SPECIALS)
    from mhar.data.tokenizer import load_tokenizer_file, tokenizer_hash
    assert ds.tokenizer_sha256 == tokenizer_hash(load_tokenizer_file(tok_file))  # saved as given (same hash)


def test_dataset_built_before_says_how_its_text_was_encoded(tmp_path, capsys):
    """A manifest without "encode_special_tokens" (built before it existed) still loads; with
    a tokenizer that has special tokens it encodes text as its documents were (special
    tokens matched) and says so; a trained-BPE one is the same as a new build."""
    import json as _json
    from mhar.cli import main
    root = write_corpus(tmp_path / "c", [SPECIAL_TEXT_DOC] + make_docs(5, seed=15))
    for name, tokenizer, old_way in (("file", str(special_tokenizer_file(tmp_path)), True), ("bpe", "bpe", False)):
        out = build_dataset([root], tmp_path / name, tokenizer=tokenizer, vocab_size=300)
        mpath = out / "manifest.json"
        m = _json.loads(mpath.read_text())
        del m["tokenizer"]["encode_special_tokens"]
        mpath.write_text(_json.dumps(m))
        ds = TokenDataset(out)
        assert ds.encode_special_tokens is not old_way
        assert (ds.encode("<|endoftext|>") == [ds.eot_id]) is old_way
        assert main(["data", "info", str(out)]) == 0
        assert ("may have become special ids" in capsys.readouterr().out) is old_way
        # training on it works, with a note when its documents' special-token text may be special ids
        assert main(["train", "--out", str(tmp_path / f"run-{name}"), "--quiet", "--method", "baseline",
                     f"data.source={out}", "steps=1", "eval_every=1", "batch_size=1", "seq_len=16", "d_model=16",
                     "n_layers=1", "n_heads=2", "n_kv_heads=1", "d_ff=16", "data.val_windows=1"]) == 0
        assert ("was built before `mhar data build` encoded" in capsys.readouterr().err) is old_way


def test_trained_bpe_special_text_unchanged(tmp_path):
    """The trained BPE already encoded special-token text as text (it has no added tokens):
    its ids are those of its plain encoding, and the manifest says how text was encoded."""
    from tokenizers import Tokenizer
    docs = make_docs(8, seed=13)
    docs[1] = SPECIAL_TEXT_DOC + docs[1]
    root = write_corpus(tmp_path / "c", docs)
    out = build_dataset([root], tmp_path / "d", vocab_size=300, val_fraction=0.0)
    ds = TokenDataset(out)
    assert_special_text_is_text(ds, docs, ["<|endoftext|>"])
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))  # as saved, no switch set
    assert tok.get_added_tokens_decoder() == {}
    plain = sorted(tuple(tok.encode(d, add_special_tokens=False).ids) + (ds.eot_id,) for d in docs)
    ids = ds.tokens("train").tolist()
    starts = [0] + [i + 1 for i, t in enumerate(ids) if t == ds.eot_id]
    assert sorted(tuple(ids[a:b]) for a, b in zip(starts, starts[1:])) == plain
