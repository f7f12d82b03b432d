"""K6: optimal probabilities for a bit budget — bits conversion, exact vs cvxpy, bounds, centres."""

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from cvfl_theory.encoders import IndependentEncoder
from cvfl_theory.optimal import (
    bits_from_budget,
    budget_from_bits,
    centre_step,
    low_budget_solution,
    mse_bounds,
    optimal_probabilities,
)
from cvfl_theory.protocols import SparseProtocol, VaryingLengthProtocol

EPS = np.finfo(np.float64).eps
PROTO = {"sparse": SparseProtocol, "varying-length": VaryingLengthProtocol}


def heavy(seed, n=4, d=25):
    rng = np.random.default_rng(seed)
    return rng.standard_t(2.5, size=(n, d))


# ---------------------------------------------------------------------------- bits <-> budget
@pytest.mark.parametrize("protocol", ["sparse", "varying-length"])
@pytest.mark.parametrize("mu", ["mean", "zero"])
@pytest.mark.parametrize("optimize_centres", [False, True])
def test_bits_match_protocol_expected_bits(protocol, mu, optimize_centres):
    X = heavy(0).astype(np.float32)
    n, d = X.shape
    fixed = bits_from_budget(0.0, n, d, protocol, 32, optimize_centres or mu != "zero")
    bits = fixed + 0.3 * (bits_from_budget(n * d, n, d, protocol) - fixed)
    res = optimal_probabilities(
        X, bits=bits, protocol=protocol, mu=mu, optimize_centres=optimize_centres, max_iter=5
    )
    enc = res.encoder()
    k3 = PROTO[protocol](r=32).expected_bits(enc, X)
    assert res.expected_bits == pytest.approx(k3, rel=1e-12)
    assert k3 == pytest.approx(bits, rel=1e-9)  # the budget is spent exactly
    assert enc.mse(X) == pytest.approx(res.mse, rel=1e-12)


def test_budget_from_bits_formulas():
    # sparse: (C - n r_bar) / (ceil(log2 d) + r); varying: (C - n (r_bar + d)) / r
    assert budget_from_bits(1000, 2, 16, "sparse", 32) == (1000 - 64) / 36
    assert budget_from_bits(1000, 2, 16, "sparse", 32, centre_sent=False) == 1000 / 36
    assert budget_from_bits(1000, 2, 16, "varying-length", 32) == (1000 - 2 * 48) / 32
    assert budget_from_bits(100, 1, 1, "sparse", 16) == (100 - 16) / 16  # log2(1) = 0


@pytest.mark.parametrize("protocol, fixed", [("sparse", 4 * 32), ("varying-length", 4 * 57)])
def test_infeasible_bits_refused_with_minimum(protocol, fixed):
    X = heavy(1, n=4, d=25)
    with pytest.raises(ValueError, match=f"bits > {fixed}"):
        optimal_probabilities(X, bits=fixed, protocol=protocol)
    optimal_probabilities(X, bits=fixed + 1, protocol=protocol)  # just feasible


# ---------------------------------------------------------------------------- exact vs cvxpy
def _sandwich(exact, cvx, X):
    """Weak duality: cvxpy's dual bound <= OPT = exact <= objective of cvxpy's feasible p."""
    slack = 1e-12 * abs(exact.objective)  # a few ulps of the sums involved
    assert cvx.lower_bound <= exact.objective + slack
    assert exact.objective <= cvx.objective + slack
    # Clarabel's default relative gap tolerance is 1e-8 on its objective sum(a^2/p) (the constant
    # sum(a^2) included); allow 100x for the clipped/rescaled primal point
    model_objective = cvx.objective + float(np.sum((X - np.asarray(exact.mu)[:, None]) ** 2))
    assert (cvx.objective - cvx.lower_bound) <= 1e-6 * model_objective


@pytest.mark.parametrize("seed", range(4))
def test_exact_matches_cvxpy_global(seed):
    X = heavy(seed)
    budget = [3.0, 20.0, 60.0, 95.0][seed]
    exact = optimal_probabilities(X, budget)
    cvx = optimal_probabilities(X, budget, method="cvxpy")
    assert exact.certified()
    _sandwich(exact, cvx, X)
    np.testing.assert_allclose(cvx.p, exact.p, atol=1e-3)


def test_exact_matches_cvxpy_per_node_and_caps():
    X = heavy(5)
    B_i = np.array([2.0, 5.0, 10.0, 24.0])
    caps = np.random.default_rng(1).uniform(0.3, 1.0, X.shape)
    exact = optimal_probabilities(X, per_node_budget=B_i, caps=caps)
    cvx = optimal_probabilities(X, per_node_budget=B_i, caps=caps, method="cvxpy")
    assert exact.certified()
    assert np.all(np.asarray(exact.p) <= caps)
    _sandwich(exact, cvx, X)
    rows = np.asarray(exact.p).sum(axis=1)
    np.testing.assert_allclose(
        rows, np.minimum(B_i, (caps * (np.abs(X - X.mean(1, keepdims=True)) > 0)).sum(1))
    )


def test_global_plus_per_node_needs_cvxpy():
    X = heavy(6)
    with pytest.raises(ValueError, match="cvxpy"):
        optimal_probabilities(X, 20.0, per_node_budget=6.0)
    both = optimal_probabilities(X, 20.0, per_node_budget=6.0, method="cvxpy")
    glob = optimal_probabilities(X, 20.0)
    node = optimal_probabilities(X, per_node_budget=6.0)
    assert np.asarray(both.p).sum() <= 20.0 + 1e-9
    assert np.all(np.asarray(both.p).sum(axis=1) <= 6.0 + 1e-9)
    # more constraints cannot help: OPT(both) >= max(OPT(global), OPT(per node))
    assert both.objective >= max(glob.objective, node.objective) * (1 - 1e-9)


def test_cvxpy_refuses_large_and_reports_solver_failure():
    X = heavy(7, n=10, d=100)
    with pytest.raises(ValueError, match="method='exact'"):
        optimal_probabilities(X, 10.0, method="cvxpy", max_cvxpy_size=500)
    with pytest.raises(RuntimeError, match="NOT_A_SOLVER"):
        optimal_probabilities(X[:2, :5], 2.0, method="cvxpy", solver="NOT_A_SOLVER")


# ---------------------------------------------------------------------------- bounds (K6.3/K6.4)
matrices = st.tuples(st.integers(1, 4), st.integers(1, 12)).flatmap(
    lambda s: arrays(
        np.float64,
        s,
        elements=st.one_of(
            st.just(0.0), st.floats(-1e3, 1e3, allow_subnormal=False), st.sampled_from([1.0, 2.0])
        ),
    )
)


@given(X=matrices, frac=st.floats(0.01, 1.2), mu=st.sampled_from(["mean", "zero", "min"]))
def test_bounds_sandwich_optimum(X, frac, mu):
    a = np.abs(X - IndependentEncoder(1.0, mu).centres(X)[:, None])
    s = int(np.count_nonzero(a))
    assume(s > 0)
    budget = frac * s
    res = optimal_probabilities(X, budget, mu=mu)
    b = mse_bounds(X, budget, mu=mu)
    scale = max(res.mse, 1e-300)
    tol = 1e-10 * max(scale, b.upper)
    assert b.lower <= res.mse + tol
    assert res.mse <= b.upper + tol
    if b.low_budget and not b.saturated:
        # K6.3: the lower bound is the optimum and the closed form is the solution
        assert res.low_budget
        assert res.mse == pytest.approx(b.lower, rel=1e-9, abs=1e-12 * b.upper)
        sol = low_budget_solution(X, budget, mu=mu)
        assert sol.applies
        np.testing.assert_allclose(sol.p, res.p, rtol=1e-12, atol=1e-15)


def test_saturated_budget():
    X = heavy(8)
    res = optimal_probabilities(X, budget=X.size + 5)
    assert res.saturated and res.mse == 0.0 and "saturated" in res.solver_status
    assert res.encoder().mse(X) == 0.0
    b = mse_bounds(X, X.size)
    assert b.saturated and b.lower == b.upper == 0.0


# ---------------------------------------------------------------------------- centres (K6.5)
@given(
    X=matrices,
    frac=st.floats(0.02, 0.9),
    mu=st.sampled_from(["mean", "zero", "min"]),
)
def test_alternating_minimisation_monotone(X, frac, mu):
    a = np.abs(X - IndependentEncoder(1.0, mu).centres(X)[:, None])
    s = int(np.count_nonzero(a))
    assume(s > 0)
    res = optimal_probabilities(X, frac * s, mu=mu, optimize_centres=True, max_iter=20)
    h = res.history
    assert all(h[k + 1] <= h[k] for k in range(len(h) - 1)), h
    assert res.certified(1e-9)
    # the reported MSE is that of the returned encoder (centres included)
    assert res.encoder().mse(X) == pytest.approx(res.mse, rel=1e-9, abs=1e-300)


def test_alternating_minimisation_improves_and_stops():
    X = heavy(9, n=5, d=40) + np.array([[0.0], [3.0], [-2.0], [10.0], [1.0]])
    res = optimal_probabilities(X, 30.0, optimize_centres=True, rtol=1e-4, max_iter=200)
    assert res.converged and res.iterations < 200
    assert res.history[-1] < res.history[0]
    fixed = optimal_probabilities(X, 30.0)
    assert res.mse <= fixed.mse


def test_naive_centre_step_can_increase_objective_but_ours_cannot():
    """Why entries with p = 0 pin the centre (see centre_step): a counterexample.

    X = (0, 0, 3), mu = 0, B = 1/2: S = {3}, p = (0, 0, 1/2), objective (2 - 1) 9 = 9. The K6.5
    formula with p = 1 off S (weights 0, 0, 1) moves mu to 3; then S = {0, 0} and the best p for
    B = 1/2 is (1/4, 1/4, 0) with objective 2 (4 - 1) 9 = 54 > 9.
    """
    X = np.array([[0.0, 0.0, 3.0]])
    start = optimal_probabilities(X, 0.5, mu="zero")
    assert start.objective == pytest.approx(9.0)
    naive = optimal_probabilities(X, 0.5, mu=np.array([3.0]))
    assert naive.objective == pytest.approx(54.0)
    assert centre_step(X, start.p, np.array([0.0]))[0] == 0.0  # pinned
    res = optimal_probabilities(X, 0.5, mu="zero", optimize_centres=True)
    assert res.objective == pytest.approx(9.0)


def test_centre_step_weighted_mean():
    X = np.array([[0.0, 1.0, 5.0], [2.0, 4.0, 6.0]])
    p = np.array([[0.5, 0.5, 1.0], [0.25, 0.5, 0.5]])  # w = (1, 1, 0), (3, 1, 1)
    mu = centre_step(X, p, np.array([2.0, 4.0]))
    np.testing.assert_allclose(mu, [0.5, (6 + 4 + 6) / 5])


# ---------------------------------------------------------------------------- Monte Carlo
@pytest.mark.parametrize("optimize_centres", [False, True])
def test_monte_carlo_mse_within_5_se(optimize_centres):
    X = heavy(10, n=4, d=20)
    res = optimal_probabilities(X, 20.0, optimize_centres=optimize_centres, max_iter=10)
    enc = res.encoder()
    gen = np.random.default_rng(2024)
    xbar = X.mean(axis=0)
    trials = 3000
    err = np.empty(trials)
    for t in range(trials):
        avg = np.asarray(enc.average(enc.encode(X, rng=gen)), dtype=np.float64)
        err[t] = np.sum((avg - xbar) ** 2)
    se = err.std(ddof=1) / math.sqrt(trials)
    assert abs(err.mean() - res.mse) <= 5 * se, (err.mean(), res.mse, se)


# ---------------------------------------------------------------------------- backends, bad input
def test_torch_in_torch_out(backend):
    X = heavy(11)
    res = optimal_probabilities(backend(X), 20.0)
    ref = optimal_probabilities(X, 20.0)
    assert type(res.p) is type(backend(X))
    np.testing.assert_array_equal(np.asarray(res.p), ref.p)
    assert res.mse == ref.mse
    assert res.encoder().mse(backend(X)) == pytest.approx(ref.mse, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(budget=0.0), ValueError, "budget"),
        (dict(budget=-3.0), ValueError, "budget"),
        (dict(budget=math.nan), ValueError, "budget"),
        (dict(), ValueError, "give a budget"),
        (dict(budget=3.0, bits=1e4), ValueError, "not both"),
        (dict(budget=3.0, protocol="naive"), ValueError, "protocol"),
        (dict(budget=3.0, method="newton"), ValueError, "method"),
        (dict(per_node_budget=[1.0, 2.0]), ValueError, "per_node_budget"),
        (dict(per_node_budget=[1.0, 2.0, 3.0, -1.0]), ValueError, "per_node_budget"),
        (dict(budget=3.0, mu="median"), ValueError, "mu"),
        (dict(budget=3.0, caps=1.5), ValueError, "caps"),
        (dict(budget=3.0, r=0), ValueError, "r "),
        (dict(budget=3.0, max_iter=0), ValueError, "max_iter"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        optimal_probabilities(heavy(12), **kwargs)


def test_bad_data():
    X = heavy(13)
    X[1, 2] = np.nan
    with pytest.raises(ValueError, match="finite"):
        optimal_probabilities(X, 3.0)
    with pytest.raises(ValueError, match="2-D"):
        optimal_probabilities(np.ones(5), 3.0)


@pytest.mark.parametrize("method", ["exact", "cvxpy"])
def test_alternating_minimisation_with_per_node_budgets_and_caps(method):
    X = heavy(14, n=3, d=15) + np.array([[1.0], [-4.0], [0.5]])
    caps = np.full(X.shape, 0.8)
    res = optimal_probabilities(
        X,
        per_node_budget=[3.0, 4.0, 5.0],
        caps=caps,
        optimize_centres=True,
        method=method,
        max_iter=8,
    )
    h = res.history
    assert all(h[k + 1] <= h[k] for k in range(len(h) - 1)), h
    P = np.asarray(res.p)
    assert np.all(P <= 0.8 + 1e-12)
    assert np.all(P.sum(axis=1) <= np.array([3.0, 4.0, 5.0]) * (1 + 1e-12))
    if method == "exact":
        assert res.certified()


def test_monte_carlo_bits_and_mse_with_entries_off_support():
    """Entries equal to the centre (p = 1 in the encoder) are never sent: K3 bits hold on average."""
    rng = np.random.default_rng(15)
    X = heavy(15, n=3, d=30) * (rng.random((3, 30)) < 0.6)  # ~40% exact zeros
    res = optimal_probabilities(X, bits=1500.0, mu="zero", protocol="sparse")
    proto = SparseProtocol(r=64)  # float64 data: r = 64 on the wire
    res64 = optimal_probabilities(X, bits=1500.0, mu="zero", protocol="sparse", r=64)
    enc = res64.encoder()
    gen = np.random.default_rng(99)
    trials = 2000
    bits = np.empty(trials)
    err = np.empty(trials)
    xbar = X.mean(axis=0)
    for t in range(trials):
        e = enc.encode(X, rng=gen)
        bits[t] = proto.payload_bits(e).sum()
        err[t] = np.sum((np.asarray(enc.average(e)) - xbar) ** 2)
    for sample, target in ((bits, res64.expected_bits), (err, res64.mse)):
        se = sample.std(ddof=1) / math.sqrt(trials)
        assert abs(sample.mean() - target) <= 5 * se, (sample.mean(), target, se)
    assert res64.expected_bits == pytest.approx(1500.0)
    assert res.expected_bits == pytest.approx(1500.0)
