"""Low-precision weight copies (mhar/model/lowp.py): under bf16 autocast a model with
copies computes what it computes without them (the copy is the cast), gradients go to
the fp32 weights, a stale copy is never used, and torch.compile neither breaks on them
nor recompiles when one is rewritten."""

from __future__ import annotations

import pytest
import torch

from mhar.model import Decoder, ModelConfig, StreamConfig
from mhar.model.layers import Linear
from mhar.model.lowp import LowpCopies


def tiny(tied: bool = True) -> Decoder:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=32,
                      tie_embeddings=tied, stream=StreamConfig(method="routed", heads=4))
    return Decoder(cfg)


def loss_and_grads(model: Decoder, x: torch.Tensor, chunk: int = 5):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model.loss(x[:, :-1], x[:, 1:], chunk_size=chunk)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def assert_same(a, b):
    assert torch.equal(a[0], b[0])
    assert a[1].keys() == b[1].keys()
    for name in a[1]:
        assert torch.equal(a[1][name], b[1][name]), name


@pytest.mark.parametrize("tied", [True, False])
def test_copies_change_nothing_but_where_the_cast_comes_from(tied, monkeypatch):
    model = tiny(tied)
    x = torch.randint(0, 64, (2, 17))
    want = loss_and_grads(model, x)
    copies = LowpCopies(model, torch.bfloat16)
    n_linear = sum(isinstance(m, Linear) for m in model.modules())
    assert len(copies.slots) == n_linear + 1 and n_linear == 2 * 7  # and the output weight
    assert all(c.dtype == torch.bfloat16 for c in copies.by_weight().values())
    assert not any("lowp" in k for k in model.state_dict())  # the copies are not saved
    used = []
    from mhar.model import lowp
    real = lowp._UseCopy.apply
    monkeypatch.setattr(lowp._UseCopy, "apply", lambda *a: used.append(1) or real(*a))
    assert_same(loss_and_grads(model, x), want)
    assert len(used) == n_linear  # every linear layer took its copy
    assert model.output_weight_copy() is model.output_weight_lowp  # and the loss may take the head's
    # without autocast the copies are not used (an fp32 forward stays fp32)
    used.clear()
    with torch.no_grad():
        model(x)
    assert not used


def test_a_stale_copy_is_not_used_and_refresh_recasts_it():
    model = tiny()
    x = torch.randint(0, 64, (2, 17))
    copies = LowpCopies(model, torch.bfloat16)
    layer = next(m for m in model.modules() if isinstance(m, Linear))
    with torch.no_grad():
        layer.weight.mul_(1.5)  # changed outside the optimiser: its version moves
        model.embed.weight.add_(0.25)
    want_copy = layer.weight_lowp.clone()
    fresh = tiny()
    fresh.load_state_dict(model.state_dict())
    want = loss_and_grads(fresh, x)
    assert_same(loss_and_grads(model, x), want)  # the eager forward cast the changed weights itself
    assert torch.equal(layer.weight_lowp, want_copy)  # (its copy untouched until refreshed)
    assert model.output_weight_copy() is None
    assert copies.refresh() == 2 and copies.refresh() == 0
    assert torch.equal(layer.weight_lowp, layer.weight.detach().bfloat16())
    assert_same(loss_and_grads(model, x), want)
    copies.release()
    assert all(getattr(m, "weight_lowp", None) is None for m in model.modules())
    assert_same(loss_and_grads(model, x), want)


def test_compiled_regions_use_the_copies_without_recompiling():
    torch._dynamo.reset()
    model = tiny()
    x = torch.randint(0, 64, (2, 17))
    want = loss_and_grads(model, x)
    copies = LowpCopies(model, torch.bfloat16)
    model.compile_regions(backend="aot_eager")
    from torch._dynamo.utils import counters
    counters.clear()
    assert_same(loss_and_grads(model, x), want)
    frames = counters["stats"]["unique_graphs"]
    for _ in range(2):  # the weights change, the copies are rewritten: no new compile
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.99)
        assert copies.refresh() == len(copies.slots)
        eager = tiny()
        eager.load_state_dict(model.state_dict())
        assert_same(loss_and_grads(model, x), loss_and_grads(eager, x))
    assert counters["stats"]["unique_graphs"] == frames
    # compiled code trusts the copies (it cannot check them): a copy changed behind the
    # tag's back changes the loss, which shows the compiled regions read it
    layer = next(m for m in model.modules() if isinstance(m, Linear))
    before = loss_and_grads(model, x)[0]
    layer.weight_lowp.zero_()
    assert not torch.equal(loss_and_grads(model, x)[0], before)
