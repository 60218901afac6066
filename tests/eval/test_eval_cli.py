"""`mhar eval`'s refusals of bad arguments (one line each, before any model loads) and its
plain progress lines for logs."""

import os
import subprocess
import sys

import pytest

from mhar.cli import main
from mhar.eval import scoring


@pytest.mark.parametrize("args, message", [
    (["--seq-len", "-5"], "--seq-len must be at least 1; got -5"),
    (["--limit", "-1"], "--limit must be at least 1; got -1"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1; got 0"),
    (["--tasks", "ppl"], "unknown task 'ppl'"),
])
def test_bad_arguments_are_one_line(args, message, capsys):
    command = ["eval", "smollm2", *args] if "--tasks" in args else ["eval", "smollm2", "--tasks", "piqa", *args]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    if args[0] == "--tasks":
        assert "ppl, or" not in err and "--ppl FILE" in err


def test_out_a_file_and_a_file_named_gguf(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main(["eval", "smollm2", "--tasks", "piqa:2", "--out", str(notes)]) == 2
    assert "notes.txt is a file; --out names the folder" in capsys.readouterr().err
    fake = tmp_path / "fake.gguf"
    fake.write_text("hello")
    for command in (["eval", str(fake), "--tasks", "piqa:2"], ["convert", str(fake), str(tmp_path / "o")]):
        assert main(command) == 2
        assert "fake.gguf is not a GGUF file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert main(["eval", "smollm2", "--val", str(notes)]) == 2
    assert "notes.txt is a file, not a dataset folder" in capsys.readouterr().err


def test_jsonl_documents_name_the_bad_line(tmp_path):
    good = tmp_path / "a.jsonl"
    good.write_text('{"text": "one"}\n\n{"text": "two"}\n')
    assert [t for _, t in scoring.read_texts([good])] == ["one", "two"]
    for line, why in (('{"body": "x"}', "no 'text' field"), ("plain words", "not JSON"), ("[1, 2]", "no 'text'")):
        bad = tmp_path / "b.jsonl"
        bad.write_text('{"text": "fine"}\n' + line + "\n")
        with pytest.raises(ValueError, match=rf"b.jsonl:2: {why}"):
            scoring.read_texts([bad])


def test_plain_progress_lines(monkeypatch, capsys):
    """progress="lines": a line when a tenth more is done and 30 s have passed, none at the end
    (the task's result line follows), none for a task done within 30 s."""
    clock = [0.0]
    monkeypatch.setattr(scoring.time, "monotonic", lambda: clock[0])
    bar = scoring.progress_bar("lines", 100, "piqa", "items")
    for _ in range(100):
        clock[0] += 1.0
        bar.update(1)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["[mhar eval] piqa: 30/100 items (30%, 1.0 items/s)",
                     "[mhar eval] piqa: 60/100 items (60%, 1.0 items/s)",
                     "[mhar eval] piqa: 90/100 items (90%, 1.0 items/s)"], lines
    fast = scoring.progress_bar("lines", 100, "arc", "items")
    fast.update(100)
    assert capsys.readouterr().err == ""
    assert scoring.progress_bar(False, 5, "x").disable


def test_output_into_a_closed_pipe_stops_quietly(tmp_path):
    """`mhar ... | head`: the reader leaves; exit 141 with no error line (was 'error: Broken pipe')."""
    read, write = os.pipe()
    os.close(read)
    code = "import sys; from mhar.cli import main; sys.exit(main(['params', '--preset', 'paper-1b']))"
    proc = subprocess.run([sys.executable, "-c", code], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


def test_hub_progress_bars_are_off_in_logs(monkeypatch, capsys):
    """transformers' and the Hub's own bars (loading weights, writing shards) in a log file
    were carriage-return redraws: off when stderr is not a terminal (pytest's is not)."""
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "unset below")  # restored after the test
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")
    assert main(["params", "--preset", "tiny"]) == 0
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
