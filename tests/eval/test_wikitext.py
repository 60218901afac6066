"""WikiText scored as lm-eval's `wikitext` task: the article split of
EleutherAI/wikitext_document_level, lm-eval's detokeniser, its word and byte counts, and
per-article rolling log-likelihood."""

import json
import math
import re

import pytest

from mhar.eval import scoring

# Three articles in the format of wiki.*.raw: every line starts with a space, blank lines are
# " ", headings are " = Title = " (article), " = = Section = = " and " = = = Sub = = = " (inside it)
A1 = (" = Valkyria Chronicles = \n"
      " \n"
      " Senjō no Valkyria is a tactical role @-@ playing game . It sold 1 @,@ 000 copies in 2011 ( Japan ) . \n"
      " \n"
      " = = Gameplay = = \n"
      " \n"
      " The game 's battles are 3 @.@ 5 km long ; the players ' units move . \n"
      " \n"
      " = = = Plot = = = \n"
      " \n"
      ' Is it " real " ? Yes ! \n'
      " ")
A2 = (" = Tropical Storm = \n"
      " \n"
      " Winds reached 40 ° C , [ citation needed ] : N deaths . \n"
      " \n"
      " = = Impact = = \n"
      " \n"
      " Damage was light . \n"
      " ")
A3 = (" = Robert Boulter = \n"
      " \n"
      " Robert Boulter is an English actor . \n")
WIKI = " \n" + A1 + "\n" + A2 + "\n" + A3
ARTICLES = [A1, A2, A3]
# what the model reads: each article through lm-eval's wikitext_detokenizer, worked by hand
DETOK = [
    (" = Valkyria Chronicles =\n\nSenjō no Valkyria is a tactical role-playing game. It sold 1,000 copies in "
     "2011 (Japan).\n\n== Gameplay ==\n\nThe game's battles are 3.5 km long; the players' units move.\n\n"
     '=== Plot ===\n\nIs it "real"? Yes!\n'),
    " = Tropical Storm =\n\nWinds reached 40°C, [citation needed]: 1 deaths.\n\n== Impact ==\n\nDamage was light.\n",
    " = Robert Boulter =\n\nRobert Boulter is an English actor.\n",
]


def test_articles_split_at_top_level_headings_only():
    assert scoring.split_wikitext_articles(WIKI) == ARTICLES
    # text before the first heading is a page of its own unless it is blank
    assert scoring.split_wikitext_articles(" intro \n" + A3) == [" intro ", A3]
    assert not scoring._is_article_heading(" = = Gameplay = = ")
    assert not scoring._is_article_heading(" = = = = Deep = = = = ")
    assert scoring._is_article_heading(" = Valkyria Chronicles = ")


@pytest.mark.parametrize("raw, expected", [
    ("the players ' union", "the players' union"),
    ("a/' 5/b", "a/'[0-9]/b"),  # lm-eval's pattern, matched literally
    ("a role @-@ playing game", "a role-playing game"),
    ("1 @,@ 000", "1,000"),
    ("3 @.@ 5", "3.5"),
    ("a : b", "a: b"), ("a ; b", "a; b"), ("a . B", "a. B"), ("a ! B", "a! B"), ("a ? B", "a? B"),
    ("a , b", "a, b"),
    ("a . ", "a. "), ("a .", "a ."),  # only a mark with a space after it
    ("in 2011 ( Japan )", "in 2011 (Japan)"),
    ("[ citation needed ]", "[citation needed]"),
    ("{ x y }", "{x y}"),
    ('he said " hello there " twice', 'he said "hello there" twice'),
    ("the ' Ace ' card", "the 'Ace' card"),
    ("( a\nb )", "(a\nb)"),  # a bracket's match spans lines
    (" = = Gameplay = = ", " == Gameplay == "),
    (" = = = Plot = = = ", " === Plot === "),
    (" = = = = Deep = = = = ", " ==== Deep ==== "),
    ("40 ° C", "40°C"),
    ("end \nnext", "end\nnext"), ("end\n next", "end\nnext"),
    ("a N b", "a 1 b"),
    ("John 's book", "John's book"),
])
def test_detokenizer_rules(raw, expected):
    assert scoring.wikitext_detokenize(raw) == expected


def test_detokenized_articles():
    assert [scoring.wikitext_detokenize(a) for a in ARTICLES] == DETOK


def test_word_and_byte_counts_are_lm_evals():
    # words: re.split(r"\s+", page) on the original page, so the empty pieces before the leading
    # space and after the last newline count: '', '=', 'A', '=', 'x', '@-@', 'y', '°', ''
    assert scoring.wikitext_counts(" = A = \n \n x @-@ y ° \n") == (9, 23)  # 22 characters, ° is 2 bytes
    assert scoring.wikitext_counts(A3) == (13, 62)
    for a in ARTICLES:
        assert scoring.wikitext_counts(a) == (len(re.split(r"\s+", a)), len(a.encode("utf-8")))


def test_each_article_is_scored_alone_from_its_detokenized_text(tiny_model):
    # seq_len 48: every article spans several windows, the last one a shorter chunk
    m, recs = scoring.evaluate_wikitext_ppl(tiny_model, [("wiki.test.raw", WIKI)], seq_len=48, progress=False)
    alone = [scoring.evaluate_text_ppl(tiny_model, [(f"wiki.test.raw:{k}", d)], seq_len=48, progress=False)
             for k, d in enumerate(DETOK)]
    nll = sum(a["loss"] * a["tokens"] for a, _ in alone)
    tokens = sum(a["tokens"] for a, _ in alone)
    assert m["tokens"] == tokens == sum(len(d.encode()) for d in DETOK)  # a byte model reads the detokenized text
    assert m["loss"] == pytest.approx(nll / tokens, rel=1e-6) and m["ppl"] == pytest.approx(math.exp(m["loss"]))
    # one record per window, named by its article (wiki.test.raw:K) and the window's number
    assert [r["id"].split("#")[0] for r in recs] == [r["id"].split("#")[0] for _, rs in alone for r in rs]
    assert [r["loss"] for r in recs] == pytest.approx([r["loss"] for _, rs in alone for r in rs], rel=1e-5)
    words = sum(len(re.split(r"\s+", a)) for a in ARTICLES)
    nbytes = sum(len(a.encode("utf-8")) for a in ARTICLES)
    assert m["word_ppl"] == pytest.approx(math.exp(nll / words), rel=1e-6)
    assert m["byte_ppl"] == pytest.approx(math.exp(nll / nbytes), rel=1e-6)
    assert m["bits_per_byte"] == pytest.approx(nll / nbytes / math.log(2), rel=1e-6)
    assert m["articles"] == 3 and m["n"] == len(recs)


def test_limit_keeps_whole_articles(tiny_model):
    # lm-eval's --limit: the first N documents (articles), each scored whole
    m, _ = scoring.evaluate_wikitext_ppl(tiny_model, [("w", WIKI)], seq_len=48, progress=False, limit=2)
    ref, _ = scoring.evaluate_text_ppl(tiny_model, [(f"w:{k}", d) for k, d in enumerate(DETOK[:2])], seq_len=48,
                                       progress=False)
    nll = ref["loss"] * ref["tokens"]
    assert m["articles"] == 2 and m["tokens"] == ref["tokens"]
    assert m["word_ppl"] == pytest.approx(math.exp(nll / sum(len(re.split(r"\s+", a)) for a in ARTICLES[:2])),
                                          rel=1e-6)
    assert m["bits_per_byte"] == pytest.approx(nll / len((A1 + A2).encode()) / math.log(2), rel=1e-6)


def test_text_without_article_headings_is_refused(tiny_model):
    with pytest.raises(ValueError, match="notes.txt: no WikiText article heading"):
        scoring.evaluate_wikitext_ppl(tiny_model, [("notes.txt", "just some text\n = = Section = = \n")],
                                      progress=False)


def test_cli_wikitext_flag_and_the_note_without_it(tiny_model, tmp_path, monkeypatch, capsys):
    from mhar.cli import main as cli_main
    from mhar.eval import adapter
    f = tmp_path / "wiki.test.raw"
    f.write_text(WIKI, encoding="utf-8")
    monkeypatch.setattr(adapter, "load_for_eval", lambda *a, **k: tiny_model)
    assert cli_main(["eval", "tiny", "--ppl", str(f), "--wikitext", "--seq-len", "48", "--out", str(tmp_path / "w"),
                     "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert "note:" not in cap.err
    assert cap.out.startswith("wikitext") and "(3 articles)" in cap.out and "byte_ppl" in cap.out
    res = json.loads((tmp_path / "w" / "results.json").read_text())["results"]["wikitext"]
    ref, _ = scoring.evaluate_wikitext_ppl(tiny_model, [("wiki.test.raw", WIKI)], seq_len=48, progress=False)
    assert res["articles"] == 3 and res["word_ppl"] == pytest.approx(ref["word_ppl"])
    assert res["byte_ppl"] == pytest.approx(ref["byte_ppl"])
    assert "byte_ppl" in (tmp_path / "w" / "results.md").read_text()
    # without the flag: the file is one document, and one line suggests --wikitext
    assert cli_main(["eval", "tiny", "--ppl", str(f), "--seq-len", "48", "--no-progress"]) == 0
    cap = capsys.readouterr()
    notes = [line for line in cap.err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "wiki.test.raw" in notes[0] and "--wikitext" in notes[0]
    assert cap.out.startswith("ppl") and "articles" not in cap.out
    # --wikitext scores --ppl files: without them it is refused before loading a model
    assert cli_main(["eval", "tiny", "--tasks", "piqa", "--wikitext"]) == 2
    err = capsys.readouterr().err
    assert "--wikitext scores the --ppl files" in err and "evaluating" not in err
