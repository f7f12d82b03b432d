"""K6.3: if B max a <= sum a, nothing is capped, p = B a / sum a and MSE* = [(sum a)^2/B - sum a^2]/n^2.

Symbolic part: with p_j = B a_j / sum a, sympy simplifies sum (1/p_j - 1) a_j^2 to
(sum a)^2/B - sum a^2 (here for 4 entries), and a_j / p_j = sum(a)/B is the same for every entry
(stationarity with lambda = sum(a)/B). Numeric part: the water-filling of the toolkit on data in
the low-budget regime against the closed form.
"""

import numpy as np
import sympy as sp

from cvfl_theory.optimal import low_budget_solution, optimal_probabilities

from ._common import roundoff
from .result import CheckResult


def symbolic() -> bool:
    a = sp.symbols("a1:5", positive=True)
    B = sp.Symbol("B", positive=True)
    S = sum(a)
    p = [B * x / S for x in a]
    obj = sum((1 / q - 1) * x**2 for q, x in zip(p, a))
    closed = S**2 / B - sum(x**2 for x in a)
    level = {sp.simplify(x / q) for x, q in zip(a, p)}
    return bool(sp.simplify(obj - closed) == 0 and level == {S / B})


def check() -> CheckResult:
    rng = np.random.default_rng(63)
    X = rng.standard_t(3, size=(6, 30))
    a = np.abs(X - X.mean(axis=1, keepdims=True))
    budget = 0.9 * a.sum() / a.max()  # B max a <= sum a
    sol = low_budget_solution(X, budget)
    res = optimal_probabilities(X, budget)
    ok = sol.applies and res.low_budget and res.certified()
    return CheckResult(
        label="K6.3",
        claim="B max a <= sum a  =>  p = B a/sum a, MSE* = ((sum a)^2/B - sum a^2)/n^2",
        method="sympy: objective of p = B a/sum a and the common level a/p; water-filling on "
        "t(3) data (n=6, d=30) in the regime vs the closed form",
        symbolic=symbolic() and ok,
        empirical=res.mse,
        theoretical=sol.mse,
        tolerance=roundoff(sol.mse),
    )
