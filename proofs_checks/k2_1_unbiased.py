"""K2.1 (Lemma 3.3 of [KR]): the fixed-size (k-subset) encoder is unbiased.

The expectation is an exact sum over all k-subsets, each of probability 1/C(d, k) for the check's
own k; the supports the encoder's ``encode`` draws are compared with that law by a frequency
test (every subset, every entry, every support size).
"""

import itertools

import numpy as np
import sympy as sp

from cvfl_theory import FixedSizeEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, sampler_comparison, small_data
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


K = np.array([1, 3])


def check() -> CheckResult:
    X = small_data(2, 4)
    enc = FixedSizeEncoder(K.copy(), mu="mean")
    law = np.repeat(K[:, None] / X.shape[1], X.shape[1], axis=1)
    m = exact_moments(enc, X, inclusion=law)
    return CheckResult(
        label="K2.1",
        claim="E Y_i = X_i for a uniformly random k-subset scaled by d/k",
        method="sympy: average over all C(4,2) subsets; exact enumeration (k = 1 and 3, d = 4, "
        "weights 1/C(d,k) from the given k); frequency test of encode()'s supports",
        symbolic=symbolic(),
        empirical=float(np.abs(m.mean_Y - X).max()),
        theoretical=0.0,
        tolerance=roundoff(float(np.abs(X).max())),
        comparisons=(sampler_comparison(enc, X, law),),
    )
