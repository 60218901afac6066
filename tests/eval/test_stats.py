import math

import numpy as np
import pytest

from mhar.eval.stats import (binom_two_sided_half, mcnemar_exact, paired_bootstrap, paired_tail_mean,
                             tail_mean)

scipy_stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("k,n", [(0, 0), (0, 5), (3, 10), (7, 10), (12, 40), (20, 40), (1, 1)])
def test_exact_binomial_matches_scipy(k, n):
    ref = 1.0 if n == 0 else scipy_stats.binomtest(k, n, 0.5).pvalue
    assert binom_two_sided_half(k, n) == pytest.approx(ref, rel=1e-12)


def test_mcnemar_counts_and_pvalue():
    a = [1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0]
    b = [1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1]
    r = mcnemar_exact(a, b)
    # discordant: a wrong/b right at 2,3,5,8,9,11 (6); a right/b wrong at 1,7 (2)
    assert (r.n01, r.n10) == (6, 2)
    assert r.p_value == pytest.approx(scipy_stats.binomtest(2, 8, 0.5).pvalue)
    # hand value: 2 * (1 + 8 + 28) / 256
    assert r.p_value == pytest.approx(2 * 37 / 256)
    assert r.acc_a == pytest.approx(6 / 12) and r.acc_b == pytest.approx(10 / 12)


def test_mcnemar_identical_models_is_one():
    assert mcnemar_exact([1, 0, 1], [1, 0, 1]).p_value == 1.0


def test_paired_bootstrap_ci_matches_normal_theory():
    rng = np.random.default_rng(1)
    a = rng.normal(0, 1, 2000)
    b = a + rng.normal(0.1, 0.5, 2000)  # paired: shared noise cancels
    r = paired_bootstrap(a, b, n_boot=4000, seed=0)
    d = b - a
    se = d.std(ddof=1) / math.sqrt(len(d))
    assert r.diff == pytest.approx(d.mean())
    assert r.ci_low == pytest.approx(d.mean() - 1.96 * se, abs=0.25 * se)
    assert r.ci_high == pytest.approx(d.mean() + 1.96 * se, abs=0.25 * se)
    assert r.p_value < 0.001
    # deterministic given the seed
    assert paired_bootstrap(a, b, n_boot=4000, seed=0).ci_low == r.ci_low


def test_paired_bootstrap_no_difference():
    a = [0, 1, 1, 0, 1]
    r = paired_bootstrap(a, a, n_boot=500)
    assert r.diff == 0 and r.ci_low == 0 and r.ci_high == 0 and r.p_value == 1.0
    with pytest.raises(ValueError):
        paired_bootstrap([1, 2], [1])


def test_tail_mean_by_hand():
    vals = [5.0, 4.0, 3.0, 2.5, 2.0, 2.2, 1.8]
    t = tail_mean(vals, k=4)
    last = np.array([2.5, 2.0, 2.2, 1.8])
    assert t.k == 4 and t.mean == pytest.approx(2.125)
    assert t.stderr == pytest.approx(last.std(ddof=1) / 2)
    assert tail_mean(vals, k=100).k == len(vals)
    assert math.isnan(tail_mean([1.0], k=11).stderr)


def test_paired_tail_mean():
    a = [3.0, 2.9, 2.8, 2.7]
    b = [2.9, 2.85, 2.7, 2.66]
    t = paired_tail_mean(a, b, k=3)
    d = np.array([-0.05, -0.1, -0.04])
    assert t.mean == pytest.approx(d.mean()) and t.stderr == pytest.approx(d.std(ddof=1) / math.sqrt(3))
