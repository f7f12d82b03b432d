"""K1.2 (Lemma 3.2 of [KR]): MSE = (1/n^2) sum_ij (1/p_ij - 1)(X_i(j) - mu_i)^2.

The exact MSE sums over all supports weighted by the check's own p, and is compared with K1.2
written out in the check (own p, own centres); the encoder's ``mse`` and the supports its
``encode`` draws are checked against the same values.
"""

import itertools

import numpy as np
import sympy as sp

from cvfl_theory import IndependentEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import k12_formula, roundoff, sampler_comparison, small_data
from .result import CheckResult, Comparison

P = np.array([[0.2, 0.5, 1.0], [0.7, 0.1, 0.4]])


def symbolic(n: int = 2, d: int = 2) -> bool:
    """Enumerate all 2^(nd) supports with symbolic x_ij, p_ij, mu_i and compare with K1.2."""
    x = sp.Matrix(n, d, lambda i, j: sp.Symbol(f"x{i}{j}", real=True))
    p = sp.Matrix(n, d, lambda i, j: sp.Symbol(f"p{i}{j}", positive=True))
    mu = [sp.Symbol(f"mu{i}", real=True) for i in range(n)]
    xbar = [sum(x[i, j] for i in range(n)) / n for j in range(d)]
    mse = 0
    for mask in itertools.product((0, 1), repeat=n * d):
        prob, err = 1, 0
        for j in range(d):
            avg = 0
            for i in range(n):
                sel = mask[i * d + j]
                prob *= p[i, j] if sel else 1 - p[i, j]
                avg += (mu[i] + (x[i, j] - mu[i]) / p[i, j]) if sel else mu[i]
            err += (avg / n - xbar[j]) ** 2
        mse += prob * err
    formula = (
        sum((1 / p[i, j] - 1) * (x[i, j] - mu[i]) ** 2 for i in range(n) for j in range(d)) / n**2
    )
    return sp.simplify(sp.expand(mse - formula)) == 0


def check() -> CheckResult:
    X = small_data(2, 3)
    enc = IndependentEncoder(P.copy(), mu="mean")
    closed = k12_formula(X, P, X.mean(axis=1))
    m = exact_moments(enc, X, inclusion=P)
    return CheckResult(
        label="K1.2",
        claim="MSE = (1/n^2) sum_ij (1/p_ij - 1)(X_i(j) - mu_i)^2",
        method="sympy: all 16 supports of n=d=2 with symbolic x, p, mu; exact enumeration "
        "(2^6 supports, weights from the given p) of the encoder's own messages vs K1.2 written "
        "out; IndependentEncoder.mse vs K1.2; frequency test of encode()'s supports",
        symbolic=symbolic(),
        empirical=m.mse,
        theoretical=closed,
        tolerance=roundoff(closed),
        comparisons=(
            Comparison("IndependentEncoder.mse vs K1.2", enc.mse(X), closed, roundoff(closed)),
            sampler_comparison(enc, X, P),
        ),
    )
