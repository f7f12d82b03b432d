"""C5.1: dithered scalar quantization error is U[-Delta/2, Delta/2], E err^2 = Delta^2/12."""

import math

import numpy as np
import sympy as sp

from cvfl_theory.compressors import ScalarQuantizer

from .result import CheckResult


def check() -> CheckResult:
    # symbolic: E u^2 for u uniform on [-D/2, D/2]; the level-count ratio at q = 2
    D, u, q = sp.symbols("Delta u q", positive=True)
    second = sp.integrate(u**2 / D, (u, -D / 2, D / 2))
    ratio = (1 / (2**q - 1) ** 2) / 2 ** (-2 * q)
    symbolic = sp.simplify(second - D**2 / 12) == 0 and sp.nsimplify(
        ratio.subs(q, 2)
    ) == sp.Rational(16, 9)

    # numeric: Monte Carlo of the implementation, per-component squared error / Delta^2
    bits, lo, hi = 2, -1.0, 1.0
    quant = ScalarQuantizer(bits, range=(lo, hi))
    delta = (hi - lo) / (2**bits - 1)
    x = np.random.default_rng(2024).uniform(lo, hi, size=(50, 200))
    gen = np.random.default_rng(7)
    per_trial = np.array(
        [np.mean((quant.roundtrip(x, rng=gen) - x) ** 2) / delta**2 for _ in range(200)]
    )
    se = per_trial.std(ddof=1) / math.sqrt(per_trial.size)
    return CheckResult(
        label="C5.1",
        claim="dithered scalar quantizer: E err^2 = Delta^2/12 per component, "
        "Delta = (h_max - h_min)/(2^q - 1), no overload",
        method="sympy integral of u^2 over [-Delta/2, Delta/2]; Monte Carlo of "
        "ScalarQuantizer(2, (-1, 1)) on 10^4 components x 200 dithers, 5 SE",
        symbolic=bool(symbolic),
        empirical=float(per_trial.mean()),
        theoretical=1 / 12,
        tolerance=5 * se,
        note="with 2^q levels on [h_min, h_max] the step is (h_max-h_min)/(2^q-1), so the exact "
        "error B P (h_max-h_min)^2/(12 (2^q-1)^2) exceeds the published B P (h_max-h_min)^2 "
        "2^{-2q}/12 by (2^q/(2^q-1))^2 = 16/9 = 1.78 at q = 2",
    )
