"""The PEP of the Theorem 4.2 skeleton (cvfl_theory.pep, C4.6): closed forms, validation,
monotonicity, and the recovered bound against the exact worst case."""

import dataclasses
import math
import sys

import pytest

pytest.importorskip("PEPit")

from cvfl_theory.pep import (  # noqa: E402
    PEPResult,
    recovered_bound_skeleton,
    worst_case_skeleton,
    worst_case_without_error,
)

REL = 1e-3  # Clarabel's PEP values agree with the closed forms to ~4e-5 relative


def close(a, b, rel=REL):
    return abs(a - b) <= rel * abs(b)


@pytest.mark.parametrize("h, R", [(0.25, 3), (1.0, 4), (1.5, 2)])
def test_gradient_descent_closed_form(h, R):
    L, delta = 2.0, 0.5
    r = worst_case_skeleton(L=L, eta=h / L, Q=1, R=R, eps=0.0, delta=delta)
    assert r.status.startswith("optimal") and r.bounded
    assert close(r.value, 2 * L * delta / (R * h * (2 - h)))
    assert close(r.value, worst_case_without_error(L, h / L, 1, R, delta))
    assert r.gap is not None and abs(r.gap) <= REL * r.value
    # a closed form off by a factor 2 is detected
    assert not close(r.value, L * delta / (R * h * (2 - h)))


def test_stale_round_is_one_long_step():
    r = worst_case_skeleton(L=1.0, eta=0.1, Q=3, R=3, eps=0.0)
    assert close(r.value, worst_case_without_error(1.0, 0.1, 3, 3))
    assert close(r.value, 2 / (0.1 * 9 * (2 - 0.3)))


def test_min_metric_matches_the_literature_at_h_1():
    # Taylor 2017 (thesis p. 190), Abbaszadehpeivasti-de Klerk-Zamani 2022: 4 L Delta / (3 N)
    r = worst_case_skeleton(L=1.0, eta=1.0, Q=1, R=4, eps=0.0, metric="min")
    assert close(r.value, 4 / (3 * 4))


def test_one_error_per_round_equals_one_per_step():
    a = worst_case_skeleton(L=1.0, eta=0.1, Q=2, R=2, eps=0.3)
    b = worst_case_skeleton(L=1.0, eta=0.1, Q=2, R=2, eps=0.3, per_step_errors=True)
    assert close(a.value, b.value, 1e-4)


def test_worst_case_is_non_decreasing_in_eps_and_at_least_eps_squared():
    Q, R, eta = 2, 3, 1 / 32
    w0 = worst_case_without_error(1.0, eta, Q, R)
    values = [worst_case_skeleton(1.0, eta, Q, R, eps).value for eps in (0.0, 0.05, 0.2, 1.0, 3.0)]
    assert close(values[0], w0)
    assert all(b >= a * (1 - REL) for a, b in zip(values, values[1:]))
    # e_t = -grad f(x_0) keeps the iterates still: W >= max(W0, eps^2)
    for eps, v in zip((0.0, 0.05, 0.2, 1.0, 3.0), values):
        assert v >= max(w0, eps**2) * (1 - REL)


def test_divergent_step_is_unbounded():
    assert worst_case_without_error(1.0, 1.0, 2, 3) == math.inf
    r = worst_case_skeleton(L=1.0, eta=1.0, Q=2, R=3, eps=0.0)
    assert not r.bounded and r.value == math.inf and r.gap is None
    assert "unbounded" in r.status


@pytest.mark.parametrize("Q, R", [(1, 5), (2, 3), (5, 2)])
def test_recovered_bound_covers_the_worst_case_under_its_step_condition(Q, R):
    for eta in (1 / (16 * Q), 1 / (64 * Q)):  # eta <= 1/(16 Q L), L = 1
        for eps in (0.0, 0.1, 1.0):
            b = recovered_bound_skeleton(1.0, eta, Q, R, eps)
            w = worst_case_skeleton(1.0, eta, Q, R, eps)
            assert b.step_ok and b.variance == 0.0
            assert close(b.optimization, 4 / (eta * R * Q))
            assert close(b.compression, 92 * Q**2 * eps**2)
            assert b.total >= w.value, (Q, R, eta, eps, b.total, w.value)
            # and the needed eps^2 coefficient, given term 1, is at most 1 (recovered: 92 Q^2)
            assert w.value <= b.optimization + eps**2 + REL * w.value


def test_finding_beyond_the_step_condition():
    """Above eta = 1/(16 Q L) the bound still holds up to eta Q L = 3/2 (tight there at eps = 0:
    4/(eta T) = 2/(eta T (2 - 3/2))) and fails beyond: at eta Q L = 1.9, Q = 2, R = 3 the worst
    case is 20/(eta T) = 35.09 against the bound's 4/(eta T) = 7.02."""
    Q, R = 2, 3
    for h in (0.25, 1.0, 1.5):
        eta = h / Q
        b = recovered_bound_skeleton(1.0, eta, Q, R, 0.0)
        w = worst_case_skeleton(1.0, eta, Q, R, 0.0)
        assert not b.step_ok and b.total >= w.value * (1 - REL)
    eta = 1.9 / Q
    b = recovered_bound_skeleton(1.0, eta, Q, R, 0.0)
    w = worst_case_skeleton(1.0, eta, Q, R, 0.0)
    assert close(w.value, 20 / (eta * R * Q)) and close(b.total, 4 / (eta * R * Q))
    assert w.value > 4.9 * b.total


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"L": True}, TypeError, "L must be a real number"),
        ({"L": 0.0}, ValueError, r"L must be in \(0, inf\)"),
        ({"eta": "0.1"}, TypeError, "eta must be a real number"),
        ({"eta": math.nan}, ValueError, "eta must be in"),
        ({"Q": 2.0}, TypeError, r"Q must be an integer in \[1, 30\]"),
        ({"Q": 0}, ValueError, r"Q must be in \[1, 30\]"),
        ({"R": 31}, ValueError, r"R must be in \[1, 30\]"),
        ({"R": 7, "Q": 5}, ValueError, r"T = R \* Q must be in \[1, 30\], got R \* Q = 35"),
        ({"eps": -0.1}, ValueError, r"eps must be in \[0, inf\)"),
        ({"eps": math.inf}, ValueError, "eps must be in"),
        ({"delta": 0.0}, ValueError, r"delta must be in \(0, inf\)"),
        ({"metric": "max"}, ValueError, "metric must be one of"),
        ({"per_step_errors": 1}, TypeError, "per_step_errors must be True or False"),
        ({"solver": "MOSEK"}, ValueError, "solver must be one of"),
    ],
)
def test_arguments_are_validated(kwargs, error, match):
    args = {"L": 1.0, "eta": 0.1, "Q": 1, "R": 2, "eps": 0.0, **kwargs}
    with pytest.raises(error, match=match):
        worst_case_skeleton(**args)
    if not {"metric", "per_step_errors", "solver"} & set(kwargs):
        with pytest.raises(error, match=match):
            recovered_bound_skeleton(**args)


def test_result_is_frozen():
    r = worst_case_skeleton(L=1.0, eta=0.5, Q=1, R=1, eps=0.0)
    assert isinstance(r, PEPResult) and r.T == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.value = 0.0


def test_missing_pepit_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "PEPit", None)
    with pytest.raises(ImportError, match="pip install pepit"):
        worst_case_skeleton(L=1.0, eta=0.5, Q=1, R=1, eps=0.0)
