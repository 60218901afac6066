"""Identity-preserving conversion (SPEC.md section 3): exact fp32 identity against
transformers' Llama / Qwen2 / Qwen3 on random configs of several shapes, the block-delta
bookkeeping, GGUF reading, the `mhar convert` command and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

try:  # transformers >= 4.51
    from transformers import Qwen3Config, Qwen3ForCausalLM
except ImportError:  # pragma: no cover
    Qwen3Config = Qwen3ForCausalLM = None

from mhar import routing  # noqa: E402
from mhar.model.convert import (ConversionError, check_identity, config_from_hf, convert,  # noqa: E402
                                from_hf_model)
from mhar.streams import DeltaStream  # noqa: E402

ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
}
if Qwen3Config is None:
    del ARCHS["qwen3"]

# (hidden, layers, heads, kv heads, head_dim or None, ffn, tied, --heads, --blocks)
SHAPES = [
    (64, 4, 4, 2, None, 96, True, 8, 2),      # GQA x2, blocks divide the layers
    (48, 5, 6, 6, None, 80, False, 4, 2),     # MHA, untied head, 5 layers in blocks of 3 + 2
    (96, 3, 8, 2, 16, 64, True, 1, 3),        # GQA x4, explicit head_dim != hidden/heads, H = 1
    (72, 6, 3, 1, None, 40, False, 9, 4),     # MQA, odd head count, 4 blocks over 6 layers
]


def random_hf(arch: str, shape, seed: int = 0):
    hidden, layers, heads, kv, head_dim, ffn, tied, _, _ = shape
    cfg_cls, model_cls = ARCHS[arch]
    kw = dict(vocab_size=211, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=96,
              tie_word_embeddings=tied, rms_norm_eps=1e-5)
    if head_dim is not None:
        if arch == "qwen2":
            pytest.skip("Qwen2 has no head_dim setting")
        kw["head_dim"] = head_dim
    torch.manual_seed(seed)
    model = model_cls(cfg_cls(**kw)).eval()
    with torch.no_grad():  # norms and biases away from their trivial init
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"shape{i}" for i in range(len(SHAPES))])
def test_identity_exact(arch, shape):
    """max |logit difference| = 0 in fp32: vs transformers, and vs our standard stream."""
    hf = random_hf(arch, shape)
    converted = from_hf_model(hf, heads=shape[7], blocks=shape[8])
    cfg = converted.config.to_model_config()
    assert cfg.stream.method == "delta" and cfg.stream.heads == shape[7]
    assert cfg.stream.block_size == 2 * -(-shape[1] // shape[8])
    assert cfg.tie_embeddings == shape[6] and (converted.model.lm_head is None) == shape[6]
    plain = from_hf_model(hf, method="standard")
    g = torch.Generator().manual_seed(1)
    for T in (1, 7, 40):
        ids = torch.randint(0, 211, (2, T), generator=g)
        assert check_identity(hf, converted, input_ids=ids) == 0.0
        assert check_identity(plain, converted, input_ids=ids) == 0.0


@pytest.mark.parametrize("scaling", [
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 32},
    {"rope_type": "linear", "factor": 4.0},
], ids=["llama3", "linear"])
def test_identity_with_rope_scaling(scaling, tmp_path):
    """Llama 3.x RoPE scaling (and linear) are mirrored exactly, and survive save/load."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rope_theta=500000.0, rope_scaling=dict(scaling))
    hf = LlamaForCausalLM(cfg).eval()
    conv = from_hf_model(hf, heads=4, blocks=2)
    assert conv.config.to_model_config().rope_scaling["rope_type"] == scaling["rope_type"]
    ids = torch.randint(0, 211, (1, 200))
    assert check_identity(hf, conv, input_ids=ids) == 0.0
    conv.save_pretrained(tmp_path)
    assert check_identity(hf, AutoModelForCausalLM.from_pretrained(tmp_path), input_ids=ids) == 0.0
    plain = from_hf_model(hf, method="standard")
    plain.model.config.rope_scaling = None  # without the scaling the function changes
    assert check_identity(hf, plain, input_ids=ids) > 0


def test_identity_past_max_position_embeddings():
    """transformers' models run past max_position_embeddings, and so does the converted
    model, with a warning: the same logits there too (it refused them before)."""
    hf = random_hf("llama", SHAPES[0])
    converted = from_hf_model(hf, heads=SHAPES[0][7], blocks=SHAPES[0][8])
    ids = torch.randint(0, 211, (1, 100), generator=torch.Generator().manual_seed(2))  # 96 positions
    with pytest.warns(UserWarning, match="exceeds max_seq_len=96"):
        assert check_identity(hf, converted, input_ids=ids) == 0.0


def test_converted_weights_are_copies():
    """The converted model does not share storage with its source (training one must
    not change the other, e.g. the midtraining control)."""
    hf = random_hf("llama", SHAPES[0])
    conv = from_hf_model(hf, blocks=2)
    with torch.no_grad():
        conv.model.embed.weight.add_(1.0)
    assert not torch.equal(conv.model.embed.weight, hf.model.embed_tokens.weight)


def test_identity_then_gates_change_the_function():
    """Only the zero gates keep the identity: opening them changes the logits, and
    gradients reach the gates, queries and null source."""
    hf = random_hf("qwen3" if "qwen3" in ARCHS else "llama", SHAPES[0])
    conv = from_hf_model(hf, heads=8, blocks=2)
    ids = torch.randint(0, 211, (2, 9))
    logits = conv(input_ids=ids).logits
    loss = logits.float().logsumexp(-1).mean()
    loss.backward()
    res = conv.model.residual
    assert res.gates.grad.abs().sum() > 0
    with torch.no_grad():
        res.gates.fill_(0.5)
        res.queries.normal_()
    assert check_identity(hf, conv, input_ids=ids) > 0


# -- block-delta bookkeeping ---------------------------------------------------------

def _sources_by_hand(h0, outputs, S):
    """Deltas as SPEC.md defines them: stream at the end of a block minus the stream at
    the start of that block."""
    h, start, deltas = h0, h0, []
    for i, y in enumerate(outputs):
        h = h + y
        if i % S == S - 1 or i == len(outputs) - 1:
            deltas.append(h - start)
            start = h
    return deltas


@pytest.mark.parametrize("S,n", [(2, 6), (3, 8), (4, 4), (1, 3)])
def test_block_deltas_are_end_minus_block_start(S, n):
    """Fails on the public implementation's mistake (subtract the previous delta)."""
    d = 16
    torch.manual_seed(0)
    stream = DeltaStream(d, n, heads=4, block_size=S)
    with torch.no_grad():
        stream.null_source.normal_()
    h0 = torch.randn(3, d)
    outputs = [torch.randn(3, d) for _ in range(n)]
    state = stream.start(h0)
    for i, y in enumerate(outputs):
        state.read(i)
        state.write(i, y)
    want = _sources_by_hand(h0, outputs, S)
    got = state.sources[1:]
    assert len(got) == len(want) == -(-n // S)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    # the wrong bookkeeping gives different sources from the second block on
    if len(want) >= 2:
        wrong_deltas, prev = [], None
        h = h0
        for i, y in enumerate(outputs):
            h = h + y
            if i % S == S - 1 or i == n - 1:
                wrong_deltas.append(h - (h0 if prev is None else prev))
                prev = wrong_deltas[-1]
        assert not torch.allclose(got[1], wrong_deltas[1])


def test_delta_reads_match_a_reference_loop():
    """Every sublayer's input and the final state equal an independent loop over the
    SPEC.md formula x_i = h_i + gate_i * route_i(null, deltas so far)."""
    d, n, S, H = 24, 7, 3, 4
    torch.manual_seed(3)
    stream = DeltaStream(d, n, heads=H, block_size=S)
    with torch.no_grad():
        for p in stream.parameters():
            p.copy_(torch.randn_like(p))
    h0 = torch.randn(2, 5, d)
    outputs = [torch.randn(2, 5, d) for _ in range(n)]
    state = stream.start(h0)
    got = []
    for i, y in enumerate(outputs):
        got.append(state.read(i))
        state.write(i, y)
    got.append(state.final())
    h, start = h0, h0
    sources = [stream.null_source.expand_as(h0)]
    want = []
    for i, y in enumerate(outputs):
        r = routing.route(sources, stream.queries[i], stream.key_norms[i], H)
        want.append(h + stream.gates[i] * r)
        h = h + y
        if i % S == S - 1 or i == n - 1:
            sources = sources + [h - start]
            start = h
    want.append(h + stream.gates[n] * routing.route(sources, stream.queries[n], stream.key_norms[n], H))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


# -- GGUF -----------------------------------------------------------------------------

def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert-script permutation of q/k rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(path, hf, arch="llama"):
    gguf = pytest.importorskip("gguf")
    c = hf.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(c.vocab_size)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    layer = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight"}
    for key, t in hf.state_dict().items():
        if key == "lm_head.weight" and c.tie_word_embeddings:
            continue
        a = t.numpy().astype(np.float32)
        if key.startswith("model.layers."):
            _, _, i, rest = key.split(".", 3)
            if rest == "self_attn.q_proj.weight":
                a = _permute(a, c.num_attention_heads)
            elif rest == "self_attn.k_proj.weight":
                a = _permute(a, c.num_key_value_heads)
            name = f"blk.{i}.{layer[rest]}"
        else:
            name = names[key]
        w.add_tensor(name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_reader_undoes_llama_permutation(tmp_path):
    from mhar.model.gguf import load_gguf

    hf = random_hf("llama", SHAPES[0])
    path = tmp_path / "tiny.gguf"
    write_llama_gguf(path, hf)
    model, tok = load_gguf(path, tokenizer=False)
    assert tok is None and type(model).__name__ == "LlamaForCausalLM"
    for k, v in hf.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    out = tmp_path / "converted"
    conv, report = convert(path, out, heads=4, blocks=2, log=lambda *a: None)
    assert report["max_abs_diff_random"] == 0.0
    assert check_identity(hf, conv) == 0.0


def write_gpt2_gguf(path):
    """A GGUF file of an architecture mhar's reader does not map (no tokenizer in it)."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_unsupported_architecture(tmp_path):
    path = write_gpt2_gguf(tmp_path / "gpt2.gguf")
    with pytest.raises(ValueError, match="llama, qwen2, qwen3"):
        convert(path, None, log=lambda *a: None)


def test_other_architectures_go_to_transformers_loader(tmp_path, monkeypatch):
    """`mhar eval` of a GGUF file that mhar's reader does not map goes to transformers' loader."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mhar.eval.adapter import load_for_eval

    path = write_gpt2_gguf(tmp_path / "m.gguf")
    # transformers cannot load this stub either: both refusals are named
    with pytest.raises(ValueError, match=r"'gpt2' is not supported.*transformers' GGUF loader could not load it"):
        load_for_eval(path)
    # where transformers' loader can, the file is evaluated through it
    calls = []
    model = random_hf("llama", SHAPES[0])

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


# -- errors and the command ----------------------------------------------------------

def test_unsupported_architecture_lists_supported(tmp_path):
    from transformers import GPT2Config

    with pytest.raises(ConversionError, match="supported architectures are llama, qwen2, qwen3"):
        config_from_hf(GPT2Config())
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ConversionError, match="llama, qwen2, qwen3"):
        convert(folder, tmp_path / "out", log=lambda *a: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change,match", [
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(attention_bias=True), "o_proj bias"),
    (dict(mlp_bias=True), "mlp_bias"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope scaling"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}), "rope scaling"),
])
def test_inexact_features_are_refused(change, match):
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, **change)
    with pytest.raises(ConversionError, match=match):
        config_from_hf(cfg)


def test_bad_heads_and_blocks():
    cfg = LlamaConfig(vocab_size=50, hidden_size=48, intermediate_size=48, num_hidden_layers=4,
                      num_attention_heads=4)
    with pytest.raises(ConversionError, match="--heads=5 must divide the hidden size 48"):
        config_from_hf(cfg, heads=5)
    with pytest.raises(ConversionError, match="--blocks=5"):
        config_from_hf(cfg, heads=4, blocks=5)
    with pytest.raises(ConversionError, match="--blocks=0"):
        config_from_hf(cfg, heads=4, blocks=0)


def test_blocks_that_cannot_be_made_are_reported(tmp_path):
    """Blocks have one length (the last may be shorter): 5 layers in 4 blocks cannot be
    made, so the conversion says it uses 3 (2 + 2 + 1 layers) instead of doing so silently."""
    src = tmp_path / "src"
    random_hf("llama", SHAPES[1]).save_pretrained(src)
    logs = []
    _, report = convert(src, None, heads=4, blocks=4, check=False, log=logs.append)
    assert report["blocks"] == 3
    assert any("--blocks 4" in line and "3 blocks" in line for line in logs), logs
    logs.clear()
    convert(src, None, heads=4, blocks=3, check=False, log=logs.append)  # 2 + 2 + 1: as asked
    assert not any("--blocks" in line for line in logs), logs


def test_cli_convert(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    from mhar.cli import main

    hf = random_hf("qwen2", SHAPES[0])
    src = tmp_path / "src"
    hf.save_pretrained(src)
    dst = tmp_path / "dst"
    assert main(["convert", str(src), str(dst), "--heads", "4", "--blocks", "2"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out[out.index("{"):])
    assert report["max_abs_diff_random"] == 0.0 and report["blocks"] == 2
    loaded = AutoModelForCausalLM.from_pretrained(dst).eval()
    assert loaded.config.to_model_config().stream.block_size == 4
    ids = torch.randint(0, 211, (1, 12))
    assert check_identity(hf, loaded, input_ids=ids) == 0.0
    # errors: one clear line, exit code 2, nothing overwritten
    assert main(["convert", str(src), str(dst)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "missing"), str(tmp_path / "x")]) == 2
    assert "not a Hugging Face model folder or a .gguf file" in capsys.readouterr().err


def test_identity_in_bfloat16(tmp_path):
    """bf16 too: a source loaded with from_pretrained(dtype=bfloat16) (its RoPE inv_freq
    buffer stays fp32, as ours is) and its conversion give the same logits."""
    from transformers import AutoModelForCausalLM

    random_hf("llama", SHAPES[0]).save_pretrained(tmp_path)
    kw = {"dtype": torch.bfloat16} if int(__import__("transformers").__version__.split(".")[0]) >= 5 \
        else {"torch_dtype": torch.bfloat16}
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, **kw).eval()
    conv = from_hf_model(hf, heads=8, blocks=2)
    assert next(conv.parameters()).dtype == torch.bfloat16
    assert check_identity(hf, conv, seq_len=33) == 0.0


@pytest.mark.parametrize("arch", list(ARCHS))
def test_left_padded_batch_matches_transformers(arch):
    """A left-padded batch and its batched greedy generation, converted model against the
    source model in transformers: the real tokens' logits agree (each side masks the padding
    its own way, so to rounding, not bit for bit) and the generated tokens are the same."""
    hf = random_hf(arch, SHAPES[0])
    converted = from_hf_model(hf, heads=8, blocks=2).eval()
    torch.manual_seed(3)
    lengths = torch.tensor([9, 4, 6])
    ids = torch.randint(1, 211, (3, 9))
    mask = (torch.arange(9) >= 9 - lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, 0)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask).logits
        got = converted(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(converted.generate(ids, **kw), hf.generate(ids, **kw))
