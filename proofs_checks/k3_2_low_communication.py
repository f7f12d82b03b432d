"""K3.2: the sparse protocol with mu = 0 and p = eps / (d(ceil(log2 d) + r)) costs n*eps bits in
expectation when |S| = nd — not eps as the paper states."""

import math

import numpy as np
import sympy as sp

from cvfl_theory import IndependentEncoder, SparseProtocol

from .result import CheckResult


def symbolic() -> bool:
    """C = (ceil(log2 d) + r) p |S| with |S| = nd and the stated p equals n*eps."""
    n, d, r, eps, w = sp.symbols("n d r epsilon w", positive=True)  # w = ceil(log2 d)
    p = eps / (d * (w + r))
    return sp.simplify((w + r) * p * n * d - n * eps) == 0


def check() -> CheckResult:
    n, d, r, eps = 4, 16, 32, 1.0
    X = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)  # |S| = nd a.s.
    p = eps / (d * (math.ceil(math.log2(d)) + r))
    enc = IndependentEncoder(p, mu="zero")
    proto = SparseProtocol(r=r)
    gen = np.random.default_rng(1)
    trials = 20000
    bits = np.array([proto.payload_bits(enc.encode(X, rng=gen)).sum() for _ in range(trials)])
    se = bits.std(ddof=1) / math.sqrt(trials)
    return CheckResult(
        label="K3.2",
        claim="sparse protocol, mu = 0, p = eps/(d(ceil(log2 d)+r)): E C = n*eps (|S| = nd)",
        method="sympy; 20000 seeded encodings, mean payload bits within 5 SE of n*eps",
        symbolic=symbolic() and math.isclose(proto.expected_bits(enc, X), n * eps, rel_tol=1e-12),
        empirical=float(bits.mean()),
        theoretical=n * eps,
        tolerance=5 * se,
        note="the paper says C = eps: off by the factor n; p = eps/(n d (ceil(log2 d)+r)) "
        "gives C = eps, at MSE O(1/eps) instead of O(1/(eps n))",
    )
