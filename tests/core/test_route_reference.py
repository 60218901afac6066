"""The reference depth read against independent, line-by-line implementations."""

import math

import pytest
import torch

from mhar.routing import finalize, merge_partials, route, route_partial, routing_weights


def spec_single_head(sources, q, g, eps=1e-6):
    """SPEC.md's formula, one token at a time, in float64 Python loops."""
    N = len(sources)
    lead = sources[0].shape[:-1]
    flat = [s.reshape(-1, s.shape[-1]).double() for s in sources]
    out = torch.empty(flat[0].shape, dtype=torch.float64)
    for t in range(flat[0].shape[0]):
        logits = []
        for i in range(N):
            s = flat[i][t]
            rms = math.sqrt(sum(float(v) ** 2 for v in s) / len(s) + eps)
            k = [float(s[j]) / rms * float(g[j]) for j in range(len(s))]
            logits.append(sum(float(q[j]) * k[j] for j in range(len(s))))
        mx = max(logits)
        e = [math.exp(z - mx) for z in logits]
        alpha = [v / sum(e) for v in e]
        out[t] = sum(alpha[i] * flat[i][t] for i in range(N))
    return out.view(*lead, -1)


def read_with_keys(keys, values, q):
    """A single-head read with the keys given (no norm inside)."""
    z = torch.stack([(k * q).sum(-1) for k in keys])  # (N, ...)
    a = torch.softmax(z, 0)
    return sum(a[i].unsqueeze(-1) * values[i] for i in range(len(values)))


@pytest.mark.parametrize("N,d", [(1, 5), (3, 7), (6, 4)])
def test_single_head_matches_spec_formula(N, d):
    torch.manual_seed(N * 10 + d)
    sources = [torch.randn(2, 3, d, dtype=torch.float64) for _ in range(N)]
    q, g = torch.randn(d, dtype=torch.float64), torch.rand(d, dtype=torch.float64) + 0.5
    torch.testing.assert_close(route(sources, q, g, heads=1), spec_single_head(sources, q, g), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("H", [2, 4, 8])
def test_multi_head_is_single_head_reads_on_slices_of_full_width_keys(H):
    torch.manual_seed(H)
    d, N = 16, 5
    sources = [torch.randn(4, d, dtype=torch.float64) for _ in range(N)]
    q, g = torch.randn(d, dtype=torch.float64), torch.rand(d, dtype=torch.float64) + 0.5
    keys = [s / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * g for s in sources]  # full-width norm
    dh = d // H
    expected = torch.cat([read_with_keys([k[:, h * dh:(h + 1) * dh] for k in keys],
                                         [s[:, h * dh:(h + 1) * dh] for s in sources], q[h * dh:(h + 1) * dh])
                          for h in range(H)], -1)
    torch.testing.assert_close(route(sources, q, g, heads=H), expected, rtol=1e-12, atol=1e-12)
    w = routing_weights(sources, q, g, heads=H)
    assert w.shape == (4, H, N)
    torch.testing.assert_close(w.sum(-1), torch.ones(4, H, dtype=torch.float64))


def test_fp32_math_for_low_precision_inputs():
    torch.manual_seed(0)
    sources = [torch.randn(8, 32).bfloat16() for _ in range(4)]
    q, g = torch.randn(32), torch.ones(32)
    out = route(sources, q, g, heads=4)
    assert out.dtype == torch.bfloat16
    ref = route([s.double() for s in sources], q.double(), g.double(), heads=4)
    assert (out.double() - ref).abs().max() < 2e-2


def test_stacked_tensor_reads_as_views():
    torch.manual_seed(1)
    buf = torch.randn(5, 3, 8)
    q, g = torch.randn(8), torch.rand(8)
    torch.testing.assert_close(route(buf, q, g, 2), route(list(buf.unbind(0)), q, g, 2))


@pytest.mark.parametrize("split", [1, 2, 4])
def test_two_phase_merge_equals_one_pass(split):
    torch.manual_seed(split)
    d, H, S = 12, 3, 4
    sources = [torch.randn(2, 5, d) for _ in range(6)]
    Q, G = torch.randn(S, d), torch.rand(S, d) + 0.5
    merged = merge_partials(route_partial(sources[:split], Q, G, H), route_partial(sources[split:], Q, G, H))
    two = finalize(merged, (2, 5, d), torch.float32)
    for j in range(S):
        torch.testing.assert_close(two[j], route(sources, Q[j], G[j], H), rtol=1e-5, atol=1e-6)


def test_gradcheck_float64():
    torch.manual_seed(2)
    d, H = 6, 2
    sources = [torch.randn(2, 3, d, dtype=torch.float64, requires_grad=True) for _ in range(4)]
    q = torch.randn(d, dtype=torch.float64, requires_grad=True)
    g = (torch.rand(d, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda q, g, *s: route(list(s), q, g, H), (q, g, *sources))
    Q = torch.randn(3, d, dtype=torch.float64, requires_grad=True)
    G = (torch.rand(3, d, dtype=torch.float64) + 0.5).requires_grad_()

    def two_phase(Q, G, *s):
        p = merge_partials(route_partial(list(s[:1]), Q, G, H), route_partial(list(s[1:]), Q, G, H))
        return finalize(p, (2, 3, d), torch.float64)

    assert torch.autograd.gradcheck(two_phase, (Q, G, *sources))


def test_errors():
    s = [torch.randn(3, 8)]
    with pytest.raises(ValueError, match="heads=3"):
        route(s, torch.randn(8), torch.ones(8), heads=3)
    with pytest.raises(ValueError, match="at least one source"):
        route([], torch.randn(8), torch.ones(8))
    with pytest.raises(ValueError, match="shape"):
        route([torch.randn(3, 8), torch.randn(2, 8)], torch.randn(8), torch.ones(8))
