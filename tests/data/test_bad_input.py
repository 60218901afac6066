import json
import os
import shutil
import struct

import pytest

from mhar.data import TokenDataset, TokenLoader, build_dataset
from mhar.data import build as build_mod
from mhar.data.shards import HEADER_BYTES

from .conftest import make_docs, write_corpus


@pytest.fixture
def copy(built, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(built, dst)
    return dst


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        build_dataset([tmp_path / "nope"], tmp_path / "out", vocab_size=300)
    assert not (tmp_path / "out").exists()


def test_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty.*empty"):
        build_dataset([tmp_path / "empty"], tmp_path / "out", vocab_size=300)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == [tmp_path / "empty"]


def test_only_binary_files(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "a.txt").write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(ValueError, match="no usable text.*1 files skipped"):
        build_dataset([tmp_path / "bin"], tmp_path / "out", vocab_size=300)


def test_binary_and_non_utf8_skipped_and_counted(tmp_path):
    root = write_corpus(tmp_path / "c", make_docs(20, seed=1))
    (root / "blob.bin").write_bytes(bytes(range(256)) * 10)
    (root / "latin1.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e".encode("latin-1"))
    (root / "blank.md").write_text("   \n\n")
    m = TokenDataset(build_dataset([root], tmp_path / "out", vocab_size=300)).manifest
    assert m["documents"] == 20
    assert m["skipped"] == {"binary": 1, "non_utf8": 1, "empty": 1}
    reasons = {(e["file"].rsplit("/", 1)[-1], e["reason"]) for e in m["sources"][0]["skipped_examples"]}
    assert reasons == {("blob.bin", "binary"), ("latin1.txt", "non-utf8"), ("blank.md", "empty")}


def test_bad_jsonl_names_file_and_line(tmp_path):
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "x.jsonl").write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(ValueError, match=r"x.jsonl:2: no 'text' field"):
        build_dataset([tmp_path / "j"], tmp_path / "out", vocab_size=300)
    (tmp_path / "j" / "x.jsonl").write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match=r"x.jsonl:2: not valid JSON"):
        build_dataset([tmp_path / "j"], tmp_path / "out", vocab_size=300)


def test_token_id_at_or_above_vocab(copy):
    shard = copy / "train-00000.bin"
    with open(shard, "r+b") as f:
        f.seek(HEADER_BYTES + 2 * 100)
        f.write(struct.pack("<H", 320))  # vocab is 320: id 320 is out of range
    with pytest.raises(ValueError, match=r"train-00000.bin: token id 320 at position 100 is >= the vocabulary size 320"):
        TokenDataset(copy)
    # without the up-front scan the loader still refuses the bad window
    ds = TokenDataset(copy, verify=False)
    ld = TokenLoader(ds, 16, ds.manifest["splits"]["train"]["tokens"] // 17, seed=0)
    with pytest.raises(ValueError, match="train-00000.bin: token id 320"):
        for _ in range(3):
            ld.next_batch()


def test_truncated_shard(copy):
    shard = copy / "train-00000.bin"
    data = shard.read_bytes()
    shard.write_bytes(data[:-10])
    with pytest.raises(ValueError, match="train-00000.bin: truncated"):
        TokenDataset(copy)
    shard.write_bytes(data[:20])
    with pytest.raises(ValueError, match="train-00000.bin: truncated"):
        TokenDataset(copy)


def test_missing_shard(copy):
    (copy / "validation-00000.bin").unlink()
    with pytest.raises(ValueError, match="validation-00000.bin: shard file missing"):
        TokenDataset(copy)


def test_manifest_and_tokenizer_disagree(copy, tmp_path, corpus_dir):
    other = build_dataset([corpus_dir], tmp_path / "other", vocab_size=300)
    shutil.copy(other / "tokenizer.json", copy / "tokenizer.json")
    with pytest.raises(ValueError, match="tokenizer.json: tokenizer does not match the manifest"):
        TokenDataset(copy)
    # and a manifest edited to the new tokenizer's hash is caught by the shard headers
    m = json.loads((copy / "manifest.json").read_text())
    m["tokenizer"]["sha256"] = json.loads((other / "manifest.json").read_text())["tokenizer"]["sha256"]
    m["tokenizer"]["vocab_size"] = m["tokenizer"]["model_vocab_size"] = 300
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="train-00000.bin: shard was written with a different tokenizer"):
        TokenDataset(copy)


def test_reading_with_a_different_tokenizer(ds, tmp_path, corpus_dir):
    other = TokenDataset(build_dataset([corpus_dir], tmp_path / "other", vocab_size=300))
    TokenDataset(ds.path, tokenizer=ds.tokenizer)  # the right one is fine
    with pytest.raises(ValueError, match="not the requested tokenizer"):
        TokenDataset(ds.path, tokenizer=other.tokenizer)
    with pytest.raises(ValueError, match="not the requested tokenizer"):
        TokenDataset(ds.path, tokenizer=str(other.path / "tokenizer.json"))


def test_not_a_dataset(tmp_path):
    with pytest.raises(ValueError, match="no such dataset directory"):
        TokenDataset(tmp_path / "missing")
    (tmp_path / "half").mkdir()
    with pytest.raises(ValueError, match=r"half/manifest.json: missing"):
        TokenDataset(tmp_path / "half")


def test_interrupted_build_never_looks_complete(tmp_path, corpus_dir, built, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_mod.ShardWriter, "close", boom)
    with pytest.raises(KeyboardInterrupt):
        build_dataset([corpus_dir], tmp_path / "out", vocab_size=300)
    assert list(tmp_path.iterdir()) == []  # no half-built directory left, nothing named "out"
    # replacing an existing dataset that fails keeps the old one intact
    with pytest.raises(KeyboardInterrupt):
        build_dataset([corpus_dir], built, vocab_size=300, overwrite=True)
    monkeypatch.undo()
    assert TokenDataset(built).vocab_size == 320
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".")]


def test_overwrite_replaces(tmp_path, corpus_dir):
    out = build_dataset([corpus_dir], tmp_path / "out", vocab_size=300)
    build_dataset([corpus_dir], out, vocab_size=310, overwrite=True)
    assert TokenDataset(out).vocab_size == 310
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_bad_options(tmp_path, corpus_dir):
    with pytest.raises(ValueError, match="vocab_size=10"):
        build_dataset([corpus_dir], tmp_path / "o", vocab_size=10)
    with pytest.raises(ValueError, match="val_fraction"):
        build_dataset([corpus_dir], tmp_path / "o", val_fraction=1.5)
    with pytest.raises(FileNotFoundError, match="nosuch.json"):
        build_dataset([corpus_dir], tmp_path / "o", tokenizer=str(tmp_path / "nosuch.json"))
    assert not (tmp_path / "o").exists()


def test_jsonl_records_split_on_newlines_only(tmp_path):
    # json.dumps(ensure_ascii=False) leaves U+2028/U+2029, NEL and form feeds unescaped inside
    # strings; JSON Lines separates records by "\n" only, so these must stay inside their record.
    docs = make_docs(6, seed=12) + ["one\u2028two\u2029three", "next\x85line", "page\x0cbreak", "crlf\r\nend"]
    (tmp_path / "j").mkdir()
    with open(tmp_path / "j" / "x.jsonl", "w", encoding="utf-8", newline="") as f:
        f.writelines(json.dumps({"text": d}, ensure_ascii=False) + "\r\n" for d in docs)
    ds = TokenDataset(build_dataset([tmp_path / "j"], tmp_path / "out", vocab_size=300, val_fraction=0.0))
    from .test_build import split_docs
    assert sorted(split_docs(ds, "train")) == sorted(docs)


def test_jsonl_with_byte_order_mark(tmp_path):
    docs = make_docs(5, seed=13)
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "x.jsonl").write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps({"text": d}) + "\n" for d in docs).encode())
    ds = TokenDataset(build_dataset([tmp_path / "j"], tmp_path / "out", vocab_size=300, val_fraction=0.0))
    assert ds.num_documents("train") == 5


def test_lone_surrogates_are_replaced_not_a_crash(tmp_path):
    # JSON may escape a lone surrogate ("\ud800"), which is no valid UTF-8: the document is
    # kept with "?" in its place, and hashed (split, dedup) as the text that is stored.
    docs = make_docs(8, seed=14)
    (tmp_path / "j").mkdir()
    lines = [json.dumps({"text": d}) for d in docs] + ['{"text": "broken \\ud800 pair"}', '{"text": "broken \\udc00 pair"}']
    (tmp_path / "j" / "x.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ds = TokenDataset(build_dataset([tmp_path / "j"], tmp_path / "out", vocab_size=300, val_fraction=0.3))
    from mhar.data.sources import content_hash
    from .test_build import split_docs
    train, val = split_docs(ds, "train"), split_docs(ds, "validation")
    assert sorted(train + val) == sorted(docs + ["broken ? pair"])
    assert ds.manifest["dedup"]["duplicates_removed"] == 1
    assert all(int.from_bytes(content_hash(d)[:8], "little") / 2**64 < 0.3 for d in val)
    assert not any(int.from_bytes(content_hash(d)[:8], "little") / 2**64 < 0.3 for d in train)


def test_output_overlapping_a_source_is_refused(tmp_path):
    root = write_corpus(tmp_path / "notes", make_docs(6, seed=15))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    # inside the source folder: a rebuild would read the old dataset's manifest and tokenizer as text;
    # the source itself, or a folder above it: --overwrite would delete the source
    for out, src in ((root / "ds", root), (root / "records.jsonl", root / "records.jsonl"), (root, root / "part0"),
                     (tmp_path, root)):
        with pytest.raises(ValueError, match="overlaps the source"):
            build_dataset([src], out, vocab_size=300, overwrite=True)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_killed_build_leftovers_are_removed_by_the_next_build(tmp_path, corpus_dir):
    # SIGTERM/SIGKILL (a job's time limit, `timeout`) runs no cleanup: the temporary directory,
    # with a spool of all the text, stays behind; the next build of that output removes it.
    dead = tmp_path / ".out.tmp-999999999-deadbeef"  # no such process
    live = tmp_path / f".out.tmp-{os.getpid()}-cafecafe"  # a build still running
    for d in (dead, live):
        d.mkdir()
        (d / "documents.spool").write_bytes(b"x" * 1000)
    build_dataset([corpus_dir], tmp_path / "out", vocab_size=300)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "out"])


def test_overwrite_only_replaces_a_dataset(tmp_path, corpus_dir):
    # --overwrite replaces an old dataset (complete or not); a folder or file of something else
    # is the user's and is never deleted
    precious = tmp_path / "thesis"
    precious.mkdir()
    (precious / "chapter1.tex").write_text("years of work")
    (tmp_path / "notes.txt").write_text("keep me")
    for out in (precious, tmp_path / "notes.txt"):
        with pytest.raises(ValueError, match="not a dataset"):
            build_dataset([corpus_dir], out, vocab_size=300, overwrite=True)
    assert (precious / "chapter1.tex").read_text() == "years of work" and (tmp_path / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "thesis"]
    out = build_dataset([corpus_dir], tmp_path / "ds", vocab_size=300)
    (out / "manifest.json").unlink()  # an incomplete dataset can still be replaced
    build_dataset([corpus_dir], out, vocab_size=310, overwrite=True)
    assert TokenDataset(out).vocab_size == 310
