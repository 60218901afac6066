"""Small memset nodes made kernel nodes in captured CUDA graphs (mhar.train.graph_memsets):
the kernel writes exactly what the memset wrote (1-, 2- and 4-byte elements, pitched rows),
large memsets stay, cuBLAS's products give the same outputs, and a graphed training step
gives the loss and gradients it gives with the memsets kept (bit for bit, or within what
the memsets kept give from one run to the next). The CUDA cases skip without a GPU."""

import ctypes

import pytest
import torch

from mhar.model import Decoder, get_preset, method_stream
from mhar.model.loss import linear_cross_entropy
from mhar.train import graph_memsets
from mhar.train.graphs import GraphedStep

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("MHAR_GRAPH_MEMSETS", "0")
    assert not graph_memsets.enabled()
    if not torch.cuda.is_available():
        assert not graph_memsets.supported()


def _memset_graph(base: int, cases: list[tuple], lib) -> ctypes.c_void_p:
    """A raw graph of memset nodes in a chain, one per (offset, pitch, value, elem, width, height)."""
    graph, ctx, prev = ctypes.c_void_p(), ctypes.c_void_p(), None
    assert lib.cuGraphCreate(ctypes.byref(graph), 0) == 0
    assert lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
    for offset, pitch, value, elem, width, height in cases:
        p = graph_memsets._MemsetParams(dst=base + offset, pitch=pitch, value=value, elementSize=elem,
                                        width=width, height=height)
        node = ctypes.c_void_p()
        deps = (ctypes.c_void_p * 1)(prev.value) if prev is not None else None
        assert lib.cuGraphAddMemsetNode(ctypes.byref(node), graph, deps, ctypes.c_size_t(0 if prev is None else 1),
                                        ctypes.byref(p), ctx) == 0
        prev = node
    return graph


def _run_raw(graph: ctypes.c_void_p, lib) -> None:
    exe = ctypes.c_void_p()
    assert lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)) == 0
    assert lib.cuGraphLaunch(exe, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)) == 0
    torch.cuda.synchronize()
    lib.cuGraphExecDestroy(exe)
    lib.cuGraphDestroy(graph)


@cuda
@pytest.mark.cuda
def test_fill_kernel_writes_what_the_memset_wrote():
    if not graph_memsets.supported():
        pytest.skip("this torch cannot edit a captured graph")
    lib = graph_memsets._driver()
    big = graph_memsets.MAX_BYTES + 4
    cases = [(3, 100, 0x5C, 1, 100, 1),  # bytes at an odd address
             (1024, 154, 0x1234, 2, 77, 1),  # 2-byte elements
             (4096, 512, 0xDEADBEEF, 4, 40, 5),  # 4-byte elements, 5 rows 512 bytes apart
             (8192, 300, 0x07, 1, 257, 3),  # pitched byte rows
             (16384, big, 0x11, 1, big, 1)]  # over MAX_BYTES: stays a memset node
    results = []
    for convert in (False, True):
        buf = torch.full((16384 + big + 64,), 0xAB, dtype=torch.uint8, device="cuda")
        graph = _memset_graph(buf.data_ptr(), cases, lib)
        if convert:
            assert graph_memsets.memsets_to_kernels(graph.value) == 4
        _run_raw(graph, lib)
        results.append(buf.cpu())
    assert not torch.equal(results[0], torch.full_like(results[0], 0xAB))  # the memsets wrote
    assert torch.equal(results[0], results[1])


@cuda
@pytest.mark.cuda
def test_products_graph_same_outputs():
    """cuBLAS's products (the 350M step's shapes, where it zeroes its workspace first)."""
    if not graph_memsets.supported():
        pytest.skip("this torch cannot edit a captured graph")
    torch.manual_seed(0)
    a = torch.randn(16384, 1024, device="cuda", dtype=torch.bfloat16)
    w = [torch.randn(n, 1024, device="cuda", dtype=torch.bfloat16) for n in (1024, 512, 4096)]
    outs = []
    for wi in w:  # cuBLAS's handle and workspace, made before the capture
        a @ wi.t()
    torch.cuda.synchronize()
    for convert in (False, True):
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(graph):
            y = [a @ wi.t() for wi in w]
        replaced = graph_memsets.memsets_to_kernels(graph) if convert else 0
        graph.instantiate()
        graph.replay()
        torch.cuda.synchronize()
        outs.append([t.clone() for t in y])
        if convert and torch.cuda.get_device_capability() == (9, 0):
            assert replaced > 0  # Hopper's cuBLAS zeroes its workspace before these
    assert all(torch.equal(p, q) for p, q in zip(*outs))


def _graphed_step(method: str, monkeypatch, kernels: bool):
    monkeypatch.setenv("MHAR_GRAPH_MEMSETS", "1" if kernels else "0")
    cfg = get_preset("paper-350m", "baseline")
    cfg.vocab_size, cfg.n_layers = 8192, 2
    cfg.stream = method_stream(method, cfg.num_sublayers, cfg.d_model)
    torch.manual_seed(0)
    model = Decoder(cfg).cuda()

    def loss_fn(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            h = model.hidden_states(x).flatten(0, 1)
            return linear_cross_entropy(h, model.output_weight, y.flatten(), 4096)

    g = torch.Generator(device="cuda").manual_seed(1)
    x, y = (torch.randint(0, cfg.vocab_size, (16, 1024), device="cuda", generator=g) for _ in range(2))
    step = GraphedStep(loss_fn, model.parameters(), x, y, warmup=1)
    loss = step.run(x, y).clone()
    return loss, [p.grad.clone() for p in model.parameters()], step.memsets_made_kernels


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("method", ["baseline", "mhar"])
def test_graphed_step_bit_for_bit(method, monkeypatch):
    if not graph_memsets.supported():
        pytest.skip("this torch cannot edit a captured graph")
    loss0, grads0, none = _graphed_step(method, monkeypatch, kernels=False)
    loss1, grads1, replaced = _graphed_step(method, monkeypatch, kernels=True)
    assert none == 0
    if torch.cuda.get_device_capability() == (9, 0):
        assert replaced > 0
    assert torch.equal(loss0, loss1)  # the forward is deterministic
    if all(torch.equal(a, b) for a, b in zip(grads0, grads1)):
        return
    # the attention's backward may add in any order (cuDNN's dQ): then the memsets kept,
    # run again, sets the spread the edited graph must stay within
    _, grads2, _ = _graphed_step(method, monkeypatch, kernels=False)
    for a, b, c in zip(grads0, grads1, grads2):
        spread = (a.float() - c.float()).abs().max().item()
        assert (a.float() - b.float()).abs().max().item() <= 4 * spread + 1e-30
