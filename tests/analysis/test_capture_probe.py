import math
import os
import sys

import pytest
import torch

from mhar.analysis.capture import capture_sites, source_columns
from mhar.analysis.probe import probe_model, slice_disagreement
from mhar.model import Decoder
from mhar.routing.reference import route

sys.path.insert(0, os.path.dirname(__file__))
from analysis_helpers import constructed_model, tiny_config  # noqa: E402


def _randomise(model, std=0.5):
    with torch.no_grad():
        model.residual.queries.normal_(0, std)
        model.residual.key_norms.uniform_(0.5, 1.5)
        if hasattr(model.residual, "gates"):
            model.residual.gates.fill_(0.7)
            model.residual.null_source.normal_()
    return model


@pytest.mark.parametrize("method,heads,block", [("routed", 1, 0), ("routed", 4, 0), ("routed", 2, 3), ("delta", 4, 2)])
def test_capture_reproduces_the_model_reads(seeded, method, heads, block):
    model = _randomise(Decoder(tiny_config(method, heads, block, n_layers=3))).eval()
    ids = torch.randint(0, 64, (2, 9))
    seen = {}
    hooks = [s.register_forward_pre_hook(lambda m, a, i=i: seen.__setitem__(i, a[0].clone()))
             for i, s in enumerate(model.sublayers)]
    sites = capture_sites(model, ids)
    for h in hooks:
        h.remove()
    n = model.config.num_sublayers
    assert [s.index for s in sites] == list(range(n + 1))
    columns = source_columns(model.residual)
    for site in sites:
        assert set(site.labels) <= set(columns)
        w = site.weights()
        assert w.shape == (2, 9, heads, len(site.sources))
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 9, heads))
        read = route(site.sources, site.query, site.norm_weight, heads)
        if site.index == n:
            # the final read, through the model's own final norm, is the model's hidden state
            state_final = read if method == "routed" else None
            if state_final is not None:
                torch.testing.assert_close(model.final_norm(state_final), model.hidden_states(ids))
        elif method == "routed":
            torch.testing.assert_close(read, seen[site.index])
    if method == "routed" and block:
        assert "partial" in sites[1].labels and "partial" not in sites[3].labels  # block of 3: sublayer 3 starts one


def test_capture_uses_the_models_rope_scaling(seeded):
    """A model with RoPE scaling (a converted Llama 3.x) is captured with its own cos/sin:
    the final read through the final norm is the model's hidden state (it was not)."""
    cfg = tiny_config("routed", 1, 0, n_layers=2, rope_scaling={"rope_type": "linear", "factor": 4.0})
    model = _randomise(Decoder(cfg)).eval()
    ids = torch.randint(0, 64, (1, 40))
    final = capture_sites(model, ids)[-1]
    read = route(final.sources, final.query, final.norm_weight, 1)
    torch.testing.assert_close(model.final_norm(read), model.hidden_states(ids))


def test_capture_past_max_seq_len_warns_as_the_model_does(seeded):
    """Past max_seq_len the model's own forward pass warns and runs (untrained positions);
    capture does the same and still reproduces it (it refused)."""
    model = _randomise(Decoder(tiny_config("routed", 2, 0, n_layers=1))).eval()
    ids = torch.randint(0, 64, (1, 70))  # max_seq_len 64
    with pytest.warns(UserWarning, match="exceeds max_seq_len=64"):
        final = capture_sites(model, ids)[-1]
    with pytest.warns(UserWarning, match="exceeds max_seq_len=64"):
        want = model.hidden_states(ids)
    torch.testing.assert_close(model.final_norm(route(final.sources, final.query, final.norm_weight, 2)), want)


def test_capture_and_probe_take_the_transformers_model(seeded):
    """docs/huggingface.md points MharForCausalLM users to mhar.analysis.capture: the
    wrapper is analysed as its decoder (it was refused as having 'no routing sites')."""
    pytest.importorskip("transformers")
    from mhar.analysis.maps import routing_map
    from mhar.model.hf import MharConfig, MharForCausalLM

    hf = MharForCausalLM(MharConfig.from_model_config(tiny_config("delta", 4, 2, n_layers=2))).eval()
    _randomise(hf.model)
    ids = torch.randint(0, 64, (2, 7))
    got, want = capture_sites(hf, ids), capture_sites(hf.model, ids)
    assert [s.labels for s in got] == [s.labels for s in want]
    for a, b in zip(got, want):
        torch.testing.assert_close(a.weights(), b.weights())
    assert probe_model(hf, [ids]).overall == probe_model(hf.model, [ids]).overall
    assert routing_map(hf, [ids]).heads == 4


def test_probe_rejects_models_without_routing():
    with pytest.raises(ValueError, match="no routing sites"):
        probe_model(Decoder(tiny_config("standard")), [torch.zeros(1, 4, dtype=torch.long)])


def test_zero_initialised_queries_agree_exactly(seeded):
    # every read is uniform: each slice's softmax equals the shared one; the matched-norm null is zero too
    r = probe_model(Decoder(tiny_config()), [torch.randint(0, 64, (2, 8))])
    assert r.kind == "slices"
    assert all(s.learned == 0 and s.null == 0 and s.excess == 0 for s in r.sites)


def test_collinear_sources_agree_exactly_for_any_query(seeded):
    # every source a positive multiple of one vector: the normalised keys coincide,
    # so every slice (and every random query) routes uniformly
    w = torch.randn(64)
    model = constructed_model(torch.tensor([1.0, 2.0, 0.5, 3.0, 1.5]).unsqueeze(1) * w)
    _randomise(model, std=2.0)
    r = probe_model(model, [torch.randint(0, 8, (2, 8))], draws=4)
    assert abs(r.overall["learned"]) < 1e-6 and abs(r.overall["excess"]) < 1e-6


def test_random_queries_give_about_zero_excess(seeded):
    # no learned structure: the query is itself an isotropic random vector, the null's distribution
    model = _randomise(Decoder(tiny_config(n_layers=4)), std=0.4).eval()
    r = probe_model(model, [torch.randint(0, 64, (4, 16))], draws=16)
    assert r.overall["null"] > 0.1
    assert abs(r.overall["excess"]) < 0.25 * r.overall["null"]


def _disagreeing_sources(d=256, slices=4, a=4.0):
    """Source 0 (embedding) and sources 1..4; slice s of the keys marks source s + 1
    (+a at the slice's first coordinate, -a elsewhere); all other coordinates are one
    shared vector, so sources differ only on the 4 marked coordinates. A random query
    of matched norm puts little weight on those coordinates (d = 256), so its slices
    barely separate the sources: the null is small."""
    w = d // slices
    common = torch.randn(d)
    srcs = common.repeat(slices + 1, 1)
    for i in range(slices + 1):
        for s in range(slices):
            srcs[i, s * w] = a if i == s + 1 else -a
    return srcs


def test_disagreeing_slices_give_a_large_excess(seeded):
    srcs = _disagreeing_sources()
    model = constructed_model(srcs)
    q = torch.zeros(256)
    q[::64] = 1.0  # each slice looks only at its marker coordinate
    with torch.no_grad():
        model.residual.queries.copy_(q.expand_as(model.residual.queries))
    r = probe_model(model, [torch.randint(0, 8, (1, 4))], draws=16)
    final = r.sites[-1]
    # each slice picks its own source (one-hot), the shared read spreads over sources 1..4: KL ~ log 4
    assert final.learned > 0.9 * math.log(4)
    assert final.excess > 1.0
    assert r.overall["excess"] > 0.5 and final.learned > 5 * final.null
    # the per-token score really is KL(slice || shared)
    from mhar.analysis.probe import normalised_keys
    site = capture_sites(model, torch.zeros(1, 1, dtype=torch.long))[-1]
    keys = normalised_keys(site.sources, site.norm_weight)
    z = torch.einsum("nsw,sw->sn", keys[0].view(5, 4, 64), q.view(4, 64))
    p_s, p = torch.softmax(z, -1), torch.softmax(z.sum(0), -1)
    expected = (p_s * (p_s.log() - p.log())).sum(-1).mean()
    torch.testing.assert_close(slice_disagreement(keys, q, 4)[0], expected)


def test_identical_heads_have_zero_deviation(seeded):
    # keys and query repeat across the heads' subspaces: every head routes identically
    base = torch.randn(5, 16)
    model = constructed_model(base.repeat(1, 4), heads=4)
    with torch.no_grad():
        model.residual.queries.copy_(torch.randn(16).repeat(4).expand_as(model.residual.queries))
    r = probe_model(model, [torch.randint(0, 8, (1, 4))], draws=8)
    assert r.kind == "heads"
    assert r.overall["learned"] < 1e-6
    assert r.overall["head_correlation"] > 0.999
    assert r.overall["null"] > 0.01 and r.overall["excess"] < 0


def test_disagreeing_heads_deviate(seeded):
    srcs = _disagreeing_sources()
    model = constructed_model(srcs, heads=4)
    q = torch.zeros(256)
    q[::64] = 1.0
    with torch.no_grad():
        model.residual.queries.copy_(q.expand_as(model.residual.queries))
    r = probe_model(model, [torch.randint(0, 8, (1, 4))], draws=8)
    assert r.sites[-1].learned > 0.9 * math.log(4) and r.sites[-1].excess > 0.5
    assert r.sites[-1].head_correlation < 0


def test_null_is_reproducible_and_seeded(seeded):
    model = _randomise(Decoder(tiny_config()), std=0.5).eval()
    ids = torch.randint(0, 64, (2, 8))
    a, b = probe_model(model, [ids], draws=3, seed=7), probe_model(model, [ids], draws=3, seed=7)
    c = probe_model(model, [ids], draws=3, seed=8)
    assert a.overall == b.overall
    assert a.overall["learned"] == c.overall["learned"] and a.overall["null"] != c.overall["null"]
    # batches are token-weighted: one batch of 2 equals two batches of 1
    split = probe_model(model, [ids[:1], ids[1:]], draws=3, seed=7)
    assert math.isclose(split.overall["learned"], a.overall["learned"], rel_tol=1e-5)
    assert math.isclose(split.overall["null"], a.overall["null"], rel_tol=1e-5)
