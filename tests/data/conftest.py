import json
import random

import pytest

from mhar.data import TokenDataset, build_dataset

WORDS = ("def return class import self the of and to in is for x y z = ( ) [ ] : , . + - * "
         "tensor model layer attention residual depth route head softmax norm naïve café 数据 λ ∑").split()


def make_docs(n: int, seed: int = 0, min_words: int = 20, max_words: int = 400) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        k = rng.randint(min_words, max_words)
        lines = []
        line = []
        for _ in range(k):
            line.append(rng.choice(WORDS))
            if rng.random() < 0.12:
                lines.append("    " * rng.randint(0, 2) + " ".join(line))
                line = []
        lines.append(" ".join(line))
        docs.append(f"# doc {i}\n" + "\n".join(lines) + "\n")
    return docs


def write_corpus(root, docs, kinds=("txt", "md", "jsonl")):
    """Spread docs over .txt / .md files (one doc each) and one .jsonl file."""
    root.mkdir(parents=True, exist_ok=True)
    jsonl = []
    for i, d in enumerate(docs):
        kind = kinds[i % len(kinds)]
        if kind == "jsonl":
            jsonl.append(d)
        else:
            sub = root / f"part{i % 3}"
            sub.mkdir(exist_ok=True)
            (sub / f"doc{i:04d}.{kind}").write_text(d, encoding="utf-8")
    if jsonl:
        with open(root / "records.jsonl", "w", encoding="utf-8") as f:
            for d in jsonl:
                f.write(json.dumps({"text": d, "meta": 1}) + "\n")
    return root


@pytest.fixture(scope="session")
def corpus_docs():
    return make_docs(120, seed=0)


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory, corpus_docs):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c", corpus_docs)


@pytest.fixture(scope="session")
def built(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("ds") / "ds"
    return build_dataset([corpus_dir], out, tokenizer="bpe", vocab_size=320, val_fraction=0.1)


@pytest.fixture(scope="session")
def ds(built):
    return TokenDataset(built)


def pytest_collection_modifyitems(config, items):
    """Tests marked slow in tests/data are skipped unless asked for (`-m slow` or MHAR_SLOW_TESTS=1)."""
    import os
    from pathlib import Path
    if os.environ.get("MHAR_SLOW_TESTS") == "1" or "slow" in (config.getoption("-m") or ""):
        return
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="slow: run with -m slow or MHAR_SLOW_TESTS=1")
    for item in items:
        if "slow" in item.keywords and here in Path(str(item.fspath)).parents:
            item.add_marker(skip)
