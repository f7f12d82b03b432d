"""C5.1: dithered scalar quantization error is U[-Delta/2, Delta/2], E err^2 = Delta^2/12.

Three independent pieces: (a) sympy derives Delta^2/12 and the 16/9 ratio to the published form;
(b) the check's own dithered quantizer (numpy, written here: levels lo + k Delta, dither
u ~ U[-Delta/2, Delta/2], output lo + k Delta - u) is simulated; (c) the package's
``ScalarQuantizer.expected_error`` and ``published_bound`` are evaluated for several bits, fixed
and min-max ranges and shapes, and compared with the simulation, with the law written out here,
and with the package compressor's own measured error (tolerances 5 SE of the samples).
"""

import numpy as np
import sympy as sp

from cvfl_theory.compressors import ScalarQuantizer

from ._common import Z_SE, mean_and_se, quantizer_comparisons, setting_data
from .result import CheckResult

#: (bits, range, (B, P)) settings; data are drawn inside a fixed range (no clipping).
SETTINGS = [
    (2, (-1.0, 1.0), (40, 50)),
    (1, (0.0, 3.0), (7, 13)),
    (4, "minmax-row", (20, 30)),
    (8, "minmax-tensor", (10, 25)),
]


def symbolic() -> tuple[bool, sp.Expr]:
    """E u^2 / Delta^2 for u uniform on [-Delta/2, Delta/2], and the 16/9 ratio at q = 2."""
    D, u, q = sp.symbols("Delta u q", positive=True)
    second = sp.integrate(u**2 / D, (u, -D / 2, D / 2))
    constant = sp.simplify(second / D**2)
    ratio = (1 / (2**q - 1) ** 2) / 2 ** (-2 * q)
    ok = sp.simplify(second - D**2 / 12) == 0 and sp.nsimplify(ratio.subs(q, 2)) == sp.Rational(
        16, 9
    )
    return bool(ok), constant


def own_dithered_scalar(
    x: np.ndarray, lo: np.ndarray, hi: np.ndarray, bits: int, trials: int, seed: int
) -> np.ndarray:
    """Per-trial total squared error of a dithered scalar quantizer written here (numpy)."""
    levels = 2**bits
    delta = (hi - lo) / (levels - 1)
    u = np.random.default_rng(seed).uniform(-0.5, 0.5, size=(trials, *x.shape)) * delta
    k = np.clip(np.floor((x + u - lo) / delta + 0.5), 0, levels - 1)
    y = lo + k * delta - u
    return np.sum((y - x) ** 2, axis=(1, 2))


def check(trials: int = 200) -> CheckResult:
    ok, constant = symbolic()
    comparisons = []
    main = None
    for s, (bits, rng_spec, shape) in enumerate(SETTINGS):
        x, lo, hi = setting_data(100 + s, rng_spec, shape)
        P = shape[1]
        own = own_dithered_scalar(x, lo, hi, bits, trials, seed=200 + s)
        spans2 = ((hi - lo) ** 2).ravel()
        exact = float(P * np.sum(spans2 / (2**bits - 1) ** 2) * float(constant))
        published = float(P * np.sum(spans2) * 2.0 ** (-2 * bits) / 12)
        quant = ScalarQuantizer(bits, range=rng_spec)
        comparisons += quantizer_comparisons(
            f"q={bits} {rng_spec} {shape}", quant, x, own, exact, published, trials, 300 + s
        )
        if main is None:  # the first setting, per component and in units of Delta^2
            delta2 = float(((hi[0, 0] - lo[0, 0]) / (2**bits - 1)) ** 2)
            main = mean_and_se(own / (x.size * delta2))
    assert main is not None
    return CheckResult(
        label="C5.1",
        claim="dithered scalar quantizer: E err^2 = Delta^2/12 per component, "
        "Delta = (h_max - h_min)/(2^q - 1), no overload",
        method="sympy integral of u^2 over [-Delta/2, Delta/2]; own numpy dithered quantizer "
        f"({trials} dithers) vs ScalarQuantizer.expected_error / published_bound / measured "
        f"error for q = 1, 2, 4, 8, fixed and min-max ranges; {Z_SE:g} SE",
        symbolic=ok,
        empirical=main[0],
        theoretical=float(constant),
        tolerance=Z_SE * main[1],
        note="with 2^q levels on [h_min, h_max] the step is (h_max-h_min)/(2^q-1), so the exact "
        "error B P (h_max-h_min)^2/(12 (2^q-1)^2) exceeds the published B P (h_max-h_min)^2 "
        "2^{-2q}/12 by (2^q/(2^q-1))^2 = 16/9 = 1.78 at q = 2",
        comparisons=tuple(comparisons),
    )
