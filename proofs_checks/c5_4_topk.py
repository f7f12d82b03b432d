"""C5.4: top-k error = sum of dropped squares <= (1 - k/P) ||h||^2.

The dropped energy is computed in the check (sort of the squares), independently of the
compressor, and compared with ``TopK``'s measured error, its ``expected_error`` and its
``published_bound`` (the paper's B (1 - k/P) max ||h||^2, written out here).
"""

import itertools

import numpy as np
import sympy as sp

from cvfl_theory.compressors import TopK

from .result import CheckResult, Comparison


def check() -> CheckResult:
    # symbolic: with dropped sum s (P-k values, each <= m) and kept sum t (k values, each >= m),
    # (P-k)(s+t) - P s = (P-k)(t - k m) + k((P-k) m - s), a sum of two non-negative terms.
    P, k, s, t, m = sp.symbols("P k s t m")
    symbolic = (
        sp.expand((P - k) * (s + t) - P * s - ((P - k) * (t - k * m) + k * ((P - k) * m - s))) == 0
    )

    # exact enumeration: every k for P <= 8 over integer vectors (exact in float32/64)
    rng = np.random.default_rng(4)
    worst = 0.0
    mismatch = 0.0
    law_mismatch = 0.0
    published_mismatch = 0.0
    for P_, k_ in itertools.chain.from_iterable(
        ((p, kk) for kk in range(1, p + 1)) for p in range(1, 9)
    ):
        x = rng.integers(-20, 21, size=(64, P_)).astype(np.float64)
        topk = TopK(k=k_)
        y = topk.roundtrip(x)
        err = np.sum((y - x) ** 2, axis=1)
        dropped = np.sort(x**2, axis=1)[:, : P_ - k_].sum(axis=1)
        mismatch = max(mismatch, float(np.max(np.abs(err - dropped))))
        law_mismatch = max(law_mismatch, abs(topk.expected_error(x) - float(dropped.sum())))
        bound = (1 - k_ / P_) * np.sum(x**2, axis=1)
        published = x.shape[0] * (1 - k_ / P_) * float(np.max(np.sum(x**2, axis=1)))
        published_mismatch = max(
            published_mismatch, abs(topk.published_bound(x) - published) / max(published, 1.0)
        )
        pos = bound > 0
        if pos.any():
            worst = max(worst, float(np.max(err[pos] / bound[pos])))
    return CheckResult(
        label="C5.4",
        claim="top-k: ||C(h)-h||^2 = sum of dropped squares <= (1 - k/P)||h||^2 (per row)",
        method="sympy identity for the averaging argument; exact enumeration of all k for "
        "P = 1..8 on integer vectors (64 rows each); TopK.expected_error and published_bound "
        "vs the dropped energy and the paper's formula written out here",
        symbolic=bool(symbolic) and mismatch == 0.0,
        empirical=worst,
        theoretical=1.0,
        tolerance=0.0,
        relation="<=",
        note="the paper counts only the k value floats (k = P b/32); indices cost "
        "min(P, k ceil(log2 P)) more bits per row on the wire (TopK.payload_bits accounting)",
        comparisons=(
            Comparison("max |expected_error - dropped energy|", law_mismatch, 0.0, 0.0),
            Comparison(
                "max rel. |published_bound - B(1-k/P)max|h|^2|", published_mismatch, 0, 1e-12
            ),
        ),
    )
