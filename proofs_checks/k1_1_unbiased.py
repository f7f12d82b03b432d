"""K1.1 (Lemma 3.1 of [KR]): the independent-support encoder is unbiased, E Y_i = X_i.

The expectation is an exact sum over all 2^(nd) supports weighted by the check's own p (not by
the encoder's ``marginals``), of the messages the encoder builds for each support; the supports
the encoder's ``encode`` actually draws are compared with the same law by a frequency test.
"""

import numpy as np
import sympy as sp

from cvfl_theory import IndependentEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, sampler_comparison, small_data
from .result import CheckResult

P = np.array([[0.2, 0.5, 1.0], [0.7, 0.1, 0.4]])


def symbolic() -> bool:
    x, mu = sp.symbols("x mu", real=True)
    p = sp.symbols("p", positive=True)
    expectation = p * (mu + (x - mu) / p) + (1 - p) * mu
    return sp.simplify(expectation - x) == 0


def check() -> CheckResult:
    X = small_data(2, 3)
    enc = IndependentEncoder(P.copy(), mu="mean")
    m = exact_moments(enc, X, inclusion=P)
    worst = float(np.abs(m.mean_Y - X).max())
    return CheckResult(
        label="K1.1",
        claim="E Y_i(j) = X_i(j) for every p_ij in (0,1] and centre mu_i",
        method="sympy: p(mu+(x-mu)/p)+(1-p)mu-x = 0; exact enumeration of all 2^6 supports "
        "weighted by the given p; frequency test of encode()'s supports (binomial SE)",
        symbolic=symbolic(),
        empirical=worst,
        theoretical=0.0,
        tolerance=roundoff(float(np.abs(X).max())),
        comparisons=(sampler_comparison(enc, X, P),),
    )
