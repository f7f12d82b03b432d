"""Small shared pieces of the K checks: test data and the round-off tolerance."""

from __future__ import annotations

import numpy as np


def small_data(n: int = 2, d: int = 3, seed: int = 0) -> np.ndarray:
    """A small float64 matrix with distinct, non-constant rows (so |S| = nd)."""
    return np.random.default_rng(seed).normal(size=(n, d)) * np.arange(1, d + 1)


def roundoff(scale: float, terms: int = 1000) -> float:
    """Tolerance for an exact computation in float64: ``terms`` ulps of ``scale``."""
    return terms * np.finfo(np.float64).eps * max(abs(scale), 1.0)
