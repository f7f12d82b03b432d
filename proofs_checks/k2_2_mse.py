"""K2.2 (Lemma 3.4 of [KR]): MSE = (1/n^2) sum_i (d/k_i - 1) ||X_i - mu_i 1||^2."""

import itertools

import numpy as np
import sympy as sp

from cvfl_theory import FixedSizeEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, small_data
from .result import CheckResult


def symbolic(d: int = 3, ks: tuple[int, ...] = (1, 2)) -> bool:
    """Two nodes with k = 1 and 2 of d = 3: enumerate all joint subsets symbolically."""
    n = len(ks)
    x = [sp.symbols(f"x{i}_0:{d}", real=True) for i in range(n)]
    mu = sp.symbols(f"mu0:{n}", real=True)
    choices = [list(itertools.combinations(range(d), k)) for k in ks]
    mse = 0
    for combo in itertools.product(*choices):
        prob = sp.Mul(*[sp.Rational(1, len(c)) for c in choices])
        err = 0
        for j in range(d):
            avg = sum(
                (mu[i] + sp.Rational(d, ks[i]) * (x[i][j] - mu[i])) if j in combo[i] else mu[i]
                for i in range(n)
            )
            err += (avg / n - sum(x[i][j] for i in range(n)) / n) ** 2
        mse += prob * err
    formula = (
        sum(
            (sp.Rational(d, ks[i]) - 1) * sum((x[i][j] - mu[i]) ** 2 for j in range(d))
            for i in range(n)
        )
        / n**2
    )
    return sp.expand(mse - formula) == 0


def check() -> CheckResult:
    X = small_data(2, 4)
    enc = FixedSizeEncoder(np.array([1, 3]), mu="mean")
    closed = enc.mse(X)
    return CheckResult(
        label="K2.2",
        claim="MSE = (1/n^2) sum_i (d/k_i - 1) ||X_i - mu_i 1||^2 (K1.2 with p = k/d)",
        method="sympy: all 3x3 joint subsets for k = (1, 2), d = 3; exact enumeration",
        symbolic=symbolic(),
        empirical=exact_moments(enc, X).mse,
        theoretical=closed,
        tolerance=roundoff(closed),
    )
