"""K5.1: stochastic binary quantization is K1 with mu = min, p = (x-min)/(max-min);
MSE = (1/n^2) sum (max - x)(x - min) <= d/(4n^2) sum (max - min)^2.

The exact enumeration weighs every support with p computed in the check from K5.1's rule (not
by the encoder), the supports the encoder's ``encode`` draws are compared with that law, and the
encoder's ``mse`` and ``mse_upper_bound`` with the formulas written out here.
"""

import numpy as np
import sympy as sp

from cvfl_theory import BinaryQuantizationEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, sampler_comparison, small_data
from .result import CheckResult, Comparison


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
    n, d = X.shape
    enc = BinaryQuantizationEncoder()
    lo, hi = X.min(axis=1, keepdims=True), X.max(axis=1, keepdims=True)
    law = (X - lo) / (hi - lo)  # K5.1's p_ij, computed here
    formula = float(((hi - X) * (X - lo)).sum() / n**2)
    bound = float(d * np.sum((hi - lo) ** 2) / (4 * n**2))
    exact = exact_moments(enc, X, inclusion=law)
    unbiased = float(np.abs(exact.mean_Y - X).max())
    return CheckResult(
        label="K5.1",
        claim="binary quantization: MSE = (1/n^2) sum (max-x)(x-min) <= d/(4n^2) sum (max-min)^2",
        method="sympy: (1/p-1)(x-min)^2 = (max-x)(x-min) and the bound gap is a square; "
        "exact enumeration with p = (x-min)/(max-min) computed in the check (a tie at the "
        "minimum); frequency test of encode()'s supports",
        symbolic=symbolic(),
        empirical=exact.mse,
        theoretical=formula,
        tolerance=roundoff(formula),
        comparisons=(
            Comparison("max |E Y - X| (unbiased)", unbiased, 0.0, roundoff(float(np.abs(X).max()))),
            Comparison("BinaryQuantizationEncoder.mse", enc.mse(X), formula, roundoff(formula)),
            Comparison("mse_upper_bound", enc.mse_upper_bound(X), bound, roundoff(bound)),
            Comparison("MSE <= bound", formula, bound, roundoff(bound), "<="),
            sampler_comparison(enc, X, law),
        ),
    )
