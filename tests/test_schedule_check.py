"""The log-log slope fit, the schedule experiments' plumbing, and the C4.2-C4.4 proofs checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cvfl_sim.experiments.schedule_check import SlopeFit, fit_loglog_slope, rate_experiment


def test_noise_free_power_law_is_exact():
    T = np.array([10.0, 30.0, 100.0, 1000.0])
    f = fit_loglog_slope(T, 3.0 * T**-0.5)
    assert f.slope == pytest.approx(-0.5, abs=1e-12)
    assert math.exp(f.intercept) == pytest.approx(3.0, rel=1e-12)
    assert f.se == pytest.approx(0.0, abs=1e-12)


def test_ci_covers_the_true_slope_on_synthetic_data():
    """y = c T^(-1/2) * lognormal noise: one fixed draw is covered, and coverage is ~95%."""
    rng = np.random.default_rng(7)
    T = np.repeat([50, 100, 200, 500, 1000, 2000], 4).astype(float)

    def draw() -> SlopeFit:
        return fit_loglog_slope(T, 0.7 * T**-0.5 * np.exp(rng.normal(0.0, 0.2, T.size)))

    assert draw().contains(-0.5)
    n = 400
    covered = sum(draw().contains(-0.5) for _ in range(n))
    # binomial(n, 0.95): mean 380, SE sqrt(n 0.95 0.05) = 4.36; allow 5 SE either side
    se = math.sqrt(n * 0.95 * 0.05)
    assert abs(covered - 0.95 * n) <= 5 * se


def test_ci_excludes_a_wrong_slope():
    rng = np.random.default_rng(8)
    T = np.repeat([50, 200, 1000, 2000], 3).astype(float)
    f = fit_loglog_slope(T, T**-1.0 * np.exp(rng.normal(0.0, 0.05, T.size)))
    # the truth is -1 (se ~ 0.01 here): -1/2 lies dozens of standard errors away
    assert not f.contains(-0.5)
    assert f.high < -0.8


@pytest.mark.parametrize(
    ("T", "y", "match"),
    [
        ([1, 2], [1.0, 2.0], "length >= 3"),
        ([1, 2, 3], [1.0, -2.0, 1.0], "> 0"),
        ([5, 5, 5], [1.0, 2.0, 3.0], "two distinct"),
    ],
)
def test_bad_input_is_refused(T, y, match):
    with pytest.raises(ValueError, match=match):
        fit_loglog_slope(T, y)


def test_rate_experiment_uses_the_c5_schedule():
    from cvfl_theory.bounds import c5_parameters

    res = rate_experiment(Ts=(8, 16, 32), seeds=(0,))
    assert [r["T"] for r in res.rows] == [8, 16, 32]
    for r in res.rows:
        assert r["eta"] == pytest.approx(1.0 / math.sqrt(r["T"]))
        assert r["bits"] == c5_parameters(r["T"], 57, 4).q_min
        assert r["avg_grad_norm_sq"] > 0
    with pytest.raises(ValueError, match="multiple of"):
        rate_experiment(Ts=(10, 20, 30), seeds=(0,))


def test_c4_2_check_passes_and_a_bound_100x_smaller_fails():
    from proofs_checks.c4_2_theorem_runs import compute, run_check

    runs = compute()
    assert run_check(1.0, runs).passed
    assert not run_check(0.01, runs).passed
