"""Every Triton launch of a routed or hyper-connected model keeps its token-sized grid on
the first axis.

CUDA stops a grid's second and third axes at 65,535 programs, the first at 2^31 - 1. A
100M micro-batch of 64 x 2048 has 131,072 tokens, so a kernel with one program per token
on the second axis fails at launch ("invalid argument") on the GPU, while the CPU's
interpreter runs it. Here no kernel runs: each launch's grid is recorded, a model's
forward and backward at two batch sizes, and only the first axis may grow with tokens.
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

import mhar.routing.triton_kernels  # noqa: E402,F401  (decorated before TRITON_INTERPRET is set below)
import mhar.streams.hyper_kernels  # noqa: E402,F401
from mhar import routing  # noqa: E402
from mhar.streams import hyper  # noqa: E402
from mhar.model import Decoder, ModelConfig, method_stream  # noqa: E402


@pytest.fixture
def launches(monkeypatch):
    """The (kernel, grid) of every Triton launch from now on; the kernels do not run (their
    outputs hold whatever memory held, which no host code reads)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    seen = []

    def record(self, *args, grid, warmup, **kwargs):
        seen.append((self.fn.__name__, tuple(grid)))

    monkeypatch.setattr(JITFunction, "run", record)
    monkeypatch.setattr(InterpretedFunction, "run", record)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # lets the backend take CPU tensors
    routing.set_backend("triton")
    hyper.set_backend("triton")
    yield seen
    routing.set_backend(None)
    hyper.set_backend(None)


def _model_launches(seen, method, schedule, batch):
    seen.clear()
    torch.manual_seed(0)
    extra = dict(schedule=schedule, chunk=2) if schedule else {}
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64,
                      stream=method_stream(method, 8, 32, **extra))
    x = torch.randint(0, 64, (batch, 64))
    Decoder(cfg).loss(x[:, :-1], x[:, 1:]).backward()
    return list(seen)


@pytest.mark.parametrize("method,schedule", [("mhar", "two-phase"), ("mhar", "one-pass"), ("attnres", "two-phase"),
                                             ("mhar-block", None), ("hyper", None)])
def test_token_grids_grow_on_the_first_axis_only(launches, method, schedule):
    small = _model_launches(launches, method, schedule, 2)
    large = _model_launches(launches, method, schedule, 8)
    assert small and [n for n, _ in small] == [n for n, _ in large]
    grown = [(name, a, b) for (name, a), (_, b) in zip(small, large) if a[1:] != b[1:]]
    assert not grown, f"grids that grow with tokens past their first axis: {grown}"
    assert any(a[0] != b[0] for (_, a), (_, b) in zip(small, large)), "no grid grew with tokens: not a test"


@pytest.mark.parametrize("method,schedule", [("mhar", "two-phase"), ("mhar", "one-pass"), ("mhar-block", None)])
def test_persistent_launches_note_what_an_sm_holds(launches, monkeypatch, method, schedule):
    """Every persistent grid the op sizes by a launch key (``op._n_programs``) is followed
    by its launch noting the compiled kernel under that same key (``op._note_fit``), so
    that later launches run whole waves of what an SM holds (``mhar.routing.occupancy``)."""
    from mhar.routing import op

    sized, noted = [], []
    n_programs, note_fit = op._n_programs, op._note_fit

    def sizing(device, n_tiles, per_sm, share=1, launch=None):
        sized.append(launch)
        return n_programs(device, n_tiles, per_sm, share, launch)

    def noting(launch, compiled, device):
        noted.append(launch)
        note_fit(launch, compiled, device)

    monkeypatch.setattr(op, "_n_programs", sizing)
    monkeypatch.setattr(op, "_note_fit", noting)
    _model_launches(launches, method, schedule, 2)
    assert sized and None not in sized, "a persistent grid sized without its launch's key"
    assert sized == noted
    kernels = {key[0] for key in sized}
    # phase 1's product kernels (forward, COEF pass) run in the two-phase schedule
    assert kernels == ({"_bwd_kernel", "_fwd_dot_kernel", "_coef_dot_kernel"} if schedule == "two-phase"
                       else {"_bwd_kernel"}), kernels
