"""Small shared pieces of the K checks: test data, the round-off tolerance, the K1.2 formula
written out from the theory pages, and the frequency test of an encoder's real sampler."""

from __future__ import annotations

from typing import Any

import numpy as np

from cvfl_theory.testing.exact import support_frequency_test

from .result import Comparison

#: Standard errors allowed in every Monte Carlo / frequency comparison (fixed seeds, never tuned).
Z_SE = 5.0

#: Encodings drawn by the frequency test of an encoder's sampler.
DRAWS = 4000


def small_data(n: int = 2, d: int = 3, seed: int = 0) -> np.ndarray:
    """A small float64 matrix with distinct, non-constant rows (so |S| = nd)."""
    return np.random.default_rng(seed).normal(size=(n, d)) * np.arange(1, d + 1)


def roundoff(scale: float, terms: int = 1000) -> float:
    """Tolerance for an exact computation in float64: ``terms`` ulps of ``scale``."""
    return terms * np.finfo(np.float64).eps * max(abs(scale), 1.0)


def k12_formula(X: np.ndarray, p: np.ndarray, mu: np.ndarray) -> float:
    r"""K1.2 from the theory pages, :math:`\frac1{n^2}\sum_{ij}(1/p_{ij} - 1)(X_i(j) - \mu_i)^2`.

    Written out here from the parameters the check chose, independently of the encoders' code.
    Entries with :math:`p_{ij} = 0` must have :math:`X_i(j) = \mu_i` (they contribute 0).
    """
    dev2 = (np.asarray(X, dtype=np.float64) - np.asarray(mu, dtype=np.float64)[:, None]) ** 2
    p = np.broadcast_to(np.asarray(p, dtype=np.float64), dev2.shape)
    on = dev2 > 0
    return float(np.sum((1.0 / p[on] - 1.0) * dev2[on]) / dev2.shape[0] ** 2)


def sampler_comparison(
    encoder: Any, X: np.ndarray, inclusion: Any, draws: int = DRAWS
) -> Comparison:
    """The supports drawn by ``encoder.encode`` vs the law of ``inclusion``: max |z| <= 5."""
    ft = support_frequency_test(encoder, X, draws=draws, rng=12345, inclusion=inclusion)
    return Comparison(
        f"encode() supports vs the law ({draws} draws, max |z|, worst: {ft.worst})",
        ft.max_z,
        0.0,
        Z_SE,
        "<=",
    )


def mean_and_se(samples: np.ndarray) -> tuple[float, float]:
    """Sample mean and its standard error (``ddof = 1``)."""
    s = np.asarray(samples, dtype=np.float64)
    return float(s.mean()), float(s.std(ddof=1) / np.sqrt(s.size))


def quantizer_comparisons(
    tag: str,
    quantizer: Any,
    x: np.ndarray,
    own_sim: np.ndarray,
    own_exact: float,
    own_published: float,
    trials: int,
    seed: int,
) -> list[Comparison]:
    r"""The package's error laws for one setting against the check's own computations.

    ``own_sim`` holds per-trial total squared errors of the check's own dithered quantizer,
    ``own_exact`` the exact law written out in the check and ``own_published`` the paper's
    bound written out in the check. Compared: the package's ``expected_error(x)`` with the own
    simulation (5 SE) and with ``own_exact`` (relative 1e-6: the min-max ranges are sent as
    float32); the package compressor's measured error over ``trials`` dithers with
    ``expected_error`` (5 SE); ``published_bound(x)`` with ``own_published`` (relative 1e-6).
    """
    law = float(quantizer.expected_error(x))
    published = float(quantizer.published_bound(x))
    sim, sim_se = mean_and_se(own_sim)
    gen = np.random.default_rng(seed)
    xd = np.asarray(x, dtype=np.float64)
    pkg = np.array(
        [np.sum((quantizer.roundtrip(x, rng=gen) - xd) ** 2) for _ in range(trials)], np.float64
    )
    pkg_mean, pkg_se = mean_and_se(pkg)
    rel = 1e-6
    return [
        Comparison(f"{tag}: expected_error vs own simulation", law, sim, Z_SE * sim_se),
        Comparison(f"{tag}: expected_error vs own exact law", law, own_exact, rel * own_exact),
        Comparison(f"{tag}: compressor's error vs expected_error", pkg_mean, law, Z_SE * pkg_se),
        Comparison(
            f"{tag}: published_bound vs the paper's formula",
            published,
            own_published,
            rel * own_published,
        ),
    ]


def setting_data(seed: int, rng_spec: Any, shape: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """A C5 check's embedding and its per-row ``(lo, hi)`` as the check reads the range spec.

    Rows of growing scale for a min-max range (``"minmax-row"``/``"minmax-tensor"``), uniform draws
    inside a fixed range ``(lo, hi)``; ``lo``, ``hi`` have shape ``(B, 1)``.
    """
    gen = np.random.default_rng(seed)
    if isinstance(rng_spec, str):
        x = gen.normal(size=shape) * (1 + np.arange(shape[0]))[:, None]
    else:
        lo, hi = rng_spec
        x = gen.uniform(float(lo), float(hi), size=shape)
    B = x.shape[0]
    if rng_spec == "minmax-row":
        lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
    elif rng_spec == "minmax-tensor":
        lo, hi = np.full((B, 1), x.min()), np.full((B, 1), x.max())
    else:
        lo, hi = np.full((B, 1), rng_spec[0]), np.full((B, 1), rng_spec[1])
    return x, lo, hi
