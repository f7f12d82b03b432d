r"""Exact expectations over every random support, for small problems.

For an encoder with per-node supports :math:`D_i` drawn independently, any expectation
:math:`\mathbb E f(Y_1, \dots, Y_n)` is a finite sum over the joint supports weighted by their
probabilities: :math:`\prod_i \prod_{j \in D_i} p_{ij} \prod_{j \notin D_i}(1 - p_{ij})` for the
Bernoulli schemes (K1, K5.1) and :math:`\prod_i \binom{d}{k_i}^{-1}` for K2. The encoded messages
are produced by the encoder's own :meth:`~cvfl_theory.encoders.Encoder.encode_with_supports`, and
decoded with the real decoders, so this checks the code, not a re-implementation of the formulas.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..encoded import Encoded, dense_coded
from ..encoders import Encoder

__all__ = ["support_distribution", "exact_expectation", "exact_moments", "ExactMoments"]


def support_distribution(encoder: Encoder, X: Any) -> list[list[tuple[np.ndarray, float]]]:
    """Every support of every node with its probability (zero-probability supports dropped)."""
    p, _ = encoder.marginals(X)
    n, d = p.shape
    out: list[list[tuple[np.ndarray, float]]] = []
    for i in range(n):
        node = []
        if encoder.scheme == "k-subset":
            k = round(p[i, 0] * d)
            w = 1.0 / math.comb(d, k)
            node = [(np.array(c, dtype=np.int64), w) for c in itertools.combinations(range(d), k)]
        else:
            for mask in itertools.product((False, True), repeat=d):
                m = np.array(mask)
                w = float(np.prod(np.where(m, p[i], 1.0 - p[i])))
                if w > 0:
                    node.append((np.flatnonzero(m).astype(np.int64), w))
        out.append(node)
    return out


def exact_expectation(
    encoder: Encoder, X: Any, fn: Callable[[Encoded], Any], max_outcomes: int = 1 << 16
) -> Any:
    r""":math:`\mathbb E\, fn(\text{encoded})` summed over every joint support outcome.

    Raises
    ------
    ValueError
        If there are more than ``max_outcomes`` joint outcomes.
    """
    dist = support_distribution(encoder, X)
    count = math.prod(len(node) for node in dist)
    if count > max_outcomes:
        raise ValueError(
            f"{count} joint outcomes exceed max_outcomes={max_outcomes}; use a smaller X"
        )
    total: Any = 0.0
    for combo in itertools.product(*dist):
        w = math.prod(prob for _, prob in combo)
        enc = encoder.encode_with_supports(X, [idx for idx, _ in combo])
        total = total + w * np.asarray(fn(enc), dtype=np.float64)
    return total


@dataclass(frozen=True)
class ExactMoments:
    r"""Exact moments of an encoder's messages and of the averaging decoder.

    ``mean_Y`` is :math:`\mathbb E Y_i` in the coding domain (rotated and padded for K5.2),
    ``mean_average`` the expected averaging decoder ``(d,)`` and ``mse`` its exact MSE.
    """

    mean_Y: np.ndarray
    mean_average: np.ndarray
    mse: float


def exact_moments(encoder: Encoder, X: Any, max_outcomes: int = 1 << 16) -> ExactMoments:
    """Exact first moments and MSE of the averaging decoder by enumeration.

    Examples
    --------
    >>> from cvfl_theory import IndependentEncoder
    >>> X = np.array([[1.0, 3.0], [2.0, 2.0]])
    >>> m = exact_moments(IndependentEncoder(0.5, mu="zero"), X)
    >>> np.allclose(m.mean_Y, X), round(m.mse, 12)  # (1/0.5 - 1)(1+9+4+4)/4
    (True, 4.5)
    """
    Xn = np.asarray(encoder._prepare(X)[0], dtype=np.float64)
    xbar = Xn.mean(axis=0)

    def stats(enc: Encoded) -> np.ndarray:
        avg = np.asarray(encoder.average(enc), dtype=np.float64)
        dev = avg - xbar
        return np.concatenate([dense_coded(enc).astype(np.float64).ravel(), avg, [dev @ dev]])

    v = exact_expectation(encoder, X, stats, max_outcomes)
    n = Xn.shape[0]
    dd = encoder.domain(X).shape[1]
    d = Xn.shape[1]
    return ExactMoments(v[: n * dd].reshape(n, dd), v[n * dd : n * dd + d], float(v[-1]))
