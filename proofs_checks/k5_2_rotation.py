"""K5.2: the rotation baseline. For a fixed rotation HD, its exact MSE is (d/d') times the K5.1
formula on the rotated, padded vectors (padding to d' = 2^ceil(log2 d) drops a fraction of the
error when rotating back). THEORY.md states no formula; this is the toolkit's."""

import sympy as sp

from cvfl_theory import RotatedBinaryEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, small_data
from .result import CheckResult


def symbolic(d: int = 3) -> bool:
    """For H of size d' = 4: H^T H = I and sum_{k<d} H_kj^2 = d/d' for every column j."""
    H = sp.Matrix([[1, 1], [1, -1]])
    H = sp.kronecker_product(H, H) / 2
    dp = H.shape[0]
    orthogonal = sp.simplify(H.T * H - sp.eye(dp)) == sp.zeros(dp)
    kept = all(
        sp.simplify(sum(H[k, j] ** 2 for k in range(d)) - sp.Rational(d, dp)) == 0
        for j in range(dp)
    )
    return orthogonal and kept


def check() -> CheckResult:
    X = small_data(2, 3)  # d = 3 -> d' = 4: 2^8 joint supports
    enc = RotatedBinaryEncoder(rotation_seed=5)
    closed = enc.mse(X)
    exact = exact_moments(enc, X)
    return CheckResult(
        label="K5.2",
        claim="rotated binary quantization: MSE = (d/d') (1/n^2) sum (Zmax-Z)(Z-Zmin), Z = HDX",
        method="sympy: H orthogonal and sum_{k<d} H_kj^2 = d/d'; exact enumeration of all "
        "rotated-domain supports decoded by the real inverse rotation",
        symbolic=symbolic(),
        empirical=exact.mse,
        theoretical=closed,
        tolerance=roundoff(closed),
        note="THEORY.md K5.2 gives no formula; without the d/d' factor the closed form "
        "overstates the error whenever d is not a power of two",
    )
