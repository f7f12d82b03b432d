"""K2.1 (Lemma 3.3 of [KR]): the fixed-size (k-subset) encoder is unbiased."""

import itertools

import numpy as np
import sympy as sp

from cvfl_theory import FixedSizeEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, small_data
from .result import CheckResult


def symbolic(d: int = 4, k: int = 2) -> bool:
    x = sp.symbols(f"x0:{d}", real=True)
    mu = sp.Symbol("mu", real=True)
    subsets = list(itertools.combinations(range(d), k))
    mean = [
        sum((mu + sp.Rational(d, k) * (x[j] - mu)) if j in s else mu for s in subsets)
        / len(subsets)
        for j in range(d)
    ]
    return all(sp.simplify(mean[j] - x[j]) == 0 for j in range(d))


def check() -> CheckResult:
    X = small_data(2, 4)
    m = exact_moments(FixedSizeEncoder(np.array([1, 3]), mu="mean"), X)
    return CheckResult(
        label="K2.1",
        claim="E Y_i = X_i for a uniformly random k-subset scaled by d/k",
        method="sympy: average over all C(4,2) subsets; exact enumeration (k = 1 and 3, d = 4)",
        symbolic=symbolic(),
        empirical=float(np.abs(m.mean_Y - X).max()),
        theoretical=0.0,
        tolerance=roundoff(float(np.abs(X).max())),
    )
