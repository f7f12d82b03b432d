"""K2.2 (Lemma 3.4 of [KR]): MSE = (1/n^2) sum_i (d/k_i - 1) ||X_i - mu_i 1||^2.

Exact enumeration over all k-subsets with the check's own weights 1/C(d, k), compared with the
formula written out in the check; the encoder's ``mse`` and its drawn supports are checked too.
"""

import itertools

import numpy as np
import sympy as sp

from cvfl_theory import FixedSizeEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import k12_formula, roundoff, sampler_comparison, small_data
from .result import CheckResult, Comparison


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


K = np.array([1, 3])


def check() -> CheckResult:
    X = small_data(2, 4)
    d = X.shape[1]
    enc = FixedSizeEncoder(K.copy(), mu="mean")
    law = np.repeat(K[:, None] / d, d, axis=1)
    # K2.2 written out: (1/n^2) sum_i (d/k_i - 1) ||X_i - mu_i||^2, mu_i the row mean
    closed = float(
        np.sum((d / K - 1) * np.sum((X - X.mean(axis=1, keepdims=True)) ** 2, axis=1))
        / X.shape[0] ** 2
    )
    return CheckResult(
        label="K2.2",
        claim="MSE = (1/n^2) sum_i (d/k_i - 1) ||X_i - mu_i 1||^2 (K1.2 with p = k/d)",
        method="sympy: all 3x3 joint subsets for k = (1, 2), d = 3; exact enumeration with "
        "weights 1/C(d,k) vs the formula written out; FixedSizeEncoder.mse; K1.2 with p = k/d; "
        "frequency test of encode()'s supports",
        symbolic=symbolic(),
        empirical=exact_moments(enc, X, inclusion=law).mse,
        theoretical=closed,
        tolerance=roundoff(closed),
        comparisons=(
            Comparison("FixedSizeEncoder.mse vs K2.2", enc.mse(X), closed, roundoff(closed)),
            Comparison(
                "K1.2 with p = k/d vs K2.2",
                k12_formula(X, law, X.mean(axis=1)),
                closed,
                roundoff(closed),
            ),
            sampler_comparison(enc, X, law),
        ),
    )
