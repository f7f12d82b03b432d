"""K5.1: stochastic binary quantization is K1 with mu = min, p = (x-min)/(max-min);
MSE = (1/n^2) sum (max - x)(x - min) <= d/(4n^2) sum (max - min)^2."""

import numpy as np
import sympy as sp

from cvfl_theory import BinaryQuantizationEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, small_data
from .result import CheckResult


def symbolic() -> bool:
    x, lo = sp.symbols("x lo", real=True)
    width = sp.Symbol("w", positive=True)  # max - min
    hi = lo + width
    p = (x - lo) / width
    variance = (1 / p - 1) * (x - lo) ** 2
    exact = sp.simplify(variance - (hi - x) * (x - lo)) == 0
    # (max-min)^2/4 - (max-x)(x-min) = (x - (max+min)/2)^2 >= 0
    gap = sp.expand(width**2 / 4 - (hi - x) * (x - lo) - (x - (hi + lo) / 2) ** 2)
    return exact and gap == 0


def check() -> CheckResult:
    X = small_data(2, 4)
    X[0, 1] = X[0].min()  # a tie with the minimum: p = 0, sent exactly
    enc = BinaryQuantizationEncoder()
    lo, hi = X.min(axis=1, keepdims=True), X.max(axis=1, keepdims=True)
    formula = float(((hi - X) * (X - lo)).sum() / X.shape[0] ** 2)
    exact = exact_moments(enc, X)
    ok_bound = enc.mse(X) <= enc.mse_upper_bound(X) + roundoff(formula)
    unbiased = np.abs(exact.mean_Y - X).max() <= roundoff(float(np.abs(X).max()))
    return CheckResult(
        label="K5.1",
        claim="binary quantization: MSE = (1/n^2) sum (max-x)(x-min) <= d/(4n^2) sum (max-min)^2",
        method="sympy: (1/p-1)(x-min)^2 = (max-x)(x-min) and the bound gap is a square; "
        "exact enumeration of the encoder's messages (with a tie at the minimum)",
        symbolic=symbolic() and bool(ok_bound) and bool(unbiased),
        empirical=exact.mse,
        theoretical=formula,
        tolerance=roundoff(formula),
    )
