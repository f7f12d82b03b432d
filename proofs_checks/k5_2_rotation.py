"""K5.2: the rotation baseline. For a fixed rotation HD, its exact MSE is (d/d') times the K5.1
formula on the rotated, padded vectors (padding to d' = 2^ceil(log2 d) drops a fraction of the
error when rotating back). [KR] states no formula for a padded d; this one is the toolkit's.

The rotation is checked against the Sylvester-Hadamard matrix built here (Z H = D X_pad for one
diagonal of signs D shared by all nodes); the enumeration weighs supports with K5.1's p computed
here on Z; the supports ``encode`` draws are compared with that law.
"""

import numpy as np
import scipy.linalg
import sympy as sp

from cvfl_theory import RotatedBinaryEncoder
from cvfl_theory.testing.exact import exact_moments

from ._common import roundoff, sampler_comparison, small_data
from .result import CheckResult, Comparison


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
    n, d = X.shape
    enc = RotatedBinaryEncoder(rotation_seed=5)
    Z = np.asarray(enc.rotate(X), dtype=np.float64)
    dp = Z.shape[1]
    # the rotation: Z = (X_pad * s) H with H the normalised Sylvester-Hadamard matrix, s = +-1
    H = scipy.linalg.hadamard(dp) / np.sqrt(dp)
    Xp = np.zeros((n, dp))
    Xp[:, :d] = X
    signs = np.where((Z @ H)[0] * np.sign(Xp[0]) >= 0, 1.0, -1.0)  # X has no zero entries
    rot_err = float(np.abs(Z @ H - Xp * signs).max()) if dp == 4 else float("inf")
    lo, hi = Z.min(axis=1, keepdims=True), Z.max(axis=1, keepdims=True)
    law = (Z - lo) / (hi - lo)
    closed = d / dp * float(((hi - Z) * (Z - lo)).sum() / n**2)
    exact = exact_moments(enc, X, inclusion=law)
    return CheckResult(
        label="K5.2",
        claim="rotated binary quantization: MSE = (d/d') (1/n^2) sum (Zmax-Z)(Z-Zmin), Z = HDX",
        method="sympy: H orthogonal and sum_{k<d} H_kj^2 = d/d'; the rotation vs the "
        "Sylvester-Hadamard matrix; exact enumeration of all rotated-domain supports (K5.1 "
        "weights computed here) decoded by the real inverse rotation; frequency test of encode()",
        symbolic=symbolic(),
        empirical=exact.mse,
        theoretical=closed,
        tolerance=roundoff(closed),
        note="[KR] gives no formula for a padded d; without the d/d' factor the closed form "
        "overstates the error whenever d is not a power of two",
        comparisons=(
            Comparison("rotation = H D (max deviation)", rot_err, 0.0, roundoff(float(Z.max()))),
            Comparison("RotatedBinaryEncoder.mse", enc.mse(X), closed, roundoff(closed)),
            sampler_comparison(enc, X, law),
        ),
    )
