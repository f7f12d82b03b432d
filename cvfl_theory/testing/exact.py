r"""Exact expectations over every random support, and a frequency test of the real sampler.

For an encoder with per-node supports :math:`D_i` drawn independently, any expectation
:math:`\mathbb E f(Y_1, \dots, Y_n)` is a finite sum over the joint supports weighted by their
probabilities: :math:`\prod_i \prod_{j \in D_i} p_{ij} \prod_{j \notin D_i}(1 - p_{ij})` for the
Bernoulli schemes (K1, K5.1) and :math:`\prod_i \binom{d}{k_i}^{-1}` for K2.

The weights are computed here, from the encoder's *parameters* (``p``, ``k``, or the K5.1 rule
:math:`p_{ij} = (X_i(j) - X_i^{\min})/(X_i^{\max} - X_i^{\min})`) by this module's own formulas
(:func:`inclusion_probabilities`), or from probabilities the caller passes — never from the
encoder's :meth:`~cvfl_theory.encoders.Encoder.marginals`, which is code under test. The encoded
messages are produced by the encoder's own
:meth:`~cvfl_theory.encoders.Encoder.encode_with_supports` and decoded with the real decoders.
Since that path never draws a support, :func:`support_frequency_test` checks the other half: the
supports the encoder's :meth:`~cvfl_theory.encoders.Encoder.encode` actually draws, against the
same probabilities, with a binomial standard-error tolerance.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..encoded import Encoded, dense_coded
from ..encoders import (
    BinaryQuantizationEncoder,
    Encoder,
    FixedSizeEncoder,
    IndependentEncoder,
)

__all__ = [
    "inclusion_probabilities",
    "support_distribution",
    "exact_expectation",
    "exact_moments",
    "ExactMoments",
    "support_frequency_test",
    "FrequencyTest",
]


def inclusion_probabilities(encoder: Encoder, X: Any) -> np.ndarray:
    r""":math:`P(j \in D_i)`, shape ``(n, d)`` in the coding domain, from the encoder's parameters.

    - :class:`~cvfl_theory.IndependentEncoder` (K1): its ``p`` broadcast to ``(n, d)``;
    - :class:`~cvfl_theory.FixedSizeEncoder` (K2): :math:`k_i / d`;
    - :class:`~cvfl_theory.BinaryQuantizationEncoder` and the rotated one (K5.1, K5.2):
      :math:`(Z_i(j) - Z_i^{\min}) / (Z_i^{\max} - Z_i^{\min})` on the coding-domain vectors
      :math:`Z_i` (0 on a constant row, which is sent exactly).

    Raises
    ------
    TypeError
        For an encoder of another type (pass the probabilities explicitly instead).
    """
    Z = np.asarray(encoder.domain(X), dtype=np.float64)
    n, d = Z.shape
    if isinstance(encoder, IndependentEncoder):
        return np.array(np.broadcast_to(np.asarray(encoder.p, dtype=np.float64), (n, d)))
    if isinstance(encoder, FixedSizeEncoder):
        k = np.broadcast_to(np.asarray(encoder.k, dtype=np.float64), (n,))
        return np.repeat(k[:, None] / d, d, axis=1)
    if isinstance(encoder, BinaryQuantizationEncoder):
        lo, hi = Z.min(axis=1, keepdims=True), Z.max(axis=1, keepdims=True)
        span = hi - lo
        return np.where(span > 0, (Z - lo) / np.where(span > 0, span, 1.0), 0.0)
    raise TypeError(
        f"no inclusion law known for {type(encoder).__name__}; pass inclusion= explicitly"
    )


def _checked_inclusion(encoder: Encoder, X: Any, inclusion: Any) -> np.ndarray:
    if inclusion is None:
        return inclusion_probabilities(encoder, X)
    shape = encoder.domain(X).shape
    p = np.array(np.broadcast_to(np.asarray(inclusion, dtype=np.float64), shape))
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"inclusion probabilities must lie in [0, 1]; got {p.min()}..{p.max()}")
    return p


def support_distribution(
    encoder: Encoder, X: Any, inclusion: Any = None
) -> list[list[tuple[np.ndarray, float]]]:
    r"""Every support of every node with its probability (zero-probability supports dropped).

    Parameters
    ----------
    encoder : Encoder
        Its type selects the law: uniform :math:`k_i`-subsets for
        :class:`~cvfl_theory.FixedSizeEncoder`, independent Bernoulli entries otherwise.
    X : array
        The data, shape ``(n, d)``.
    inclusion : array, optional
        :math:`P(j \in D_i)` broadcastable to the coding domain's shape; by default
        :func:`inclusion_probabilities`. For K2, row ``i`` must be :math:`k_i / d`.
    """
    return _distribution(encoder, _checked_inclusion(encoder, X, inclusion))


def _distribution(encoder: Encoder, p: np.ndarray) -> list[list[tuple[np.ndarray, float]]]:
    """:func:`support_distribution` for checked inclusion probabilities ``p`` ``(n, d)``."""
    n, d = p.shape
    out: list[list[tuple[np.ndarray, float]]] = []
    for i in range(n):
        node = []
        if isinstance(encoder, FixedSizeEncoder):
            k = round(float(p[i, 0]) * d)
            if not np.allclose(p[i], k / d, rtol=0, atol=1e-12):
                raise ValueError(f"a k-subset law needs equal inclusion k/d in row {i}")
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
    encoder: Encoder,
    X: Any,
    fn: Callable[[Encoded], Any],
    max_outcomes: int = 1 << 16,
    inclusion: Any = None,
) -> Any:
    r""":math:`\mathbb E\, fn(\text{encoded})` summed over every joint support outcome.

    The weights come from :func:`support_distribution` (``inclusion`` as there).

    Raises
    ------
    ValueError
        If there are more than ``max_outcomes`` joint outcomes.
    """
    dist = support_distribution(encoder, X, inclusion)
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


def exact_moments(
    encoder: Encoder, X: Any, max_outcomes: int = 1 << 16, inclusion: Any = None
) -> ExactMoments:
    """Exact first moments and MSE of the averaging decoder by enumeration.

    The weights come from :func:`support_distribution` (``inclusion`` as there).

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

    v = exact_expectation(encoder, X, stats, max_outcomes, inclusion)
    n = Xn.shape[0]
    dd = encoder.domain(X).shape[1]
    d = Xn.shape[1]
    return ExactMoments(v[: n * dd].reshape(n, dd), v[n * dd : n * dd + d], float(v[-1]))


@dataclass(frozen=True)
class FrequencyTest:
    r"""Supports drawn by :meth:`~cvfl_theory.encoders.Encoder.encode` against their law.

    Attributes
    ----------
    draws : int
        Number of encodings.
    max_z : float
        Largest :math:`|c - N w| / \sqrt{N w (1 - w)}` over every support outcome of every node
        (count :math:`c` of :math:`N` draws, probability :math:`w`), every entry
        (:math:`w = p_{ij}`) and every node's total support size (variance
        :math:`N \sum_j p_{ij}(1 - p_{ij})`, 0 for K2). ``inf`` if an outcome of probability 0
        (or a size other than a deterministic one) was drawn.
    worst : str
        Which of those statistics gave ``max_z``.
    """

    draws: int
    max_z: float
    worst: str

    def passed(self, z: float = 5.0) -> bool:
        """Whether every statistic is within ``z`` standard errors."""
        return self.max_z <= z


def _z(count: float, mean: float, var: float) -> float:
    if var <= 0:
        return 0.0 if abs(count - mean) <= 1e-9 * max(1.0, mean) else math.inf
    return abs(count - mean) / math.sqrt(var)


def support_frequency_test(
    encoder: Encoder, X: Any, draws: int = 4000, rng: int = 0, inclusion: Any = None
) -> FrequencyTest:
    r"""Encode ``X`` ``draws`` times and compare the drawn supports with their law.

    The law is :func:`support_distribution` (``inclusion`` as there); every outcome of every
    node, every entry's inclusion count and every node's total support size are compared with
    their binomial expectation. A sampler that uses :math:`0.95\,p` instead of :math:`p` shifts a
    node's total by :math:`0.05 N \sum_j p_{ij}`, i.e. by
    :math:`0.05\sqrt N \sum_j p_{ij} / \sqrt{\sum_j p_{ij}(1-p_{ij})}` standard errors.

    Examples
    --------
    >>> from cvfl_theory import IndependentEncoder
    >>> X = np.array([[1.0, 3.0, -2.0]])
    >>> support_frequency_test(IndependentEncoder(0.5), X, draws=500).passed()
    True
    """
    p = _checked_inclusion(encoder, X, inclusion)
    dist = _distribution(encoder, p)
    n, d = p.shape
    gen = np.random.default_rng(rng)
    outcome_counts: list[dict[tuple[int, ...], int]] = [{} for _ in range(n)]
    entry_counts = np.zeros((n, d))
    size_total = np.zeros(n)
    for _ in range(draws):
        enc = encoder.encode(X, rng=gen)
        for i, node in enumerate(enc.nodes):
            idx = np.asarray(node.support, dtype=np.int64)
            key = tuple(int(j) for j in idx)
            outcome_counts[i][key] = outcome_counts[i].get(key, 0) + 1
            entry_counts[i, idx] += 1
            size_total[i] += idx.size
    stats: list[tuple[float, str]] = []
    for i in range(n):
        law = {tuple(int(j) for j in idx): w for idx, w in dist[i]}
        for key, c in outcome_counts[i].items():
            if key not in law:
                stats.append((math.inf, f"node {i}: support {key} of probability 0 drawn {c}x"))
        for key, w in law.items():
            c = outcome_counts[i].get(key, 0)
            stats.append((_z(c, draws * w, draws * w * (1 - w)), f"node {i} support {key}"))
        for j in range(d):
            w = float(p[i, j])
            stats.append((_z(entry_counts[i, j], draws * w, draws * w * (1 - w)), f"entry {i},{j}"))
        if isinstance(encoder, FixedSizeEncoder):
            var = 0.0
        else:
            var = draws * float(np.sum(p[i] * (1 - p[i])))
        stats.append((_z(size_total[i], draws * float(p[i].sum()), var), f"node {i} total size"))
    z, worst = max(stats, key=lambda s: s[0])
    return FrequencyTest(draws, float(z), worst)
