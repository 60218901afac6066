"""`mhar eval` on a GGUF file: mhar's reader for Llama / Qwen2 / Qwen3 files, transformers'
GGUF loader for other architectures."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")


def write_gpt2_gguf(path):
    """A GGUF file of an architecture mhar's reader does not map (no tokenizer in it)."""
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_other_architectures_go_to_transformers_loader(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from mhar.eval.adapter import load_for_eval

    path = write_gpt2_gguf(tmp_path / "m.gguf")
    # transformers cannot load this stub either: both refusals are named
    with pytest.raises(ValueError, match=r"'gpt2' is not supported.*transformers' GGUF loader could not load it"):
        load_for_eval(path)
    # where transformers' loader can, the file is evaluated through it
    calls = []
    model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))

    class Tok:
        eos_token_id, bos_token_id = 1, None

    def model_loader(folder, gguf_file, dtype):
        calls.append(("model", gguf_file))
        return model

    def tok_loader(folder, gguf_file):
        calls.append(("tokenizer", gguf_file))
        return Tok()

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", model_loader)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", tok_loader)
    assert load_for_eval(path) is not None
    assert calls == [("tokenizer", "m.gguf"), ("model", "m.gguf")]
