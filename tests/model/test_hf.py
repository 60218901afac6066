"""Hugging Face integration: config round trip, Auto* registration, save/load,
KV-cached generation equal to full recomputation for every stream method, and
loading a saved folder through trust_remote_code without mhar installed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from mhar.model.config import ModelConfig, method_stream  # noqa: E402
from mhar.model.hf import MharConfig, MharForCausalLM  # noqa: E402

METHODS = ["baseline", "hyper", "attnres", "mhar", "mhar-block", "mhar-block:3", "delta", "mhar/two-phase",
           "mhar-block/two-phase", "mhar-block:3/two-phase", "delta/two-phase"]


def tiny(method: str, **kw) -> MharForCausalLM:
    """A tiny model whose routing parameters are randomised (at init every read is
    trivial: zero queries / gates), so the tests exercise real routing.
    ``method`` may end in ``/two-phase`` for the two-phase schedule, its name in ``:S`` for
    blocks of S sublayers (block routing's default here is blocks of one), and in ``+sum`` for
    stream.sum_in_product (the running sums formed in the output projections)."""
    base = dict(vocab_size=97, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=64)
    base.update(kw)
    method, _, fused_sum = method.partition("+")
    name, _, schedule = method.partition("/")
    name, _, block = name.partition(":")
    extra = {"schedule": schedule, "chunk": 2} if schedule else {}
    cfg = ModelConfig(**base, stream=method_stream(name, 2 * base["n_layers"], base["d_model"], **extra))
    if block:
        cfg.stream.block_size = int(block)
    cfg.stream.sum_in_product = fused_sum == "sum"
    torch.manual_seed(0)
    model = MharForCausalLM(MharConfig.from_model_config(cfg)).eval()
    with torch.no_grad():
        for p in model.model.residual.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model


def test_config_round_trip_and_aliases(tmp_path):
    cfg = ModelConfig(vocab_size=97, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=48, head_dim=16,
                      qk_norm=False, attention_bias=True, tie_embeddings=False, attention_kernel="fa4",
                      stream=method_stream("delta", 6, 32, block_size=2))
    hf = MharConfig.from_model_config(cfg)
    assert hf.hidden_size == 32 and hf.num_hidden_layers == 3 and hf.num_key_value_heads == 2
    assert hf.to_model_config() == cfg
    hf.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, MharConfig)
    assert loaded.to_model_config() == cfg


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="heads"):
        MharConfig(d_model=32, n_heads=4, n_kv_heads=2, stream={"method": "routed", "heads": 5})


@pytest.mark.parametrize("method", METHODS)
def test_forward_matches_decoder_and_loss(method):
    model = tiny(method)
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, use_cache=False)
        ref = model.model(ids)
    assert torch.equal(out.logits, ref)
    want = torch.nn.functional.cross_entropy(ref[:, :-1].reshape(-1, 97), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, want)


def test_loss_honours_num_items_in_batch():
    """transformers' Trainer passes num_items_in_batch to a forward that takes **kwargs and
    then skips its own division by the gradient-accumulation steps: the loss must then be
    the summed token loss over num_items_in_batch (as transformers' own causal LMs do), else
    accumulating k micro-batches gives k times the loss and the gradient."""
    model = tiny("delta")
    ids = torch.randint(0, 97, (2, 9))
    labels = ids.clone()
    labels[0, :4] = -100
    n = int((labels[:, 1:] != -100).sum())
    with torch.no_grad():
        mean = model(input_ids=ids, labels=labels, use_cache=False).loss
        part = model(input_ids=ids, labels=labels, use_cache=False, num_items_in_batch=torch.tensor(2 * n)).loss
    torch.testing.assert_close(part, mean / 2)


@pytest.mark.parametrize("method", ["mhar", "mhar-block:3", "hyper"])
def test_gradient_checkpointing_enable(method):
    """transformers' switch turns on the decoder's per-sublayer recompute; gradients are
    unchanged, and generation (a cache) still runs without it."""
    model = tiny(method).train()
    ids = torch.randint(0, 97, (2, 9))
    calls = []  # calls of one sublayer: twice per step when it is recomputed (a pre-hook: the
    # recompute stops early, once it has what backward needs, so a forward hook may not run)
    model.model.sublayers[1].register_forward_pre_hook(lambda *_: calls.append(1))
    # transformers 5.24 renamed the switch (the old name warns); 5.17 has only the old one
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
    grads = []
    for on in (False, True):
        if on:
            enable()
        assert model.model.activation_checkpointing is on
        calls.clear()
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        assert len(calls) == (2 if on else 1)
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    disable()
    assert not model.model.activation_checkpointing


@pytest.mark.parametrize("method", ["mhar", "mhar-block:3", "mhar-block:3+sum", "mhar-block:3/two-phase+sum",
                                    "delta:3", "hyper"])
def test_peft_lora_equals_its_merged_model(method):
    """peft's LoRA on the projections: the adapted model's logits equal those of the
    model with the adapters merged into its weights, and every adapter gets a gradient
    (block routing's later sublayers add into their running sum in the output projection:
    a wrapped projection must still be called)."""
    peft = pytest.importorskip("peft")
    ids = torch.randint(0, 97, (2, 9))
    lora = peft.LoraConfig(r=4, target_modules=["q_proj", "o_proj", "down_proj"], init_lora_weights=False)
    model = peft.get_peft_model(tiny(method), lora)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    adapters = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert adapters and all("lora_" in n for n, _ in adapters)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for _, p in adapters), \
        [n for n, p in adapters if p.grad is None or not p.grad.abs().sum()]
    with torch.no_grad():
        merged = model.merge_and_unload()(input_ids=ids).logits
    torch.testing.assert_close(out.logits.detach(), merged, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_generate_kv_cache_equals_recomputation(method):
    """Greedy generate with the KV cache = generate without it = a manual loop that
    recomputes the whole sequence every step; the cached step logits match too."""
    model = tiny(method)
    ids = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(1))
    new = 8
    kw = dict(max_new_tokens=new, do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    cached = model.generate(ids, use_cache=True, **kw)
    plain = model.generate(ids, use_cache=False, **kw)
    seq = ids
    logits = []
    with torch.no_grad():
        for _ in range(new):
            last = model.model(seq)[:, -1]
            logits.append(last)
            seq = torch.cat([seq, last.argmax(-1, keepdim=True)], 1)
    assert torch.equal(cached.sequences, seq)
    assert torch.equal(plain.sequences, seq)
    for a, b in zip(cached.logits, logits):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_cache_is_really_used():
    """With the cache, every step after the prompt feeds one token to the decoder."""
    model = tiny("mhar")
    lengths = []
    orig = model.model.hidden_states

    def spy(input_ids, cache=None, **kw):
        lengths.append(input_ids.shape[1])
        return orig(input_ids, cache, **kw)

    model.model.hidden_states = spy
    model.generate(torch.randint(0, 97, (1, 6)), max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert lengths == [6, 1, 1, 1]


@pytest.mark.parametrize("method", ["mhar", "delta:3", "hyper"])
def test_handed_in_cache_is_read(method):
    """A cache handed back in is read however use_cache is set and in training mode (where
    use_cache defaults to off): the continuation's logits equal a full forward's. (It was
    dropped there, so the continuation restarted at position 0 without its past.)"""
    model = tiny(method)
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits[:, 5:]
        for train, use_cache in ((False, False), (True, None), (True, True)):
            model.train(train)
            cache = model(input_ids=ids[:, :5], use_cache=True).past_key_values
            kw = {} if use_cache is None else {"use_cache": use_cache}
            out = model(input_ids=ids[:, 5:], past_key_values=cache, **kw)
            torch.testing.assert_close(out.logits, want, rtol=1e-5, atol=1e-5)
            assert cache.get_seq_length() == 9


@pytest.mark.parametrize("impl", ["static", "sliding_window"])
def test_static_and_sliding_caches_are_refused(impl):
    """The attention reads every key a cache hands back: a static cache's preallocated zeros
    or a sliding window's dropped keys would be wrong, so generate says which cache it needs
    (it stopped with the padding error, the static cache's 4-D mask having zeros)."""
    model = tiny("mhar")
    with pytest.raises(ValueError, match="only a DynamicCache"):
        model.generate(torch.randint(0, 97, (1, 5)), max_new_tokens=3, do_sample=False, pad_token_id=0,
                       cache_implementation=impl)


def test_position_ids_other_than_the_decoders_are_refused():
    """The decoder numbers positions itself: position_ids equal to its numbering are accepted
    (also after a cache), others (packed sequences, shifted) raise instead of being ignored."""
    model = tiny("mhar")
    ids = torch.randint(0, 97, (2, 6))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        assert torch.equal(model(input_ids=ids, position_ids=torch.arange(6)[None]).logits, want)
        cache = model(input_ids=ids[:, :4], use_cache=True).past_key_values
        model(input_ids=ids[:, 4:], past_key_values=cache, position_ids=torch.tensor([[4, 5], [4, 5]]))
        for bad in (torch.arange(6)[None] + 3, torch.tensor([[0, 1, 2, 0, 1, 2]] * 2)):
            with pytest.raises(ValueError, match="position_ids"):
                model(input_ids=ids, position_ids=bad)


def test_hidden_states_and_attentions_are_refused():
    model, ids = tiny("mhar"), torch.randint(0, 97, (1, 5))
    for key in ("output_hidden_states", "output_attentions"):
        with pytest.raises(ValueError, match=f"does not return {key}"):
            model(input_ids=ids, **{key: True})
    assert model(input_ids=ids, output_hidden_states=False, output_attentions=False).logits.shape == (1, 5, 97)


PADDED_METHODS = ["baseline", "hyper", "mhar", "mhar-block:3", "mhar/two-phase", "delta:3"]


def left_padded(ids: torch.Tensor, lengths: list[int], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i's last lengths[i] tokens of ``ids`` with padding before them, and the mask."""
    T = ids.shape[1]
    mask = (torch.arange(T) >= T - torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, pad), mask


@pytest.mark.parametrize("method", PADDED_METHODS)
def test_left_padding_is_exact(method):
    """A left-padded batch (batched generate's prompts): each row's positions count from its
    first token and attention skips the padding, so every real token's logits equal those of
    its row alone, and transformers' own position_ids (the mask's cumulative sum) are accepted.
    (Left padding was refused.)"""
    model = tiny(method)
    lengths = [3, 7, 5]
    ids, mask = left_padded(torch.randint(1, 97, (3, 7)), lengths)
    position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits
        for i, n in enumerate(lengths):
            alone = model(input_ids=ids[i:i + 1, -n:], use_cache=False).logits[0]
            torch.testing.assert_close(out[i, -n:], alone, rtol=1e-5, atol=1e-5)
        assert out.isfinite().all()  # the padding's own positions too
        with pytest.raises(ValueError, match="position_ids"):  # the unpadded numbering is wrong here
            model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(7)[None])


@pytest.mark.parametrize("method", PADDED_METHODS)
def test_batched_generate_with_left_padding(method):
    """generate on prompts of different lengths, left-padded as a tokenizer pads for
    generation: each row's greedy continuation and scores are those of its prompt alone."""
    model = tiny(method)
    lengths = [2, 6, 4]
    ids, mask = left_padded(torch.randint(1, 97, (3, 6)), lengths)
    kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    batch = model.generate(ids, attention_mask=mask, **kw)
    for i, n in enumerate(lengths):
        alone = model.generate(ids[i:i + 1, -n:], **kw)
        assert torch.equal(batch.sequences[i, 6:], alone.sequences[0, n:])
        for got, want in zip(batch.scores, alone.scores):
            torch.testing.assert_close(got[i], want[0], rtol=1e-4, atol=1e-4)


def test_beam_search_with_left_padding():
    """Beam search reorders the cache by beam: with left padding each row's beams are its own."""
    model = tiny("mhar")
    lengths = [2, 6, 4]
    ids, mask = left_padded(torch.randint(1, 97, (3, 6)), lengths)
    kw = dict(max_new_tokens=4, num_beams=2, num_return_sequences=2, do_sample=False, pad_token_id=0)
    batch = model.generate(ids, attention_mask=mask, **kw)
    for i, n in enumerate(lengths):
        assert torch.equal(batch[2 * i:2 * i + 2, 6:], model.generate(ids[i:i + 1, -n:], **kw)[:, n:])


@pytest.mark.parametrize("method", ["mhar", "delta:3"])
def test_tokens_after_padding_skip_it(method):
    """Tokens fed after padding (in one call, or after a cached right-padded prompt) read
    around it: their positions continue the row's tokens and attention skips the padding, so
    the logits are those of the row without its padding. (It was refused.)"""
    model = tiny(method)
    ids = torch.randint(1, 97, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 1, 1]])
    keep = [0, 1, 4, 5]
    with torch.no_grad():
        alone = model(input_ids=ids[1:, keep], use_cache=False).logits[0]
        out = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        torch.testing.assert_close(out[1, keep], alone, rtol=1e-5, atol=1e-5)
        cache = model(input_ids=ids[:, :4], attention_mask=mask[:, :4], use_cache=True).past_key_values
        out = model(input_ids=ids[:, 4:], attention_mask=mask, past_key_values=cache).logits
        torch.testing.assert_close(out[1], alone[2:], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[0], model(input_ids=ids[:1]).logits[0, 4:], rtol=1e-5, atol=1e-5)


def test_attention_mask_of_the_wrong_shape_is_refused():
    model = tiny("mhar")
    ids = torch.randint(1, 97, (2, 4))
    for bad in (torch.ones(2, 5), torch.ones(1, 4), torch.ones(2, 1, 4, 4)):
        with pytest.raises(ValueError, match="attention_mask must be 2-D"):
            model(input_ids=ids, attention_mask=bad)


@pytest.mark.parametrize("method", PADDED_METHODS)
def test_right_padding_is_exact(method):
    """A right-padded batch (transformers' padding collators, labels -100 on the padding) is
    accepted: causal attention never reads the padding and routing is per token, so every
    real token's logits equal those of its row alone and the loss is that of the real tokens.
    (It was refused, so Trainer with DataCollatorForLanguageModeling stopped.)"""
    model = tiny(method)
    ids = torch.randint(1, 97, (2, 7))
    lengths = [4, 7]
    mask = (torch.arange(7) < torch.tensor(lengths)[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, labels=labels, position_ids=torch.arange(7)[None])
        rows = [model(input_ids=ids[i:i + 1, :n], use_cache=False).logits[0] for i, n in enumerate(lengths)]
    for i, n in enumerate(lengths):
        torch.testing.assert_close(out.logits[i, :n], rows[i], rtol=1e-5, atol=1e-5)
    want = torch.nn.functional.cross_entropy(torch.cat([r[:-1] for r in rows]),
                                             torch.cat([ids[i, 1:n] for i, n in enumerate(lengths)]))
    torch.testing.assert_close(out.loss, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["mhar-block", "delta"])
def test_save_load_round_trip(tmp_path, method):
    model = tiny(method, tie_embeddings=False)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert (tmp_path / "modeling_mhar.py").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, MharForCausalLM)
    for (n, a), (m, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert n == m and torch.equal(a, b), n
    ids = torch.randint(0, 97, (2, 7))
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, loaded(input_ids=ids).logits)


@pytest.mark.parametrize("tie", [True, False])
def test_resize_token_embeddings(tmp_path, tie):
    """resize_token_embeddings: the logits cover the new vocabulary, the Decoder's own config
    follows the Hugging Face one (it kept the old size), and the resized model round-trips."""
    model = tiny("mhar", tie_embeddings=tie)
    model.resize_token_embeddings(120)
    assert model.config.vocab_size == 120
    assert model.model.config == model.config.to_model_config()
    ids = torch.randint(0, 120, (1, 5))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape[-1] == 120
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, logits)


_REMOTE_SCRIPT = textwrap.dedent("""
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "mhar" or name.startswith("mhar."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, Block())
    import torch
    from transformers import AutoModelForCausalLM
    folder = sys.argv[1]
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    ids = torch.load(folder + "/ids.pt")
    ref = torch.load(folder + "/ref.pt")
    with torch.no_grad():
        diff = (model(input_ids=ids).logits - ref).abs().max().item()
    gen = model.generate(ids[:1], max_new_tokens=4, do_sample=False, pad_token_id=0)
    model(input_ids=ids, labels=ids).loss.backward()  # training: the streams' bookkeeping with grad on
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert not [m for m in sys.modules if m == "mhar" or m.startswith("mhar.")]
    print("GRAD", grad.norm().item())
    print("DIFF", diff, "GEN", gen[0].tolist())
""")


@pytest.mark.parametrize("method", ["mhar-block:3", "mhar/two-phase"])
def test_trust_remote_code_without_mhar(tmp_path, method):
    # the two-phase schedule (the default on CUDA for full routing from d = 512) through the
    # bundle's shim; block routing's running sums, whose bookkeeping runs with grad on
    model = tiny(method)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    ids = torch.randint(0, 97, (2, 7))
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    torch.save(ids, folder / "ids.pt")
    torch.save(ref, folder / "ref.pt")
    want = model.generate(ids[:1], max_new_tokens=4, do_sample=False, pad_token_id=0)[0].tolist()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(tmp_path / "modules")
    env["HF_HUB_OFFLINE"] = "1"
    # run outside the repository so neither src/ nor an installed mhar can be imported
    proc = subprocess.run([sys.executable, "-c", _REMOTE_SCRIPT, str(folder)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("DIFF")][-1].split()
    assert float(line[1]) == 0.0
    assert eval(" ".join(line[3:])) == want
    model(input_ids=ids, labels=ids).loss.backward()
    want_grad = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
    got_grad = float([ln for ln in proc.stdout.splitlines() if ln.startswith("GRAD")][-1].split()[1])
    assert got_grad == pytest.approx(want_grad, rel=1e-5)


def test_remote_bundle_is_flat_and_relative():
    from mhar.model.remote import bundle_sources

    files = bundle_sources()
    assert "modeling_mhar.py" in files and "mhar_routing.py" in files
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not (node.module or "").startswith("mhar"), (name, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("mhar") for a in node.names), name
