"""K1.1 (Lemma 3.1 of [KR]): the independent-support encoder is unbiased, E Y_i = X_i."""

import numpy as np
import sympy as sp

from cvfl_theory import IndependentEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, small_data
from .result import CheckResult


def symbolic() -> bool:
    x, mu = sp.symbols("x mu", real=True)
    p = sp.symbols("p", positive=True)
    expectation = p * (mu + (x - mu) / p) + (1 - p) * mu
    return sp.simplify(expectation - x) == 0


def check() -> CheckResult:
    X = small_data(2, 3)
    p = np.array([[0.2, 0.5, 1.0], [0.7, 0.1, 0.4]])
    m = exact_moments(IndependentEncoder(p, mu="mean"), X)
    worst = float(np.abs(m.mean_Y - X).max())
    return CheckResult(
        label="K1.1",
        claim="E Y_i(j) = X_i(j) for every p_ij in (0,1] and centre mu_i",
        method="sympy: p(mu+(x-mu)/p)+(1-p)mu-x = 0; exact enumeration of all 2^6 supports",
        symbolic=symbolic(),
        empirical=worst,
        theoretical=0.0,
        tolerance=roundoff(float(np.abs(X).max())),
    )
