"""K4: the Section-5 examples (Table 1 of [KR]) from the formulas, the code and simulation."""

import sympy as sp

from cvfl_theory.section5 import table1

from .result import CheckResult


def symbolic() -> bool:
    """Substituting p = 1, 1/r, 1/d into C(p) and (1/p - 1) gives the table's rows."""
    n, d, r, rb, rs, p = sp.symbols("n d r rbar rs p", positive=True)
    cost = n * (rb + rs) + n * d * p * r
    mse = 1 / p - 1
    rows = [
        (1, n * (rb + rs) + n * d * r, 0),
        (1 / r, n * (rb + rs) + n * d, r - 1),
        (1 / d, n * (rb + rs) + n * r, d - 1),
    ]
    return all(
        sp.simplify(cost.subs(p, q) - c) == 0 and sp.simplify(mse.subs(p, q) - m) == 0
        for q, c, m in rows
    )


def check() -> CheckResult:
    t = table1(n=8, d=64, r=32, p_general=(0.25, 0.5), rng=0, trials=300)
    passed = sum(bool(v) for v in t.column("verdict"))
    return CheckResult(
        label="K4",
        claim="Table 1: C = n(r̄+r̄_s) + ndpr and MSE = (1/p-1)R/n for p = 1, 1/r, 1/d, general",
        method="sympy substitution; K4 formula vs K3/K1.2 code vs 300-trial simulation (5 SE) "
        "per row (n=8, d=64); empirical = rows agreeing",
        symbolic=symbolic(),
        empirical=float(passed),
        theoretical=float(len(t)),
        tolerance=0.0,
    )
