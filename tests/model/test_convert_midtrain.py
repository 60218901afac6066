"""`mhar midtrain`: a converted model and its schedule-matched plain control, trained
on the same data order with re-warm-up, EMA and z-loss, then tabulated."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from mhar.model.convert import check_identity, from_hf_model  # noqa: E402
from mhar.train.midtrain import MidtrainOptions, control_of, midtrain  # noqa: E402


def tiny_llama(vocab=300):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture()
def converted(tmp_path):
    hf = tiny_llama()
    model = from_hf_model(hf, heads=4, blocks=2)
    folder = tmp_path / "converted"
    model.save_pretrained(folder)
    return hf, folder


FAST = dict(steps=6, eval_every=3, seq_len=16, batch_size=2, val_windows=4, warmup=2, lr=3e-3, tail_k=2,
            data="synthetic", ema=0.9, z_loss=1e-4)


def test_midtrain_delta_and_control(converted, tmp_path):
    hf, folder = converted
    out = tmp_path / "mt"
    result = midtrain(folder, out, MidtrainOptions(**FAST), progress=False, log=lambda *a: None)
    delta, control = result["runs"]
    assert (delta["run"], delta["stream"], control["run"], control["stream"]) == \
        ("delta", "delta", "control", "standard")
    # identical function at the start: the same validation loss, bit for bit
    assert delta["start_val_loss"] == control["start_val_loss"]
    # same data order and schedule: same first training loss, same lr at every step
    rows = {name: [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
            for name in ("delta", "control")}
    assert rows["delta"][0]["loss"] == rows["control"][0]["loss"]
    assert [r["lr"] for r in rows["delta"]] == [r["lr"] for r in rows["control"]]
    assert rows["delta"][0]["lr"] == pytest.approx(3e-3 / 2)  # re-warm-up from zero
    assert delta["steps"] == control["steps"] == 6
    assert delta["final_raw_val_loss"] is not None  # EMA on: raw weights reported beside the EMA
    md = (out / "comparison.md").read_text()
    assert "| delta | delta |" in md and "| control | standard |" in md
    # the saved models load, and the delta one has learned gates
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(out / "delta" / "hf")
    assert trained.model.residual.gates.abs().sum() > 0
    assert trained.config.to_model_config().stream.method == "delta"
    # the run folder gives the averaged weights too, the ones its validation used (and the saved model)
    from mhar.train import load_run_model
    run_model = load_run_model(out / "delta")
    for name, p in trained.model.state_dict().items():
        torch.testing.assert_close(run_model.state_dict()[name], p.float(), rtol=0, atol=0, msg=name)


def test_saved_models_keep_the_special_tokens(converted, tmp_path):
    """OUT/<run>/hf keeps the source's bos/eos/pad ids, so generate() stops at EOS as the
    converted model does."""
    from transformers import AutoModelForCausalLM

    hf, folder = converted
    out = tmp_path / "mt"
    midtrain(folder, out, MidtrainOptions(**{**FAST, "steps": 1, "eval_every": 1}), progress=False,
             log=lambda *a: None)
    assert (hf.config.bos_token_id, hf.config.eos_token_id) == (1, 2)
    for run in ("delta", "control"):
        trained = AutoModelForCausalLM.from_pretrained(out / run / "hf")
        assert (trained.config.bos_token_id, trained.config.eos_token_id) == (1, 2)
        assert trained.generation_config.eos_token_id == 2


def test_control_has_the_same_weights_and_function(converted):
    from transformers import AutoModelForCausalLM

    hf, folder = converted
    delta = AutoModelForCausalLM.from_pretrained(folder).model
    plain = control_of(delta)
    assert plain.config.stream.method == "standard"
    ids = torch.randint(0, 300, (2, 9))
    with torch.no_grad():
        assert torch.equal(plain(ids), delta(ids))
        assert torch.equal(plain(ids), hf(ids).logits)
    plain.embed.weight.data.add_(1)  # separate storage
    assert not torch.equal(plain.embed.weight, delta.embed.weight)


def test_ema_and_zloss_options(converted, tmp_path):
    """EMA off vs on gives different evaluations; z-loss enters the training loss only."""
    hf, folder = converted
    no_ema = midtrain(folder, tmp_path / "a", MidtrainOptions(**{**FAST, "ema": 0.0, "control": False,
                                                                 "save_models": False}),
                      progress=False, log=lambda *a: None)["runs"][0]
    assert no_ema["final_raw_val_loss"] is None
    with_ema = midtrain(folder, tmp_path / "b", MidtrainOptions(**{**FAST, "control": False, "save_models": False}),
                        progress=False, log=lambda *a: None)["runs"][0]
    assert with_ema["final_val_loss"] != no_ema["final_val_loss"]
    assert with_ema["final_raw_val_loss"] == pytest.approx(no_ema["final_val_loss"], abs=1e-6)
    with pytest.raises(ValueError, match="ema"):
        midtrain(folder, tmp_path / "c", MidtrainOptions(ema=1.5))


def test_midtrain_source_model_on_builtin_data_with_its_tokenizer(tmp_path, monkeypatch):
    """A source folder is converted on the fly; the built-in corpus is tokenised with
    the model's own tokenizer."""
    from mhar.data import TokenDataset, train_bpe

    monkeypatch.setenv("MHAR_CACHE", str(tmp_path / "cache"))
    tok = train_bpe(["the cat sat on the mat and def f(x): return x + 1\n" * 40] * 20, vocab_size=280)
    src = tmp_path / "src"
    tiny_llama(vocab=300).save_pretrained(src)
    tok.save(str(src / "tokenizer.json"))
    out = tmp_path / "mt"
    opts = MidtrainOptions(**{**FAST, "data": "builtin", "max_mb": 0.1, "steps": 2, "eval_every": 2, "heads": 4,
                              "blocks": 2, "control": False})
    result = midtrain(src, out, opts, progress=False, log=lambda *a: None)
    assert (out / "converted" / "config.json").exists()
    ds = TokenDataset(result["data"])
    assert ds.tokenizer.get_vocab() == tok.get_vocab()
    assert result["runs"][0]["steps"] == 2
    # on resume the conversion is reused, and must be what the call asks for
    from mhar.train.midtrain import load_model_folder
    assert load_model_folder(src, heads=4, blocks=2, workdir=out)[0].config.stream.heads == 4
    with pytest.raises(ValueError, match=r"converted with other settings: heads 4 \(asked: 8\)"):
        load_model_folder(src, heads=8, blocks=2, workdir=out)
    with pytest.raises(ValueError, match=r"block_size 2 \(asked: 4\)"):
        load_model_folder(src, heads=4, blocks=1, workdir=out)


def test_midtrain_without_tokenizer_is_refused(converted, tmp_path):
    hf, folder = converted
    with pytest.raises(ValueError, match="tokenizer"):
        midtrain(folder, tmp_path / "x", MidtrainOptions(data="builtin"), log=lambda *a: None)


@pytest.mark.parametrize("extra", [{"tasks": "arc_esy"}, {"tasks": "gpqa"},
                                   {"tasks": "arc_easy", "save_models": False}])
def test_midtrain_refuses_bad_tasks_before_training(converted, tmp_path, monkeypatch, extra):
    """A typo in --tasks, a gated task without its file, or --tasks with --no-save stops
    at once, not after both runs have trained."""
    monkeypatch.delenv("MHAR_GPQA_FILE", raising=False)
    hf, folder = converted
    out = tmp_path / "mt"
    with pytest.raises((ValueError, FileNotFoundError)):
        midtrain(folder, out, MidtrainOptions(**{**FAST, **extra}), progress=False, log=lambda *a: None)
    assert not (out / "delta" / "metrics.jsonl").exists()


def test_cli_midtrain_takes_a_gated_tasks_file_and_refuses_a_missing_model(converted, tmp_path, monkeypatch,
                                                                           capsys):
    """--data-file gpqa=PATH reaches the task check (the error named it, and midtrain had no such
    option); a model path that does not exist is refused before OUT is made."""
    from mhar.cli import main

    monkeypatch.delenv("MHAR_GPQA_FILE", raising=False)
    hf, folder = converted
    args = ["midtrain", str(folder), "--out", str(tmp_path / "mt"), "--data", "synthetic", "--tasks", "gpqa"]
    assert main(args) == 2 and "--data-file gpqa=PATH" in capsys.readouterr().err
    assert main(args + ["--data-file", f"gpqa={tmp_path / 'absent.csv'}"]) == 2
    assert "absent.csv does not exist" in capsys.readouterr().err
    opts = MidtrainOptions(tasks="gpqa", data_files={"gpqa": str(tmp_path / "absent.csv")})
    (tmp_path / "absent.csv").write_text("Question,Correct Answer\n")
    opts.validate()  # the file exists: accepted
    assert main(["midtrain", str(tmp_path / "nosuch"), "--out", str(tmp_path / "x")]) == 2
    assert "no model at" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_cli_midtrain(converted, tmp_path, capsys):
    from mhar.cli import main

    hf, folder = converted
    rc = main(["midtrain", str(folder), "--out", str(tmp_path / "mt"), "--data", "synthetic", "--steps", "2",
               "--eval-every", "1", "--seq-len", "8", "--batch-size", "2", "--val-windows", "2", "--warmup", "1",
               "--no-save", "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| delta | delta |" in out and "| control | standard |" in out
    assert check_identity(hf, from_hf_model(hf, heads=4, blocks=2)) == 0.0


def test_cli_midtrain_overrides_after_options(converted, tmp_path):
    """KEY=VALUE overrides after the options (as `mhar train` takes them) reach both runs."""
    from mhar.cli import main

    hf, folder = converted
    out = tmp_path / "mt"
    rc = main(["midtrain", str(folder), "--out", str(out), "--data", "synthetic", "--steps", "1",
               "--eval-every", "1", "--seq-len", "8", "--batch-size", "2", "--val-windows", "2", "--warmup", "1",
               "--no-save", "--quiet", "grad_clip=0.5"])
    assert rc == 0
    for run in ("delta", "control"):
        assert json.loads((out / run / "config.json").read_text())["grad_clip"] == 0.5


def test_midtrain_refuses_overrides_of_the_pretrained_model(converted, tmp_path):
    """A model override (stream.heads=2) cannot change the pretrained model, which is
    trained as converted: it is refused before training instead of being written into
    the run's config.json, where the probe and `mhar eval` would build an H = 2 model."""
    hf, folder = converted
    for override in ("stream.heads=2", "model.rope_theta=500.0"):
        with pytest.raises(ValueError, match=override.split("=")[0].removeprefix("model.")):
            midtrain(folder, tmp_path / "mt", MidtrainOptions(**FAST), overrides=[override], progress=False,
                     log=lambda *a: None)
        assert not (tmp_path / "mt" / "delta" / "config.json").exists()


def test_midtrain_resume_keeps_the_ema(converted, tmp_path, monkeypatch):
    """An interrupted mid-training run resumed from its checkpoint ends where the
    uninterrupted run ends, bit for bit, EMA included."""
    import mhar.train.trainer as trainer_mod

    hf, folder = converted
    opts = dict(FAST, steps=6, checkpoint_every=3, control=False, save_models=False)
    full = midtrain(folder, tmp_path / "full", MidtrainOptions(**opts), progress=False, log=lambda *a: None)

    real_step = trainer_mod.Trainer.launch_step

    def crash_at_5(self):
        if self.step == 4:
            raise KeyboardInterrupt("simulated crash")
        return real_step(self)

    monkeypatch.setattr(trainer_mod.Trainer, "launch_step", crash_at_5)
    with pytest.raises(KeyboardInterrupt):
        midtrain(folder, tmp_path / "cut", MidtrainOptions(**opts), progress=False, log=lambda *a: None)
    monkeypatch.setattr(trainer_mod.Trainer, "launch_step", real_step)
    resumed = midtrain(folder, tmp_path / "cut", MidtrainOptions(**opts), resume=True, progress=False,
                       log=lambda *a: None)
    a, b = full["runs"][0], resumed["runs"][0]
    assert b["steps"] == 6
    assert a["final_val_loss"] == b["final_val_loss"]  # EMA weights
    assert a["final_raw_val_loss"] == b["final_raw_val_loss"]
    assert a["start_val_loss"] == b["start_val_loss"]


def test_midtrain_downstream_tasks(tmp_path):
    """--tasks: both saved models are evaluated with mhar.eval and compared pairwise."""
    pytest.importorskip("mhar.eval.runner")
    from mhar.data import train_bpe
    from mhar.eval.tasks import load_task

    try:
        load_task("arc_easy")
    except Exception as err:  # the offline task data is not installed here
        pytest.skip(f"arc_easy is not available offline: {err}")
    tok = train_bpe(["the cat sat on the mat. Question: what is 2+2? Answer: 4\n" * 40] * 20, vocab_size=280)
    src = tmp_path / "src"
    tiny_llama(vocab=300).save_pretrained(src)
    tok.save(str(src / "tokenizer.json"))
    opts = MidtrainOptions(**{**FAST, "steps": 2, "eval_every": 2, "heads": 4, "blocks": 2,
                              "tasks": "arc_easy", "task_limit": 8})
    logs = []
    result = midtrain(src, tmp_path / "mt", opts, progress=False, log=logs.append)
    for run in result["runs"]:
        assert run["tasks"]["arc_easy"]["n"] == 8
    # the evaluation after training says which run it is evaluating (it can take hours)
    assert [line.split("]")[0] for line in logs if "] evaluating" in line] == ["[delta", "[control"]
    assert "Paired, delta (B) vs control (A)" in result["table"]
    assert "| arc_easy |" in (tmp_path / "mt" / "comparison.md").read_text()


def test_midtrain_refuses_a_control_that_is_another_function(converted, tmp_path):
    """The control starts as the same function only for the model as converted (delta at its
    identity). A delta model whose gates moved, or a model routed from scratch, is refused
    before training unless --no-control; it was trained against a different starting model."""
    from mhar.model.config import ModelConfig, method_stream
    from mhar.model.hf import MharConfig, MharForCausalLM

    hf, folder = converted
    moved = MharForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        moved.model.residual.gates.add_(0.5)
    moved.save_pretrained(tmp_path / "moved")
    cfg = ModelConfig(vocab_size=300, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=64,
                      stream=method_stream("mhar", 4, 32))
    MharForCausalLM(MharConfig.from_model_config(cfg)).save_pretrained(tmp_path / "routed")
    for name in ("moved", "routed"):
        out = tmp_path / f"mt-{name}"
        with pytest.raises(ValueError, match="not the same function.*--no-control"):
            midtrain(tmp_path / name, out, MidtrainOptions(**FAST), progress=False, log=lambda *a: None)
        assert not (out / "delta" / "metrics.jsonl").exists()
        result = midtrain(tmp_path / name, out, MidtrainOptions(**{**FAST, "steps": 1, "control": False,
                                                                   "save_models": False}),
                          progress=False, log=lambda *a: None)
        assert [r["run"] for r in result["runs"]] == ["delta"]


def test_ema_with_a_step_queued_ahead(converted, tmp_path):
    """adamw=triton: fit queues each step before it reads the last one's loss, and the EMA
    moves by a weight the device zeroes after a skipped update. The EMA and the raw weights
    evaluate as with adamw=torch, to rounding."""
    hf, folder = converted
    opts = MidtrainOptions(**{**FAST, "control": False, "save_models": False, "eval_every": 100})
    runs = {impl: midtrain(folder, tmp_path / impl, opts, overrides=[f"adamw={impl}"], progress=False,
                           log=lambda *a: None)["runs"][0] for impl in ("torch", "triton")}
    for key in ("final_val_loss", "final_raw_val_loss"):
        assert runs["triton"][key] == pytest.approx(runs["torch"][key], abs=1e-5), key
    assert runs["triton"]["final_val_loss"] != pytest.approx(runs["triton"]["start_val_loss"], abs=1e-3)
