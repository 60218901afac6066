"""The routing entry points on the CPU (no Triton): backend choice, the custom ops'
registration, and composition with FSDP2 (one process, gloo)."""

from __future__ import annotations

import os
import socket
import sys

import pytest
import torch

from mhar import routing
from mhar.routing import op as rop
from mhar.routing import reference as R

sys.path.insert(0, os.path.dirname(__file__))
from routing_checks import check_sink_chain  # noqa: E402


def _inputs(n=4, lead=(3, 5), d=16):
    g = torch.Generator().manual_seed(n * 1000 + d)
    srcs = [torch.randn(*lead, d, generator=g, requires_grad=True) for _ in range(n)]
    q = (torch.randn(d, generator=g) * 0.5).requires_grad_()
    w = (1 + 0.1 * torch.randn(d, generator=g)).requires_grad_()
    return srcs, q, w


def test_backend_choice(monkeypatch):
    with pytest.raises(ValueError, match="routing backend"):
        routing.set_backend("cuda")
    monkeypatch.setenv("MHAR_ROUTING_BACKEND", "reference")
    assert routing.get_backend() == "reference"
    routing.set_backend("auto")
    try:
        assert routing.get_backend() == "auto"
    finally:
        routing.set_backend(None)
    monkeypatch.setenv("MHAR_ROUTING_BACKEND", "bogus")
    with pytest.raises(ValueError, match="MHAR_ROUTING_BACKEND"):
        routing.get_backend()


def test_auto_on_cpu_is_the_reference():
    srcs, q, w = _inputs()
    y = routing.route(srcs, q, w, 4)
    gy = torch.randn_like(y)
    grads = torch.autograd.grad(y, [*srcs, q, w], gy)
    y_ref = R.route(srcs, q, w, 4)
    ref = torch.autograd.grad(y_ref, [*srcs, q, w], gy)
    torch.testing.assert_close(y, y_ref, rtol=1e-6, atol=1e-6)
    for a, b in zip(grads, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_input_errors():
    srcs, q, w = _inputs()
    with pytest.raises(ValueError, match="heads"):
        routing.route(srcs, q, w, 3)
    with pytest.raises(ValueError, match="at least one source"):
        routing.route([], q, w, 1)
    with pytest.raises(ValueError, match="shape"):
        routing.route([srcs[0], srcs[1][:2]], q, w, 1)
    with pytest.raises(ValueError, match=r"\(S, d\)"):
        routing.route_partial(srcs, q, w, 1)
    # integer sources used to be read by the reference and the result cast back to
    # integers (silently truncated); a float head count failed inside the kernel launcher
    with pytest.raises(ValueError, match="floating point"):
        routing.route([s.round().long() for s in srcs], q, w, 1)
    with pytest.raises(ValueError, match="floating point"):
        routing.route_partial([s.round().int() for s in srcs], q.view(1, -1), w.view(1, -1), 1)
    with pytest.raises(ValueError, match="heads"):
        routing.route(srcs, q, w, float(1))
    # a 0-d source or a non-tensor among the sources: named, not an IndexError / AttributeError
    for bad in (torch.tensor(1.0), [1.0] * srcs[0].shape[-1]):
        with pytest.raises(ValueError, match=r"every source must be a tensor of shape \(\.\.\., d\)"):
            routing.route([srcs[0], bad], q, w, 1)
    # a query of another width than the sources: named as such (the message showed the
    # expected shape and the source's, equal); mixed dtypes name both
    d = q.shape[0]
    with pytest.raises(ValueError, match=f"source 0 has width {d}, the query and norm weight d={d - 2}"):
        routing.route(srcs, q[:-2], w[:-2], 1)
    with pytest.raises(ValueError, match="source 0 is torch.float32 on cpu, source 1 torch.bfloat16 on cpu"):
        routing.route([srcs[0], srcs[1].bfloat16()], q, w, 1)


def test_ops_registered():
    assert hasattr(torch.ops.mhar, "route") and hasattr(torch.ops.mhar, "route_partial")
    srcs, q, w = _inputs(3, (4,), 8)
    torch.library.opcheck(rop.route_op, ([s.detach().requires_grad_() for s in srcs], q, w, 2, 1e-6))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp2_wrapped_module():
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs a fresh torch.distributed")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    class Site(torch.nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.q = torch.nn.Parameter(torch.randn(d) * 0.3)
            self.g = torch.nn.Parameter(torch.ones(d))
            self.lin = torch.nn.Linear(d, d)
            self.heads = heads

        def forward(self, srcs):
            return self.lin(routing.route(srcs, self.q, self.g, self.heads))

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(_free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model, plain = Site(16, 4), Site(16, 4)
        plain.load_state_dict(model.state_dict())
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        srcs, _, _ = _inputs(4, (3, 5), 16)
        out = model(srcs)
        out.square().sum().backward()
        ref = plain(srcs)
        gq, gg = torch.autograd.grad(ref.square().sum(), [plain.q, plain.g])
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(model.q.grad.full_tensor(), gq)
        torch.testing.assert_close(model.g.grad.full_tensor(), gg)
    finally:
        dist.destroy_process_group()


def test_config_table_from_a_sweep_file(tmp_path, monkeypatch):
    import json

    from mhar.routing import op as rop
    monkeypatch.setattr(rop, "CONFIG_TABLE", dict(rop.CONFIG_TABLE))
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps({"1280,0": {"bwd_warps": 4}, "512,1": {"fwd_warps": 8}}))
    rop.load_config_table(str(path))
    assert rop._cfg(1280, False)["bwd_warps"] == 4
    assert rop._cfg(1280, False)["fwd_warps"] == rop._DEFAULTS[False]["fwd_warps"]  # merged, not replaced
    assert rop._cfg(512, True)["fwd_warps"] == 8 and rop._cfg(512, False)["fwd_warps"] == rop._DEFAULTS[False]["fwd_warps"]


def test_config_file_star_key_sets_every_default(tmp_path, monkeypatch):
    import json

    from mhar.routing import op as rop
    monkeypatch.setattr(rop, "_DEFAULTS", {k: dict(v) for k, v in rop._DEFAULTS.items()})
    path = tmp_path / "phase1.json"
    path.write_text(json.dumps({"*": {"bwd_twopass": False}}))
    rop.load_config_table(str(path))
    assert not rop._cfg(1024, False)["bwd_twopass"] and not rop._cfg(1280, True)["bwd_twopass"]


def test_tiles_of_the_two_backward_kinds_and_padded_heads(monkeypatch):
    from mhar.routing import op as rop
    monkeypatch.setattr(rop, "CONFIG_TABLE", {(512, False): {"bwd_elems": 512, "bwd_sum_elems": 1024}})
    monkeypatch.setattr(rop, "TUNE", None)
    rows = lambda kind, d=512, heads=1: rop._geometry(d, heads, 4096, kind, 16)[2]["BM"]  # noqa: E731
    assert (rows("bwd"), rows("bwd_sum"), rows("fwd")) == (1, 2, 2)
    assert rows("bwd_sum", 1024) == rows("bwd", 1024) == 1  # no sum entry: the backward's tile
    monkeypatch.setattr(rop, "TUNE", {"bwd_elems": 2048})  # a sweep's tile: both backward kinds
    assert rows("bwd") == rows("bwd_sum") == 4
    # warps by kind: the sum kind's own entry, else the backward's; a sweep's warps: both kinds
    monkeypatch.setattr(rop, "CONFIG_TABLE", {(512, False): {"bwd_warps": 2, "bwd_sum_warps": 1}})
    monkeypatch.setattr(rop, "TUNE", None)
    assert (rop._cfg(512, False)["bwd_warps"], rop._cfg(512, False)["bwd_sum_warps"]) == (2, 1)
    monkeypatch.setattr(rop, "TUNE", {"bwd_warps": 4})
    assert rop._cfg(512, False)["bwd_warps"] == 4 and "bwd_sum_warps" not in rop._cfg(512, False)
    # register caps by kind, the same way; an explicit None leaves the sum kind uncapped
    monkeypatch.setattr(rop, "CONFIG_TABLE", {(512, False): {"bwd_maxnreg": 208, "bwd_sum_maxnreg": None}})
    monkeypatch.setattr(rop, "TUNE", None)
    cfg = rop._cfg(512, False)
    assert rop._bwd_launch(cfg, summing=False) == (cfg["bwd_warps"], 208)
    assert rop._bwd_launch(cfg, summing=True) == (cfg["bwd_warps"], None)
    monkeypatch.setattr(rop, "TUNE", {"bwd_maxnreg": 224})  # a sweep's cap: both kinds
    assert rop._bwd_launch(rop._cfg(512, False), summing=True)[1] == 224
    monkeypatch.setattr(rop, "CONFIG_TABLE", {(512, False): {"bwd_maxnreg": 208}})
    monkeypatch.setattr(rop, "TUNE", None)
    assert rop._bwd_launch(rop._cfg(512, False), summing=True)[1] == 208  # no sum entry: the backward's
    # pad_heads: 160-wide heads as one 256-lane part instead of 128 + 32
    monkeypatch.setattr(rop, "TUNE", {"pad_heads": True})
    tile = rop._geometry(1280, 8, 4096, "fwd", 16)[2]
    assert (tile["DA"], tile["DB"], tile["HAS_B"], tile["EVEN"]) == (256, 0, False, False)
    monkeypatch.setattr(rop, "TUNE", None)
    assert rop._geometry(1280, 8, 4096, "fwd", 16)[2]["DB"] == 32
    # several heads: part A in chunks of part B's width (one register layout for both);
    # one head keeps part A whole, and a power-of-two head has one chunk
    tiles = {(d, h): rop._geometry(d, h, 4096, "fwd", 16)[2] for d, h in ((1280, 8), (1280, 1), (1024, 8), (40, 8))}
    chunks = {key: (t["DA"] // t["DC"], t["DC"]) for key, t in tiles.items()}
    assert chunks == {(1280, 8): (4, 32), (1280, 1): (1, 1024), (1024, 8): (1, 128), (40, 8): (4, 1)}


def test_gather_walks_rows_in_chunks_meeting_few_heads():
    # chunks of gather_cols (or a head's width rounded up to a power of two, at least 16),
    # whatever the heads; SPAN: the most heads one chunk meets (one product each)
    walk = {(d, h): rop._gather_walk(d, d // h, 128) for d, h in ((1280, 8), (1024, 8), (1280, 1), (40, 8),
                                                                  (123, 1), (48, 3), (768, 8))}
    assert walk == {(1280, 8): dict(WIDTH=128, SPAN=2), (1024, 8): dict(WIDTH=128, SPAN=1),
                    (1280, 1): dict(WIDTH=128, SPAN=1), (40, 8): dict(WIDTH=16, SPAN=4),
                    (123, 1): dict(WIDTH=128, SPAN=1), (48, 3): dict(WIDTH=16, SPAN=1),
                    (768, 8): dict(WIDTH=128, SPAN=2)}
    # the product kernels' head parts: at least 16 lanes
    assert [rop._head_parts(dh) for dh in (160, 128, 5, 20)] == [(128, 32), (128, 0), (16, 0), (16, 16)]


@pytest.mark.parametrize("extra,chunk", [(False, 0), (True, 0), (False, 2)])
def test_gradient_sink_reference_backend(extra, chunk):
    # off the kernels, a GradientSink adds the reference's per-site gradients in Python;
    # the result equals autograd's own sums
    check_sink_chain(4, (3, 5), 16, 4, gen=torch.Generator().manual_seed(7), extra=extra, chunk=chunk)


@pytest.mark.parametrize("block,two_phase", [(2, False), (3, False), (3, True)])
def test_gradient_sink_block_running_sums_reference_backend(block, two_phase):
    check_sink_chain(7, (3, 5), 16, 4, gen=torch.Generator().manual_seed(8), chunk=int(two_phase), block=block)


def test_gradient_sink_spans_are_checked():
    srcs, q, w = _inputs(n=2)
    sink = routing.GradientSink()
    reg = [sink.register(s) for s in srcs]
    with pytest.raises(ValueError, match="does not fit"):
        routing.route(reg, q, w, 1, sink=sink.span(1, 2))


def _penalty_backward(read, x):
    """A gradient penalty on ``x`` (R1-style): its gradient with create_graph, then backward."""
    loss = read().square().sum() + x.pow(3).sum()  # x's own path keeps the penalty differentiable
    gx, = torch.autograd.grad(loss, x, create_graph=True)
    gx.square().sum().backward()


@pytest.mark.parametrize("entry", ["route", "route_partial", "route_merge", "reference", "stream"])
def test_second_order_gradients_are_an_error(entry):
    # the backward passes are not differentiable: a second order took routing's first-order
    # gradients as constants, silently (q got no gradient, the sources' were wrong)
    from mhar.streams import RoutedStream

    srcs, q, w = _inputs()
    x = srcs[0]
    reads = {
        "route": lambda: routing.route(srcs, q, w, 4),
        "route_partial": lambda: routing.route_partial(srcs, q.view(1, -1), w.view(1, -1), 4).o,
        "route_merge": lambda: routing.route_merge(routing.route_partial(srcs[:2], q.view(1, -1), w.view(1, -1), 4),
                                                   srcs[2:], q, w, 4),
        "reference": lambda: R.route(srcs, q, w, 4),
    }
    if entry == "stream":  # the sources registered with a GradientSink, block running sums
        stream = RoutedStream(16, 4, heads=4, block_size=2)

        def read():
            state = stream.start(x)
            for i in range(4):
                state.write(i, torch.tanh(state.read(i)) * srcs[1])
            return state.final()
        reads[entry] = read
    with pytest.raises(RuntimeError, match="differentiate twice"):
        _penalty_backward(reads[entry], x)
