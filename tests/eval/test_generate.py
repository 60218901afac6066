"""`mhar generate`: the sampling distribution (temperature, top-k, top-p), greedy at
temperature 0, seeded draws, and the command on a saved model folder."""

import json
import math

import pytest
import torch

from mhar.eval.generate import Sampling, generate_texts

from .conftest import byte_decode


def test_probabilities_temperature_top_k_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    p = torch.tensor([2.0, 1.0, 0.0, -1.0]).softmax(-1)
    torch.testing.assert_close(Sampling(temperature=1.0).probabilities(logits)[0], p)
    torch.testing.assert_close(Sampling(temperature=0.5).probabilities(logits)[0],
                               torch.tensor([4.0, 2.0, 0.0, -2.0]).softmax(-1))
    # top-k 2: the two most likely, renormalised
    torch.testing.assert_close(Sampling(temperature=1.0, top_k=2).probabilities(logits)[0],
                               torch.cat([p[:2] / p[:2].sum(), torch.zeros(2)]))
    # top-p: the smallest set of the most likely whose mass reaches p (p[0] = 0.64, p[0] + p[1] = 0.88)
    for top_p, kept in ((0.5, 1), (0.64, 1), (0.7, 2), (0.88, 2), (0.9, 3), (1.0, 4)):
        got = Sampling(temperature=1.0, top_p=top_p).probabilities(logits)[0]
        assert int((got > 0).sum()) == kept, (top_p, got)
        torch.testing.assert_close(got[:kept], p[:kept] / p[:kept].sum())
    # the kept set is found per row, for logits in any order
    rows = torch.tensor([[-1.0, 0.0, 1.0, 2.0], [0.0, 2.0, -1.0, 1.0]])
    got = Sampling(temperature=1.0, top_p=0.7).probabilities(rows)
    assert (got > 0).tolist() == [[False, False, True, True], [False, True, False, True]]


@pytest.mark.parametrize("bad", [dict(temperature=-1.0), dict(temperature=math.inf), dict(top_k=-1),
                                 dict(top_p=0.0), dict(top_p=1.5)])
def test_bad_sampling_settings_name_the_field(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        Sampling(**bad).validate()


def test_greedy_at_zero_and_seeded_draws(tiny_model):
    prompts = ["Hello there", "x", ""]
    greedy = generate_texts(tiny_model, prompts, 6)
    assert greedy == [byte_decode(tiny_model.generate(tiny_model.generation_ids(p), 6)) for p in prompts]
    hot = Sampling(temperature=5.0, seed=3)
    a = generate_texts(tiny_model, prompts, 6, hot)
    assert a == generate_texts(tiny_model, prompts, 6, Sampling(temperature=5.0, seed=3))  # same seed, same text
    assert a != generate_texts(tiny_model, prompts, 6, Sampling(temperature=5.0, seed=4))
    assert a != greedy
    # top-k 1 is greedy whatever the temperature
    assert generate_texts(tiny_model, prompts, 6, Sampling(temperature=5.0, top_k=1)) == greedy


def test_a_long_prompt_keeps_its_start_token_and_its_end(tiny_model):
    """A prompt longer than the room left by -n keeps the start token and the text's end (the
    cut took the start token off)."""
    text = "".join(chr(97 + k % 26) for k in range(600))
    ids = tiny_model.generation_ids(text, 100)
    assert len(ids) == 100 and ids[0] == tiny_model.prefix_token
    assert ids[1:] == tiny_model.encode(text)[-99:]
    assert tiny_model.generation_ids("ab", 100) == [tiny_model.prefix_token, 97, 98]
    out = generate_texts(tiny_model, [text], 512 - 100)
    assert out == [byte_decode(tiny_model.generate(ids, 412))]


def test_generate_command_on_a_saved_model(tmp_path, capsys):
    pytest.importorskip("transformers")
    from transformers import PreTrainedTokenizerFast

    from mhar.cli import main
    from mhar.data.tokenizer import train_bpe
    from mhar.eval.adapter import load_for_eval
    from mhar.model.config import ModelConfig, method_stream
    from mhar.model.hf import MharConfig, MharForCausalLM

    texts = ["the cat sat on the mat", "the dog sat on the log", "a bird in the hand"] * 20
    tok = PreTrainedTokenizerFast(tokenizer_object=train_bpe(texts, vocab_size=300), eos_token="<|endoftext|>")
    cfg = ModelConfig(vocab_size=len(tok), d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=64,
                      init_std=0.3, stream=method_stream("mhar", 4, 32))
    torch.manual_seed(0)
    MharForCausalLM(MharConfig.from_model_config(cfg)).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")

    assert main(["generate", str(tmp_path / "m"), "the cat", "", "-n", "5", "--json", "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    model = load_for_eval(tmp_path / "m")
    assert [r["prompt"] for r in rows] == ["the cat", ""]
    for r in rows:
        assert r["completion"] == model.decode(model.generate(model.generation_ids(r["prompt"]), 5))
    args = ["generate", str(tmp_path / "m"), "the dog", "-n", "8", "--temperature", "1.5", "--top-p", "0.9"]
    assert main(args + ["--seed", "1"]) == 0
    first = capsys.readouterr().out
    assert main(args + ["--seed", "1"]) == 0 and capsys.readouterr().out == first
    assert first.startswith("the dog")
    # clear refusals, before a model loads
    assert main(["generate", str(tmp_path / "m"), "x", "--top-p", "0"]) == 2
    assert "top_p=0.0" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "m")]) == 2
    assert "no prompt" in capsys.readouterr().err
    # run-folder options on a model folder, and a model saved without its tokenizer: one line each
    assert main(["eval", str(tmp_path / "m"), "--tasks", "piqa:2", "--checkpoint", "5"]) == 2
    assert "--checkpoint is for run folders" in capsys.readouterr().err
    MharForCausalLM(MharConfig.from_model_config(cfg)).save_pretrained(tmp_path / "bare")
    capsys.readouterr()  # transformers' own progress bar of the save
    assert main(["generate", str(tmp_path / "bare"), "hi", "-n", "2"]) == 2
    err = capsys.readouterr().err
    assert "bare holds no tokenizer" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("temperature", [1e-6, 1e-40, 1e-320])
def test_tiny_temperature_is_greedy_not_nan(temperature):
    # logits / T overflowed to inf for a tiny T (inf - inf: nan), and multinomial refused the
    # distribution; a tiny temperature is all but greedy
    logits = torch.tensor([[30.0, -20.0, 5.0, 29.0], [-3.0, 4.0, 4.0, 1.0]])
    p = Sampling(temperature=temperature).probabilities(logits)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p[0], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(p[1], torch.tensor([0.0, 0.5, 0.5, 0.0]))  # a tie stays a tie
    pick = Sampling(temperature=temperature, seed=1).picker(torch.device("cpu"))
    assert pick(logits)[0].item() == 0


def test_prompts_from_stdin_with_windows_line_ends(monkeypatch):
    # a file opened in text mode turns "\r\n" into "\n"; stdin did not, and every prompt kept a "\r"
    import io
    from argparse import Namespace

    from mhar.eval.generate import _read_prompts

    monkeypatch.setattr("sys.stdin", io.StringIO("the cat\r\n\r\nhéllo ✓ 日本\r\nold mac\rline\n"))
    assert _read_prompts(Namespace(prompts=["x"], file="-")) == ["x", "the cat", "héllo ✓ 日本", "old mac", "line"]


def test_cuda_asked_without_cuda_is_one_clear_line(monkeypatch, capsys):
    # torch's own "AssertionError: Torch not compiled with CUDA enabled" came as a traceback
    from mhar.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["generate", "smollm2", "x", "--device", "cuda"]) == 2
    assert "--device cuda" in capsys.readouterr().err
    # a name torch does not know (its RuntimeError listed every device type, as a traceback)
    for cmd in (["generate", "smollm2", "x"], ["eval", "smollm2", "--ppl", "never-read.txt"]):
        assert main(cmd + ["--device", "gpu"]) == 2
        assert "--device gpu: not a device; use cpu, cuda or cuda:N" in capsys.readouterr().err
