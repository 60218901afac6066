import math

import pytest

from mhar.train import TrainConfig, apply_train_overrides, train_preset
from mhar.train.config import config_diff
from mhar.train.schedule import lr_at


def test_preset_and_overrides():
    cfg = apply_train_overrides(train_preset("tiny", "mhar"), ["lr=1e-3", "stream.heads=4", "model.d_model=256",
                                                                "data.source=synthetic", "decay_all=false"])
    assert cfg.lr == 1e-3 and cfg.model.stream.heads == 4 and cfg.model.d_model == 256
    assert cfg.data.source == "synthetic" and cfg.decay_all is False
    assert cfg.model.stream.method == "routed"


def test_method_override_sets_the_stream():
    cfg = apply_train_overrides(train_preset("tiny"), ["method=hyper"])
    assert cfg.method == "hyper" and cfg.model.stream.method == "hyper"


def test_unknown_key_lists_close_matches():
    with pytest.raises(ValueError, match="did you mean.*stream.heads"):
        apply_train_overrides(train_preset("tiny"), ["stream.head=4"])
    with pytest.raises(ValueError, match="did you mean.*warmup"):
        apply_train_overrides(train_preset("tiny"), ["warmpu=10"])


@pytest.mark.parametrize("item, match", [("steps=0", "steps"), ("lr=-1", "lr"), ("device=tpu", "device"),
                                         ("seq_len=100000", "max_seq_len"), ("stream.heads=3", "heads"),
                                         ("lr", "key=value"), ("steps=abc", "steps"),
                                         # refused here, not by torch's AdamW once the data and folder are made
                                         ("eps=-1", "eps"), ("lr=inf", "lr"), ("weight_decay=nan", "weight_decay"),
                                         ("grad_clip=nan", "grad_clip")])
def test_bad_values_name_the_field(item, match):
    with pytest.raises(ValueError, match=match):
        apply_train_overrides(train_preset("tiny", "mhar"), [item])


def test_unknown_preset():
    with pytest.raises(ValueError, match="did you mean tiny"):
        train_preset("tine")


def test_roundtrip(tmp_path):
    cfg = train_preset("tiny", "mhar-h4")
    cfg.save(tmp_path / "c.json")
    back = TrainConfig.load(tmp_path / "c.json")
    assert back == cfg and not config_diff(back.to_dict(), cfg.to_dict())
    other = apply_train_overrides(cfg, ["d_model=64"])
    assert config_diff(cfg.to_dict(), other.to_dict()) == ["model.d_model: 128 -> 64"]


def test_schedule_warmup_then_cosine_to_min():
    peak, warm, total = 1.0, 10, 110
    lrs = [lr_at(s, peak, warm, total, 0.1) for s in range(total)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    mid = 10 + (total - 1 - 10) / 2
    assert lr_at(int(mid), peak, warm, total) == pytest.approx(0.55, abs=0.01)
    assert all(math.isfinite(x) for x in lrs)


def test_compile_modes_and_legacy_bools():
    cfg = train_preset("tiny", "baseline")
    assert cfg.compile == "auto" and cfg.cuda_graphs == "auto"
    assert apply_train_overrides(cfg, ["compile=regions"]).compile == "regions"
    # older run folders saved compile as a bool: true meant the whole loss module
    assert apply_train_overrides(cfg, ["compile=true"]).compile == "full"
    assert TrainConfig.from_dict({**cfg.to_dict(), "compile": False}).compile == "off"
    with pytest.raises(ValueError, match="compile='fast' is not one of"):
        apply_train_overrides(cfg, ["compile=fast"])


def test_method_follows_overridden_shape():
    """A method's stream is resolved against the shape the overrides give, not the preset's:
    block routing keeps about 8 blocks at n_layers=16, and mhar-h3 is valid at d_model=96."""
    from mhar.train.compare import method_config

    cfg = apply_train_overrides(train_preset("tiny"), ["method=mhar-block", "n_layers=16"])
    assert cfg.model.stream.block_size == 4  # 32 sublayers in 8 blocks
    assert method_config("tiny", "mhar-block", ["n_layers=16"]).model.stream.block_size == 4
    cfg = method_config("tiny", "mhar-h3", ["d_model=96"])
    assert cfg.model.d_model == 96 and cfg.model.stream.heads == 3
    # stream overrides still apply on top of the method's stream
    cfg = method_config("tiny", "mhar-block", ["n_layers=16", "stream.block_size=2", "stream.heads=4"])
    assert (cfg.model.stream.block_size, cfg.model.stream.heads) == (2, 4)


def test_train_cli_method_follows_overridden_shape(tmp_path, run_cli):
    code, _, err = run_cli("train", "--method", "mhar-h3", "--out", tmp_path / "r", "d_model=96", "n_layers=1",
                           "steps=1", "data.source=synthetic", "batch_size=1", "seq_len=8", "data.val_windows=1",
                           "eval_every=1", "checkpoint_every=1", "--quiet")
    assert code == 0, err
    saved = TrainConfig.load(tmp_path / "r" / "config.json")
    assert saved.model.d_model == 96 and saved.model.stream.heads == 3


@pytest.mark.parametrize("method", ["hyper-h2", "baseline-h4"])
def test_heads_suffix_needs_a_routed_method(method, tmp_path, run_cli):
    """NAME-hH on a method that does not route (baseline, hyper) would train the same model
    under another name: refused, also by `mhar sweep --method hyper`."""
    with pytest.raises(ValueError, match="routed methods"):
        train_preset("tiny", method)
    code, _, err = run_cli("sweep", "--method", method.rsplit("-h", 1)[0], "--heads", "1,2", "--out", tmp_path / "s")
    assert code != 0 and "routed methods" in err and not (tmp_path / "s").exists()


@pytest.mark.parametrize("key", ["stream", "model.stream", "data", "model"])
def test_a_section_is_named_as_such(key):
    """`stream=4` names the section and its fields rather than calling the key unknown."""
    with pytest.raises(ValueError, match=f"config key '{key}' is a section"):
        apply_train_overrides(train_preset("tiny", "mhar"), [f"{key}=4"])


def test_warmup_not_shorter_than_the_run_is_noted(tmp_path, run_cli):
    """warmup >= steps is allowed (short smoke runs) but the learning rate then never decays
    and may never reach lr: the run says so once, with the peak it reaches. (It was silent.)"""
    args = ["train", "--method", "baseline", "d_model=32", "n_layers=1", "n_heads=2", "n_kv_heads=1", "d_ff=32",
            "data.source=synthetic", "data.vocab_size=64", "batch_size=1", "seq_len=8", "data.val_windows=1",
            "eval_every=2", "lr=1e-3", "--quiet"]
    code, _, err = run_cli(*args, "--out", tmp_path / "a", "steps=2", "warmup=4")
    assert code == 0, err
    assert "note: warmup=4 >= steps=2" in err and "to 0.0005 of lr=0.001" in err
    code, _, err = run_cli(*args, "--out", tmp_path / "b", "steps=4", "warmup=2")
    assert code == 0 and "warmup=" not in err, err
