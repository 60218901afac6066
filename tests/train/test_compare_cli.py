"""mhar train / compare / sweep through the CLI, and the errors users can cause."""

import json
import sys

import pytest
import torch

from mhar.train.compare import comparison_table
from train_helpers import SMALL


def test_train_writes_a_run_folder(tmp_path, run_cli):
    run = tmp_path / "run"
    code, out, err = run_cli("train", "--method", "mhar-h2", "--out", run, "--quiet", *SMALL, "steps=4",
                             "eval_every=2", "checkpoint_every=2", "log_every=1")
    assert code == 0, err
    assert "final val loss" in out and str(run) in out
    assert "[mhar-h2] step 2/4" in err  # quiet mode: one plain line per evaluation
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["stream"] == {**cfg["model"]["stream"], "method": "routed", "heads": 2}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert {"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "memory_mb"} <= set(rows[0])
    assert [("val_loss" in r) for r in rows] == [False, True, False, True]
    assert rows[-1]["tokens"] == 4 * 2 * 16
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000002.pt", "step_00000004.pt"]
    assert (run / "loss.png").stat().st_size > 1000
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tail_mean_val_loss"] == pytest.approx((rows[1]["val_loss"] + rows[3]["val_loss"]) / 2)

    # resume of a finished run with more steps
    code, out, err = run_cli("train", "--out", run, "--resume", "--quiet", "steps=6")
    assert code == 0, err
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()][-1] == 6


def test_train_output_to_a_file_is_plain_lines(tmp_path, run_cli):
    """Without --quiet, stderr that is not a terminal (a log file, a pipe; capsys here) gets the
    plain per-evaluation lines, not a progress bar redrawn with carriage returns at every step."""
    code, out, err = run_cli("train", "--method", "mhar-h2", "--out", tmp_path / "run", *SMALL, "steps=4",
                             "eval_every=2")
    assert code == 0, err
    assert "\r" not in err and "\x1b" not in err, repr(err)
    assert "[mhar-h2] step 2/4" in err and "[mhar-h2] step 4/4" in err


def test_a_trainer_used_from_python_keeps_its_progress_bar(tmp_path, small_cfg):
    # the plain lines are the command's choice for a log file; a Trainer built in Python (a
    # notebook, whose stderr is no terminal either) keeps the bar it was asked for
    from mhar.train import Trainer

    assert not sys.stderr.isatty()  # as in a notebook
    assert Trainer(small_cfg("baseline", "steps=1"), tmp_path / "r", progress=True).progress


def test_compare_two_methods(tmp_path, run_cli):
    out_dir = tmp_path / "cmp"
    code, out, err = run_cli("compare", "--methods", "baseline,mhar-h2", "--out", out_dir, "--quiet", *SMALL,
                             "steps=6", "eval_every=2", "tail_k=2")
    assert code == 0, err
    lines = [_squeeze(x) for x in out.splitlines() if x.startswith("|")]
    assert lines[0].startswith("| method | H | params") and "tail-mean val loss (last 2)" in lines[0]
    assert lines[2].startswith("| baseline |") and "0 (ref)" in lines[2]
    assert lines[3].startswith("| mhar-h2 | 2 |")
    assert (out_dir / "curves.png").stat().st_size > 1000
    report = (out_dir / "report.md").read_text()
    assert "| mhar-h2 | 2 |" in _squeeze(report) and "curves.png" in report and "mhar compare" in report
    results = json.loads((out_dir / "compare.json").read_text())["results"]
    b, m = results
    delta = float(lines[3].split("|")[7])
    assert delta == pytest.approx(m["tail_mean_val_loss"] - b["tail_mean_val_loss"], abs=1e-4)
    # paired: same tokens, same number of evaluations at the same steps
    assert b["tokens"] == m["tokens"] and [e[0] for e in b["evals"]] == [e[0] for e in m["evals"]]

    # --resume reuses finished runs instead of training them again
    code, out2, err = run_cli("compare", "--methods", "baseline,mhar-h2", "--out", out_dir, "--resume", "--quiet",
                              *SMALL, "steps=6", "eval_every=2", "tail_k=2")
    assert code == 0 and err.count("reusing the finished run") == 2
    assert [_squeeze(x) for x in out2.splitlines() if x.startswith("|")] == lines

    # a plain --resume (the default methods, no overrides) is refused, not trained into the folder's runs
    # (it extended the finished baseline to the preset's steps and trained the default methods)
    before = (out_dir / "baseline" / "metrics.jsonl").read_text()
    code, _, err = run_cli("compare", "--out", out_dir, "--resume", "--quiet")
    assert code == 2 and "compares baseline,mhar-h2, not baseline,hyper,attnres,mhar" in err
    assert "mhar compare --methods baseline,mhar-h2" in err  # the command to resume with
    # so is one that drops an override: steps would go back to the preset's
    code, _, err = run_cli("compare", "--methods", "baseline,mhar-h2", "--out", out_dir, "--resume", "--quiet",
                           *SMALL, "eval_every=2", "tail_k=2")
    assert code == 2 and "does not set (steps: 6 -> " in err
    assert (out_dir / "baseline" / "metrics.jsonl").read_text() == before
    # a key the command sets may change, as in `mhar train --resume steps=8`: every run is extended
    code, _, err = run_cli("compare", "--methods", "baseline,mhar-h2", "--out", out_dir, "--resume", "--quiet",
                           *SMALL, "steps=8", "eval_every=2", "tail_k=2")
    assert code == 0, err
    for method in ("baseline", "mhar-h2"):
        rows = (out_dir / method / "metrics.jsonl").read_text().splitlines()
        assert json.loads(rows[-1])["step"] == 8


def test_compare_resume_of_an_interrupted_comparison(tmp_path, run_cli):
    """Before compare.json exists, the run folders name the methods: a method of theirs that
    the command leaves out is refused; ones not trained yet are welcome."""
    out_dir = tmp_path / "cmp"
    code, _, err = run_cli("compare", "--methods", "baseline", "--out", out_dir, "--quiet", *SMALL, "steps=2")
    assert code == 0, err
    (out_dir / "compare.json").unlink()  # as if stopped before the table
    code, _, err = run_cli("compare", "--methods", "mhar-h2", "--out", out_dir, "--resume", "--quiet", *SMALL,
                           "steps=2")
    assert code == 2 and "compares baseline, not mhar-h2" in err
    code, _, err = run_cli("compare", "--methods", "baseline,mhar-h2", "--out", out_dir, "--resume", "--quiet",
                           *SMALL, "steps=2")
    assert code == 0 and err.count("reusing the finished run") == 1


def test_compare_resume_continues_an_interrupted_extension(tmp_path, run_cli, small_cfg):
    """A finished run extended with --resume steps=N and interrupted is not finished: its
    summary.json of the shorter run goes when the run continues, so the next --resume trains
    it on instead of reusing that summary as the result."""
    from mhar.train import Trainer

    class StopAtThree(Trainer):
        def launch_step(self):
            if self.step == 3:
                raise KeyboardInterrupt
            return super().launch_step()

    out_dir = tmp_path / "cmp"
    opts = [*SMALL, "eval_every=1", "checkpoint_every=1"]
    code, _, err = run_cli("compare", "--methods", "baseline", "--out", out_dir, "--quiet", *opts, "steps=2")
    assert code == 0, err
    with pytest.raises(KeyboardInterrupt):  # `mhar compare ... --resume steps=4`, stopped after step 3
        StopAtThree(small_cfg("baseline", "eval_every=1", "checkpoint_every=1", "steps=4"), out_dir / "baseline",
                    resume=True, progress=False).fit()
    assert not (out_dir / "baseline" / "summary.json").exists()
    code, _, err = run_cli("compare", "--methods", "baseline", "--out", out_dir, "--resume", "--quiet", *opts,
                           "steps=4")
    assert code == 0 and "reusing the finished run" not in err
    assert json.loads((out_dir / "compare.json").read_text())["results"][0]["steps"] == 4


def test_sweep_over_heads(tmp_path, run_cli):
    code, out, err = run_cli("sweep", "--heads", "1,4", "--out", tmp_path / "sw", "--quiet", *SMALL, "steps=2",
                             "eval_every=1")
    assert code == 0, err
    rows = [x.split("|")[1].strip() for x in out.splitlines() if x.startswith("| ")]
    assert rows[1:] == ["baseline", "mhar-h1", "mhar-h4"]


def test_same_initial_weights_across_methods(tmp_path, small_cfg):
    from mhar.train import Trainer
    a = Trainer(small_cfg("baseline"), tmp_path / "a", progress=False).model.state_dict()
    b = Trainer(small_cfg("mhar-h2"), tmp_path / "b", progress=False).model.state_dict()
    shared = [k for k in a if k in b]
    assert len(shared) > 5 and all((a[k] == b[k]).all() for k in shared)


def test_table_without_baseline():
    res = [{"label": "mhar-h1", "tail_mean_val_loss": 3.0, "final_val_loss": 3.0, "tail_k": 1, "params": {}},
           {"label": "mhar-h8", "tail_mean_val_loss": 2.9, "final_val_loss": 2.9, "tail_k": 1, "params": {}}]
    t = comparison_table(res)
    assert "delta vs mhar-h1" in t and "-0.1000" in t
    res[1]["stream"] = {"method": "routed", "heads": 8, "block_size": 1}  # blocks of 1: full routing, named
    assert "| mhar-h8 | 8, blocks of 1 |" in _squeeze(comparison_table(res))


def _squeeze(text: str) -> str:
    """The table with its padding taken out ('| a   |  1 |' -> '| a | 1 |')."""
    import re
    return re.sub(r" {2,}", " ", text)


def test_table_columns_line_up_and_the_best_tail_mean_is_bold():
    """Printed in a terminal, the Markdown table's columns line up (it was '| baseline | - | 1,836,416
    | ...' with each row as long as its own cells), and the lowest tail-mean is marked."""
    res = [{"label": "baseline", "tail_mean_val_loss": 5.6942, "final_val_loss": 5.6468, "tail_k": 4,
            "params": {"total": 1836416}, "tokens_per_s": 3215.0, "train_time_s": 95.5},
           {"label": "attnres", "tail_mean_val_loss": 5.3361, "final_val_loss": 5.2877, "tail_k": 4,
            "params": {"total": 1838720, "routing": 2304, "routing_pct": 0.13}, "tokens_per_s": 2612.0,
            "train_time_s": 117.6, "stream": {"method": "routed", "heads": 1}}]
    lines = comparison_table(res).splitlines()
    assert len({len(x) for x in lines}) == 1  # every row as wide as the header
    assert [i for i, c in enumerate(lines[0]) if c == "|"] == [i for i, c in enumerate(lines[2]) if c == "|"]
    assert "**5.3361**" in lines[3] and "**" not in lines[2]
    assert lines[1].endswith("-:|")  # numbers right-aligned in the Markdown too


@pytest.mark.parametrize("args, message", [
    (["train", "stream.head=4"], "unknown config key 'stream.head'; did you mean stream.heads"),
    (["train", "warmpu=3"], "did you mean warmup"),
    (["train", "--method", "mhra"], "unknown method 'mhra'"),
    (["train", "--preset", "tinyy"], "unknown preset 'tinyy'"),
    (["train", "steps=0"], "steps=0 must be >= 1"),
    (["train", "--resume"], "--resume needs --out"),
    (["compare", "--methods", "baseline,mhar-h3"], "heads=3"),
    (["compare", "--methods", "baseline,baseline"], "distinct"),
    (["sweep", "--heads", "1,x"], "comma-separated integers"),
    (["train", "data.source=/nonexistent/dataset"], "data.source"),
])
def test_cli_errors(tmp_path, run_cli, args, message):
    code, out, err = run_cli(*args, "--out", tmp_path / "x") if "--resume" not in args else run_cli(*args)
    assert code == 2
    assert message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("command", ["train", "compare", "sweep"])
def test_help_lists_the_override_keys_and_examples(command, capsys):
    """KEY=VALUE overrides are the main way to set a run up: --help lists every key (with the
    tiny preset's value) and shows examples, instead of only pointing at docs/training.md."""
    from mhar.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and f"mhar {command} " in text.split("examples:")[1]
    for key in ("steps=300", "lr=0.002", "eval_every=25", "data.source=builtin", "data.max_mb=16.0",
                "d_model=128", "stream.heads=1", "stream.block_size=0"):
        assert key in text, key
    assert "preset=" not in text and "method=standard" not in text.replace("stream.method=standard", "")


def test_out_that_is_a_file_is_one_line(tmp_path, run_cli):
    # --out naming an existing file (or a folder one cannot write): the system's reason in one
    # line, not a FileExistsError / PermissionError traceback
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    for command in ("train", "compare"):
        code, _, err = run_cli(command, "--out", taken, "--quiet", *SMALL, "steps=1")
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"mhar {command}: error: ") and f"{taken} is a file" in err
    assert taken.read_text() == "mine"


def test_cli_resume_errors(tmp_path, run_cli):
    code, _, err = run_cli("train", "--out", tmp_path / "missing", "--resume")
    assert code == 2 and "does not exist" in err
    run = tmp_path / "r"
    assert run_cli("train", "--method", "mhar-h2", "--out", run, "--quiet", *SMALL, "steps=1")[0] == 0
    code, _, err = run_cli("train", "--out", run, "--resume", "d_model=64")
    assert code == 2 and "different model config" in err and "model.d_model: 32 -> 64" in err
    code, _, err = run_cli("train", "--method", "mhar-h2", "--out", run, *SMALL, "steps=1")
    assert code == 2 and "already holds checkpoints" in err


def test_train_resume_with_method_refuses_dropped_overrides(tmp_path, run_cli):
    """`mhar train --method M --out RUN --resume` builds the config from the preset: an override of
    the run that the command leaves out would silently go back to the preset's value (steps, lr,
    warmup, ...), so it is refused, as `mhar compare --resume` does; keys it sets may change."""
    run = tmp_path / "r"
    first = ["train", "--method", "mhar-h2", "--out", run, "--quiet", *SMALL, "checkpoint_every=1"]
    assert run_cli(*first, "steps=2", "min_lr_ratio=0.5")[0] == 0
    before = (run / "config.json").read_text()
    code, _, err = run_cli(*first, "steps=3", "--resume")
    assert code == 2 and "does not set (min_lr_ratio: 0.5 -> 0.1)" in err, err
    assert (run / "config.json").read_text() == before
    code, _, err = run_cli(*first, "steps=3", "min_lr_ratio=0.5", "--resume")
    assert code == 0, err
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_train_from_a_saved_config(tmp_path, run_cli):
    assert run_cli("train", "--method", "mhar-h2", "--out", tmp_path / "a", "--quiet", *SMALL, "steps=1")[0] == 0
    code, out, err = run_cli("train", "--config", tmp_path / "a" / "config.json", "--out", tmp_path / "b",
                             "--quiet", "steps=2")
    assert code == 0, err
    a = json.loads((tmp_path / "a" / "config.json").read_text())
    b = json.loads((tmp_path / "b" / "config.json").read_text())
    assert a["model"] == b["model"] and b["steps"] == 2
    code, _, err = run_cli("train", "--config", tmp_path / "nope.json", "--out", tmp_path / "c")
    assert code == 2 and "nope.json" in err
    (tmp_path / "bad.json").write_text("{steps: 2}")
    code, _, err = run_cli("train", "--config", tmp_path / "bad.json", "--out", tmp_path / "c")
    assert code == 2 and err.count("\n") == 1 and "bad.json is not a training config: invalid JSON" in err, err


def _all_actions():
    import argparse

    from mhar.cli import build_parser

    def walk(parser, name):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, p in a.choices.items():
                    yield from walk(p, f"{name} {sub}")
            elif not isinstance(a, argparse._HelpAction):
                yield name, a
    return list(walk(build_parser(), "mhar"))


def test_every_option_says_what_it_does_and_its_default():
    """`mhar CMD --help`: every argument has a help line, and an option with a default states
    it (midtrain's --steps, report's --slices, eval's --device ... had neither)."""
    import argparse

    from mhar.cli import build_parser

    missing = []
    for name, a in _all_actions():
        if not a.help:
            missing.append(f"{name} {a.option_strings[-1] if a.option_strings else a.dest}: no help")
        elif (a.option_strings and not isinstance(a, argparse._StoreTrueAction)
              and a.default not in (None, "", [], False) and "default" not in a.help.lower()):
            missing.append(f"{name} {a.option_strings[-1]}: default {a.default!r} not stated")
    assert not missing, "\n".join(missing)
    # and the help renders (a '%' in a default would break argparse's formatting)
    for name, _ in {(n, 0) for n, _ in _all_actions()}:
        parser = build_parser()
        for word in name.split()[1:]:
            parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
        assert parser.format_help()


def test_output_and_quiet_options_are_spelled_alike_in_every_command():
    """`-o/--out` and `-q/--quiet/--no-progress` mean the same in every command (data build had
    -o and -q, eval only --no-progress, the others only --out and --quiet)."""
    outs = [(name, a) for name, a in _all_actions() if "--out" in a.option_strings]
    quiet = [(name, a) for name, a in _all_actions()
             if {"--quiet", "--no-progress"} & set(a.option_strings)]
    assert len(outs) >= 10 and len(quiet) >= 6
    assert [name for name, a in outs if "-o" not in a.option_strings] == []
    assert [name for name, a in quiet if not {"-q", "--quiet", "--no-progress"} <= set(a.option_strings)] == []


def test_train_logs_mfu_against_the_devices_peak(tmp_path, run_cli, monkeypatch):
    """Each logged step has its MFU (the model's training FLOPs a token, as bench step counts
    them, x tokens/s over the peak); the summary's is the median step's, without the first
    step's compiling. The CPU has no peak of its own, so here one is given; without it the
    run logs none."""
    import statistics

    from mhar.model import Decoder, ModelConfig

    monkeypatch.delenv("MHAR_PEAK_TFLOPS", raising=False)
    run = tmp_path / "run"
    code, out, err = run_cli("train", "--out", run, "--quiet", *SMALL, "steps=4", "eval_every=2",
                             "peak_tflops=0.001")
    assert code == 0, err
    model_cfg = ModelConfig.from_dict(json.loads((run / "config.json").read_text())["model"])
    flops = Decoder(model_cfg).flops_per_token(16)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        assert r["mfu"] == pytest.approx(flops * r["tokens_per_s"] / 1e9)
    s = json.loads((run / "summary.json").read_text())
    assert s["steady_tokens_per_s"] == pytest.approx(statistics.median(r["tokens_per_s"] for r in rows[1:]))
    assert s["mfu"] == pytest.approx(flops * s["steady_tokens_per_s"] / 1e9)
    assert (s["peak_tflops"], s["peak_from"]) == (0.001, "given")
    assert f"MFU {100 * s['mfu']:.1f}%" in out

    code, out, err = run_cli("train", "--out", tmp_path / "plain", "--quiet", *SMALL, "steps=2", "eval_every=2")
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "plain" / "metrics.jsonl").read_text().splitlines()]
    s = json.loads((tmp_path / "plain" / "summary.json").read_text())
    if s["device"] == "cpu":  # no peak of its own
        assert all("mfu" not in r for r in rows) and s["mfu"] is None and "MFU" not in out
    else:  # a GPU: its own peak where mhar.gpu_peak knows it
        from mhar.gpu_peak import peak_tflops

        assert s["peak_tflops"] == peak_tflops(torch.cuda.get_device_name())
        assert all(("mfu" in r) == (s["peak_tflops"] is not None) for r in rows)
    assert run_cli("train", "--out", tmp_path / "bad", *SMALL, "peak_tflops=-1")[0] == 2


def test_table_has_mfu_where_a_run_has_one():
    runs = [{"label": "baseline", "tail_mean_val_loss": 5.0, "tokens_per_s": 1000.0, "mfu": 0.412},
            {"label": "mhar", "tail_mean_val_loss": 4.9, "tokens_per_s": 900.0, "mfu": None}]
    lines = comparison_table(runs).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[-3:] == ["tokens/s", "MFU", "train time"]
    assert "41.2%" in lines[2] and " - |" in lines[3]
    assert "MFU" not in comparison_table([{**r, "mfu": None} for r in runs])
