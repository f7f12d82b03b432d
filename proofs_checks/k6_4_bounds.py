"""K6.4: [(sum a)^2/B - sum a^2]/n^2 <= MSE*(B) <= (|S|/B - 1) sum a^2 / n^2 for 0 < B < |S|.

Symbolic part: Lagrange's identity (sum a^2/p)(sum p) - (sum a)^2 = sum_{i<j} (a_i p_j - a_j p_i)^2
/(p_i p_j) >= 0 (Cauchy-Schwarz, checked by sympy for 3 entries) gives sum a^2/p >= (sum a)^2/B
for every feasible p with the cap dropped — the lower bound; the uniform p = B/|S| is feasible
and its objective simplifies to (|S|/B - 1) sum a^2 — the upper bound. Numeric part: on many
random problems, the worst ratio of (lower bound / exact optimum) and (exact optimum / upper
bound) is at most 1; the lower bound is attained in the K6.3 regime.
"""

import itertools

import numpy as np
import sympy as sp

from cvfl_theory.optimal import mse_bounds, optimal_probabilities

from ._common import roundoff
from .result import CheckResult


def symbolic() -> bool:
    a = sp.symbols("a1:4", positive=True)
    p = sp.symbols("p1:4", positive=True)
    lhs = sum(x**2 / q for x, q in zip(a, p)) * sum(p) - sum(a) ** 2
    rhs = sum(
        (a[i] * p[j] - a[j] * p[i]) ** 2 / (p[i] * p[j])
        for i, j in itertools.combinations(range(3), 2)
    )
    B, s = sp.symbols("B S", positive=True)
    A2 = sp.Symbol("A2", positive=True)  # sum a^2
    uniform = (1 / (B / s) - 1) * A2
    return bool(sp.simplify(lhs - rhs) == 0 and sp.simplify(uniform - (s / B - 1) * A2) == 0)


def check() -> CheckResult:
    rng = np.random.default_rng(64)
    worst = 0.0
    tight = 0.0
    for _ in range(200):
        n, d = rng.integers(1, 5), rng.integers(2, 40)
        X = rng.standard_t(2.5, size=(n, d))
        budget = rng.uniform(0.01, 0.99) * n * d
        res = optimal_probabilities(X, budget)
        b = mse_bounds(X, budget)
        worst = max(worst, b.lower / res.mse, res.mse / b.upper)
        if b.low_budget:
            tight = max(tight, abs(b.lower - res.mse) / res.mse)
    return CheckResult(
        label="K6.4",
        claim="lower (cap dropped, Cauchy-Schwarz) <= MSE*(B) <= upper (uniform p = B/|S|)",
        method="sympy Lagrange identity + uniform objective; 200 random t(2.5) problems, exact "
        "optimum by certified water-filling",
        symbolic=symbolic() and tight <= roundoff(1.0),
        empirical=worst,
        theoretical=1.0,
        tolerance=roundoff(1.0),
        relation="<=",
        note=f"empirical = worst of lower/MSE* and MSE*/upper; in the K6.3 regime "
        f"|lower - MSE*|/MSE* <= {tight:.2g}",
    )
