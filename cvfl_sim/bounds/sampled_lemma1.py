r"""A high-confidence bound on Lemma 1's left side from dither draws (C4.8 -- ours, not the paper's).

For block ``m`` at a round start, with the batch and the parameters fixed, let

.. math:: X = \|\nabla_m F_B(\Phi_m) - \nabla_m F_B(\hat\Phi_m)\|^2
          = \frac1{B^2}\Bigl\|\sum_{i=1}^B a_i\Bigr\|^2,
          \qquad a_i = g_i(\varepsilon_0, \varepsilon_i) - g_i(0, 0),

where :math:`g_i` is sample ``i``'s gradient of block ``m`` at the compressed view, a function
of the server model's error :math:`\varepsilon_0` (common to all samples; none for the server
block) and of row ``i``'s errors :math:`\varepsilon_i` of the other parties. Lemma 1 bounds
:math:`\mathbb E X` (over the dither). This module bounds it, with probability at least
:math:`1 - \delta` over ``k`` independent draws of the dither, by

.. math:: \mathbb E X \le \frac1{B^2}\Bigl(U_S + U_T + \Bigl(\|\bar A\|
          + \sqrt{\frac{e\,(U_S + U_T)}{k\,\delta}}\Bigr)^2\Bigr),

with :math:`e` the number of events (3 with a compressed server model, else 2 and
:math:`U_T = 0`), :math:`\bar A` the draws' mean of :math:`A = \sum_i a_i`, and :math:`U_S,
U_T` upper confidence bounds, each at level :math:`\delta/e`, on the means of

.. math:: S = \sum_i \|a_i(\varepsilon_0, \varepsilon_i) - a_i(\varepsilon_0, 0)\|^2, \qquad
          T = \tfrac12\,\|A(\varepsilon_0, \varepsilon) - A(\varepsilon_0', \varepsilon)\|^2

(:math:`\varepsilon_0'` an independent copy). The proof (``docs/tight_term.rst``, "C4.8"):

1. the law of total variance over :math:`\varepsilon_0`, the samples' independence given
   :math:`\varepsilon_0` and Jensen's inequality give :math:`\mathbb E\|A\|^2 \le \mathbb E S +
   \mathbb E T + \|\mathbb E A\|^2` and :math:`\operatorname{tr}\operatorname{Cov} A \le
   \mathbb E S + \mathbb E T`;
2. Maurer's lower-tail inequality for non-negative variables (2003) gives :math:`U_S, U_T`
   from the second moments :math:`\mathbb E S^2 \le c\,\mathbb E S + d\,(\mathbb E S)^2`
   (:func:`nonnegative_mean_bound`), with :math:`c, d` from almost-sure per-sample ranges
   :math:`0 \le S_i \le \beta_i^2` (:math:`c = \max_i\beta_i^2, d = 1` for independent samples;
   :math:`c = \sum_i \beta_i^2, d = 0` when a server error couples them) and
   :math:`T \le \frac12(\sum_i \gamma_i)^2`;
3. Chebyshev's inequality for the mean vector, :math:`P(\|\bar A - \mathbb E A\|^2 \ge t) \le
   \operatorname{tr}\operatorname{Cov}A/(k t)`, and the union bound over the :math:`e` events.

The ranges :math:`\beta_i, \gamma_i` bound sample ``i``'s change over the dither's support
through the exact range of the softmax ratios :math:`p_c(u + \Delta)/p_c(u) = 1/\sum_k p_k(u)
e^{\Delta_k - \Delta_c}` on the box the logits can reach (:func:`softmax_box`). They enter only
through terms of order :math:`L/k`, so the bound tracks the draws' mean as ``k`` grows: within
a factor 1.1--1.6 of an independent Monte-Carlo truth after training at 2 bits when the server
model is not compressed. With a compressed server model, :math:`T`'s range sums over the batch
(a worst case coherent across samples), so :math:`\mathbb E T^2` is also bounded through a
Poincaré inequality for the uniform errors (:func:`poincare_constants`), and the smaller
bound is used: the party blocks are then 1.9--6 times the truth at 4 bits and 4--140 at
2 bits (breast cancer the loosest).

Assumptions: a linear softmax head with cross entropy; dithered scalar or hexagonal-lattice
quantizers without overload (C5.1, C5.2: errors independent across parties, rows and
components or pairs, on a known bounded support; every draw is checked against it); the server
model's error independent of the parties'; differentiable party models. Top-k (biased,
deterministic errors) is refused. The statement is at the parameters passed (a round start);
at a later local step of a round with ``Q > 1`` Lemma 1's left side also holds the staleness of
the embeddings, which this bound does not cover.

References
----------
1. A. Maurer, A bound on the deviation probability for sums of non-negative random variables,
   J. Inequalities in Pure and Applied Mathematics 4(1), 2003, Theorem 1.
2. ``docs/tight_term.rst`` (the proof); ``proofs_checks/c4_8_sampled_lemma1.py`` (the check).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from cvfl_theory.table import Table

from ._autodiff import check_lemma1_models, flat_params, linear_softmax_head
from ._jacobians import party_jacobians
from .tight_term import error_kind, error_variances, max_error_sq

__all__ = [
    "SampledLemma1",
    "mean_vector_bound",
    "nonnegative_mean_bound",
    "per_sample_ranges",
    "poincare_constants",
    "poincare_factor",
    "sampled_lemma1_bound",
    "server_term_range",
    "softmax_box",
]

_CHUNK = 256  # draws per vectorised step (memory: chunk x B x sum P floats per array)


@dataclass(frozen=True)
class SampledLemma1:
    r"""Per-block confidence bounds on :math:`\mathbb E\|\nabla_m F_B(\Phi_m) - \nabla_m F_B(\hat\Phi_m)\|^2`.

    Arrays have one entry per block ``m = 0..M`` (``0`` is the server).

    Attributes
    ----------
    bound : numpy.ndarray
        The bound; each holds with probability at least ``1 - delta`` over the draws.
    estimate, standard_error : numpy.ndarray
        The plug-in estimate (mean of the left side over the draws: an estimate, not a bound)
        and its standard error.
    variance_part, server_part, mean_part : numpy.ndarray
        :math:`U_S/B^2`, :math:`U_T/B^2` and the squared mean bound over :math:`B^2`: the
        bound's within-sample variance, server-error variance and mean parts (they sum to it).
    range_ratio : numpy.ndarray
        :math:`\sum_i\beta_i^2 / \bar S`: how far the almost-sure range of ``S`` lies above its
        mean (it enters the bound only through terms of order ``ln(3/delta) / draws``).
    draws : int
    delta : float
    B : int
    """

    bound: np.ndarray
    estimate: np.ndarray
    standard_error: np.ndarray
    variance_part: np.ndarray
    server_part: np.ndarray
    mean_part: np.ndarray
    range_ratio: np.ndarray
    draws: int
    delta: float
    B: int

    def table(self) -> Table:
        """One row per block."""
        rows = [
            [
                "server" if m == 0 else f"party {m}",
                float(self.bound[m]),
                float(self.estimate[m]),
                float(self.standard_error[m]),
                float(self.bound[m] / self.estimate[m]) if self.estimate[m] > 0 else math.nan,
            ]
            for m in range(len(self.bound))
        ]
        return Table(
            ["block", "bound", "estimate", "SE", "bound/estimate"],
            rows,
            title=f"Lemma 1, confidence bound from {self.draws} dither draws (C4.8, ours): "
            f"each row holds with probability >= {1 - self.delta:g}; the estimate is the "
            "draws' mean (not a bound)",
        )

    def __str__(self) -> str:
        return str(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


# ---------------------------------------------------------------------------------------------
# the softmax on a box of logit changes
# ---------------------------------------------------------------------------------------------
def softmax_box(logits: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Range of the softmax over every change :math:`\Delta` with :math:`\Delta_c - \Delta_k \le \rho_{ck}`.

    With :math:`p = \mathrm{softmax}(u)`, :math:`p_c(u + \Delta) = 1 / \sum_k p_k
    e^{\Delta_k - \Delta_c}/p_c`, so :math:`p_c/\sum_k p_k e^{-\rho_{ck}} \ge p_c(u+\Delta) \ge
    p_c/\sum_k p_k e^{\rho_{kc}}`; and since the probabilities sum to one,
    :math:`p_c(u+\Delta) \le 1 - \sum_{k\ne c} \mathrm{lo}_k` and :math:`\ge 1 - \sum_{k \ne c}
    \mathrm{up}_k`. Computed with ``expm1`` so that a confident sample's small changes do not
    round away.

    Parameters
    ----------
    logits : numpy.ndarray
        ``(B, K)`` logits :math:`u`.
    rho : numpy.ndarray
        ``(B, K, K)``, :math:`\rho_{ck} \ge \sup (\Delta_c - \Delta_k)` (the diagonal is ignored).

    Returns
    -------
    tuple of numpy.ndarray
        ``(p, upper, lower)``, each ``(B, K)``: the probabilities at :math:`u`, and bounds on
        :math:`p_c(u + \Delta)` over the box.

    Examples
    --------
    >>> p, up, lo = softmax_box(np.array([[0.0, 0.0]]), np.full((1, 2, 2), np.log(3.0)))
    >>> np.round(up, 6).tolist(), np.round(lo, 6).tolist()  # 3/4 and 1/4
    ([[0.75, 0.75]], [[0.25, 0.25]])
    """
    u = np.asarray(logits, dtype=np.float64)
    r = np.array(rho, dtype=np.float64)
    K = u.shape[1]
    r[:, np.arange(K), np.arange(K)] = 0.0
    e = np.exp(u - u.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    # up_c - p_c = p_c sum_k p_k (1 - e^{-rho_ck}) / sum_k p_k e^{-rho_ck}
    down = np.einsum("bk,bck->bc", p, np.exp(-r))
    up_gain = p * np.einsum("bk,bck->bc", p, -np.expm1(-r)) / down
    # p_c - lo_c = p_c sum_k p_k (e^{rho_kc} - 1) / sum_k p_k e^{rho_kc}
    rt = np.swapaxes(r, 1, 2)  # rt[b, c, k] = rho_kc
    upw = np.einsum("bk,bck->bc", p, np.exp(rt))
    lo_loss = p * np.einsum("bk,bck->bc", p, np.expm1(rt)) / upw
    up, lo = p + up_gain, p - lo_loss
    # the complements 1 - sum of the others' bounds, widened by their rounding (K ulps of 1)
    slack = 2.0 * K * np.finfo(np.float64).eps
    upper = np.minimum(np.minimum(up, 1.0), 1.0 - (lo.sum(1, keepdims=True) - lo) + slack)
    lower = np.maximum(np.maximum(lo, 0.0), 1.0 - (up.sum(1, keepdims=True) - up) - slack)
    return p, upper, np.maximum(lower, 0.0)


def _ratio_change(p_upper: np.ndarray, rho: np.ndarray) -> np.ndarray:
    r"""Bound on :math:`|p_c(v + \Delta) - p_c(v)|` for every :math:`v` with :math:`p_c(v) \le` ``p_upper``.

    :math:`p_c(v + \Delta)/p_c(v) \in [e^{-\max_k\rho_{kc}}, e^{\max_k\rho_{ck}}]` whatever
    :math:`v` is, so the change is at most :math:`p_c(v)(e^{\max(\cdot)} - 1)`; and as the
    changes sum to zero, also at most the others' bounds summed.
    """
    K = rho.shape[1]
    r = rho.copy()
    r[:, np.arange(K), np.arange(K)] = 0.0
    grow = np.expm1(np.maximum(r.max(axis=2), r.max(axis=1)))  # e^{rho+} - 1 >= 1 - e^{-rho-}
    tau = np.minimum(p_upper * grow, 1.0)
    return np.minimum(tau, tau.sum(axis=1, keepdims=True) - tau)


def _tau(p: np.ndarray, upper: np.ndarray, lower: np.ndarray) -> np.ndarray:
    r""":math:`\tau_c \ge |p_c(u+\Delta) - p_c(u)|` over the box, with :math:`|\Delta p_c| \le \sum_{k\ne c}|\Delta p_k|`."""
    tau = np.maximum(upper - p, p - lower).clip(min=0.0)
    return np.minimum(tau, tau.sum(axis=1, keepdims=True) - tau)


def _pair_sup(W: np.ndarray, hw: np.ndarray) -> np.ndarray:
    r""":math:`\sum_u |W_{cu} - W_{ku}|\,w_{iu}`: ``(B, K, K)``, the sup of :math:`(W\varepsilon_i)_c - (W\varepsilon_i)_k`."""
    D = np.abs(W[:, None, :] - W[None, :, :])  # (K, K, P)
    return np.einsum("ckp,bp->bck", D, hw)


# ---------------------------------------------------------------------------------------------
# the bound
# ---------------------------------------------------------------------------------------------
def nonnegative_mean_bound(mean: float, c: float, d: float, k: int, L: float) -> float:
    r"""Upper confidence bound on :math:`\mathbb E Z` of a non-negative :math:`Z` from ``k`` draws.

    Maurer (2003): for independent non-negative :math:`Z_r`, :math:`P(\mathbb E Z - \bar Z \ge t)
    \le \exp(-k t^2 / (2\,\mathbb E Z^2))`, so with probability at least :math:`1 - e^{-L}`,
    :math:`\mathbb E Z \le \bar Z + \sqrt{2 L\, \mathbb E Z^2 / k}`; with :math:`\mathbb E Z^2
    \le c\,\mathbb E Z + d\,(\mathbb E Z)^2` this is the larger root of a quadratic in
    :math:`\mathbb E Z`, returned here (``inf`` if ``2 L d / k >= 1``).
    """
    q2 = 2.0 * L / k
    lead = 1.0 - q2 * d
    if lead <= 0.0:
        return math.inf
    b = 2.0 * mean + q2 * c
    return (b + math.sqrt(max(b * b - 4.0 * lead * mean * mean, 0.0))) / (2.0 * lead)


def mean_vector_bound(mean_norm: float, trace_bound: float, k: int, delta: float) -> float:
    r"""Upper confidence bound on :math:`\|\mathbb E A\|` from the mean :math:`\bar A` of ``k`` draws.

    Chebyshev's inequality for the mean vector: :math:`P(\|\bar A - \mathbb E A\|^2 \ge t) \le
    \operatorname{tr}\operatorname{Cov}A / (k t)`, so with probability at least ``1 - delta``,
    :math:`\|\mathbb E A\| \le \|\bar A\| + \sqrt{V/(k\,\delta)}` for any
    :math:`V \ge \operatorname{tr}\operatorname{Cov}A` (``trace_bound``).
    """
    return mean_norm + math.sqrt(trace_bound / (k * delta))


def server_term_range(gamma: np.ndarray) -> float:
    r"""Almost-sure range of :math:`T = \frac12\|\sum_i d_i\|^2` from per-sample ranges :math:`\|d_i\| \le \gamma_i`.

    The server model's error is common to all samples, so the changes :math:`d_i` can be
    coherent: :math:`T \le \frac12 (\sum_i \gamma_i)^2` (the triangle inequality), not a sum of
    squares.
    """
    return 0.5 * float(np.sum(gamma)) ** 2


@dataclass
class _Sums:
    """Running sums over the draws of one block."""

    S: float = 0.0
    T: float = 0.0
    X: float = 0.0
    X2: float = 0.0
    A: np.ndarray | None = None

    def add(self, S: np.ndarray, T: np.ndarray, A: np.ndarray, B: int) -> None:
        X = (A**2).sum(axis=1) / B**2
        self.S += float(S.sum())
        self.T += float(T.sum())
        self.X += float(X.sum())
        self.X2 += float((X**2).sum())
        self.A = A.sum(axis=0) if self.A is None else self.A + A.sum(axis=0)


def _check_within(err: np.ndarray, hw: np.ndarray, what: str) -> None:
    """Every realised error within the dither's support (else the ranges do not hold)."""
    if np.any(np.abs(err) > hw):
        raise ValueError(
            f"{what}: a realised compression error lies outside the dither's support (overload "
            "or a non-dithered law), so the almost-sure ranges of the bound do not hold"
        )


def sampled_lemma1_bound(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    compressors: Any,
    server_compressor: Any = None,
    *,
    draws: int = 4000,
    delta: float = 0.05,
    seed: int = 0,
    progress: bool | None = False,
    blocks: Sequence[int] | None = None,
) -> SampledLemma1:
    r"""Confidence bound on Lemma 1's left side from ``draws`` dither draws (C4.8, ours).

    For every block ``m = 0..M``, with probability at least ``1 - delta`` over the draws,
    :math:`\mathbb E\|\nabla_m F_B(\Phi_m) - \nabla_m F_B(\hat\Phi_m)\|^2 \le` ``bound[m]``
    (expectation over the dither; batch and parameters fixed, at a round start). See the module
    docstring for the statement and ``docs/tight_term.rst`` for the proof.

    Parameters
    ----------
    parties, server, inputs, y
        As in :func:`cvfl_sim.bounds.tight_term.tight_lemma1_bound` (a linear softmax head).
    compressors : Compressor or sequence of Compressor
        :math:`C_m` of the parties: dithered ``ScalarQuantizer`` or ``HexLatticeQuantizer``, or
        ``Identity``; their own ``roundtrip`` draws the errors.
    server_compressor : Compressor, optional
        :math:`C_0` of the flattened server model (``None``: not compressed).
    draws : int
        Dither draws ``k`` (at least 100).
    delta : float
        Confidence parameter in ``(0, 1)``: each block's bound fails with probability at most
        ``delta``.
    seed : int
        Seed of the draws.
    progress : bool or None
        A progress bar over the draws (``None``: on a terminal or in a notebook).
    blocks : sequence of int, optional
        Only these blocks (``0`` the server, ``m`` party ``m``); the others are ``nan``. The
        draws are the same; the other blocks' sums are not formed.

    Returns
    -------
    SampledLemma1

    Raises
    ------
    ValueError
        Bad arguments, a non-linear head, a biased compressor, or a realised error outside the
        dither's support.
    """
    from cvfl_theory._validate import check_int_in_range, check_real

    from ..vfl.progress import progress_bar
    from ..vfl.threads import blas_threads

    k = check_int_in_range(draws, "draws", 100, 10**8)
    delta = check_real(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    seed = check_int_in_range(seed, "seed", 0, 2**63 - 1)
    pb = _prepare(parties, server, inputs, y, compressors, server_compressor)
    M, B, K, P, off, hw, hw0 = pb.M, pb.B, pb.K, pb.P, pb.off, pb.hw, pb.hw0
    if blocks is None:
        wanted = set(range(M + 1))
    else:
        wanted = {check_int_in_range(b, "blocks[...]", 0, M) for b in blocks}
        if not wanted:
            raise ValueError(f"blocks must name at least one block in 0..{M}, got {blocks!r}")
    Hc, W, bias, Y, p0, H, Ht = pb.Hc, pb.W, pb.bias, pb.Y, pb.p0, pb.H, pb.Ht
    comps, server_compressor, theta0 = pb.comps, pb.server_compressor, pb.theta0
    f64, nW = torch.float64, W.size
    # events: S, the mean vector and (with a compressed server model) T, each at delta / events
    events = 3 if hw0 > 0 else 2
    L = math.log(events / delta)
    # (range of S, c and d of E S^2 <= c E S + d (E S)^2, range of T), per block
    ranges = []
    for beta, gamma in _ranges(pb):
        b_S = float((beta**2).sum())
        if gamma is not None:  # samples dependent through the server error: E S^2 <= b_S E S
            ranges.append((b_S, b_S, 0.0, server_term_range(gamma)))
        else:  # independent samples with 0 <= S_i <= beta_i^2
            ranges.append((b_S, float((beta**2).max()), 1.0, 0.0))
    poincare = _poincare_constants(pb)
    Jflat = [Jm.reshape(B * Jm.shape[1], -1) for Jm in pb.J]

    # ---- the draws ----
    exact = [error_kind(c) == "none" for c in comps]
    sums = [_Sums() for _ in range(M + 1)]
    gens = [np.random.default_rng([seed, j]) for j in range(M + 2)]
    bar = progress_bar(k, progress, "Lemma-1 dither draws", unit="draw")
    try:
        with blas_threads(1):  # many small stacked matmuls: one BLAS thread is faster
            done = 0
            while done < k:
                R = min(_CHUNK, k - done)
                # R draws in one call: R copies of the rows (every range statistic the
                # compressors use -- a row's or the tensor's min, max or norm -- is the same on
                # the copies, and each copy gets its own dither; checked below against the support)
                Eps = np.zeros((R, B, P))
                for j, (c, h) in enumerate(zip(comps, Ht)):
                    if exact[j]:  # Identity: no error (float32 rounding ignored, as in hw)
                        continue
                    got = c.roundtrip(h.repeat(R, 1), rng=gens[j]).to(f64).cpu().numpy()
                    Eps[:, :, off[j] : off[j + 1]] = got.reshape(R, B, -1) - H[j][None]
                E0 = np.zeros((R, nW + K))
                E0b = np.zeros((R, nW + K))
                if hw0 > 0:
                    t0 = theta0.numpy()
                    for E_, g in ((E0, gens[M]), (E0b, gens[M + 1])):
                        got = server_compressor.roundtrip(theta0.repeat(R, 1), rng=g)
                        E_[:] = got.to(f64).numpy() - t0
                _check_within(Eps, hw[None], "the parties' embeddings")
                if hw0 > 0:
                    _check_within(np.concatenate([E0, E0b], 1), np.array(hw0), "the server model")
                if 0 in wanted:
                    _server_block(sums[0], Hc, Eps, W, bias, Y, p0, B)
                for m in range(M):
                    if m + 1 not in wanted:
                        continue
                    _party_block(
                        sums[m + 1],
                        m,
                        Hc,
                        Eps,
                        E0,
                        E0b,
                        W,
                        bias,
                        Y,
                        p0,
                        off,
                        pb.Kmats[m],
                        Jflat[m],
                        B,
                        hw0 > 0,
                    )
                done += R
                bar.update(R)
    finally:
        bar.close()

    # ---- the bound ----
    out = {n: np.zeros(M + 1) for n in ("bound", "est", "se", "var", "srv", "mean", "ratio")}
    for m, (s, (b_S, c_S, d_S, b_T)) in enumerate(zip(sums, ranges)):
        if m not in wanted:
            for v in out.values():
                v[m] = math.nan
            continue
        U_S = nonnegative_mean_bound(s.S / k, c_S, d_S, k, L)
        # E T^2 <= min(b_T E T, c_P E T + (E T)^2): the smaller root of Maurer's quadratic
        U_T = nonnegative_mean_bound(s.T / k, b_T, 0.0, k, L) if b_T > 0 else 0.0
        c_P = poincare[m]
        if b_T > 0 and c_P is not None:
            U_T = min(U_T, nonnegative_mean_bound(s.T / k, c_P, 1.0, k, L))
        assert s.A is not None
        # Chebyshev: E||A_bar - E A||^2 = tr Cov(A) / k <= (E S + E T) / k
        w = mean_vector_bound(float(np.linalg.norm(s.A / k)), U_S + U_T, k, delta / events)
        out["bound"][m] = (U_S + U_T + w * w) / B**2
        out["var"][m], out["srv"][m], out["mean"][m] = U_S / B**2, U_T / B**2, w * w / B**2
        mx = s.X / k
        out["est"][m] = mx
        out["se"][m] = math.sqrt(max(s.X2 / k - mx * mx, 0.0) / (k - 1))
        out["ratio"][m] = b_S / (s.S / k) if s.S > 0 else math.inf
    return SampledLemma1(
        out["bound"],
        out["est"],
        out["se"],
        out["var"],
        out["srv"],
        out["mean"],
        out["ratio"],
        k,
        delta,
        B,
    )


@dataclass(frozen=True)
class _Problem:
    """The float64 arrays of one bound: models evaluated on the batch, supports, Jacobians."""

    M: int
    B: int
    K: int
    P: int
    off: np.ndarray  # (M + 1,) column offsets of the parties' embeddings
    Ht: list[torch.Tensor]  # the parties' embeddings (float64 tensors, for the compressors)
    H: list[np.ndarray]
    Hc: np.ndarray  # (B, P) all embeddings
    W: np.ndarray  # (K, P) the head
    bias: np.ndarray
    labels: np.ndarray
    Y: np.ndarray  # (B, K) one-hot labels
    p0: np.ndarray  # (B, K) probabilities at the exact view
    hw: np.ndarray  # (B, P) half-widths of the parties' dither supports
    hw0: float  # half-width of the server model's (0: not compressed)
    J: list[np.ndarray]  # (B, P_m, n_m) per-sample Jacobians of the parties
    Kmats: list[np.ndarray]  # (B, P_m, P_m) their Gram matrices J_i J_i^T
    u0: np.ndarray  # (B, K) logits at the exact view
    comps: list[Any]
    server_compressor: Any
    theta0: torch.Tensor  # (1, n_0) the flattened server model


def _prepare(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    compressors: Any,
    server_compressor: Any,
) -> _Problem:
    """Check the arguments (before any work) and evaluate everything the bound needs."""
    M, B = check_lemma1_models(parties, server, inputs, y)
    if linear_softmax_head(server) is None:
        raise ValueError(
            "sampled_lemma1_bound needs a linear server head (an nn.Linear with bias, or the "
            f"toolkit's LinearHead, without hooks); got {type(server).__name__}"
        )
    comps = list(compressors) if isinstance(compressors, Sequence) else [compressors] * M
    if len(comps) != M:
        raise ValueError(f"compressors must be one compressor or M = {M}, got {len(comps)}")
    kinds = [error_kind(c) for c in comps]
    kind0 = error_kind(server_compressor)

    f64 = torch.float64
    # float64 copies: the draws follow the dither's law without float32 rounding
    parties = [copy.deepcopy(p).to(device="cpu", dtype=f64) for p in parties]
    server = copy.deepcopy(server).to(device="cpu", dtype=f64)
    inputs = [x.detach().to(device="cpu", dtype=f64) for x in inputs]
    head = linear_softmax_head(server)
    assert head is not None
    W = head.weight.detach().numpy()
    bias = head.bias.detach().numpy()
    K = W.shape[0]
    with torch.no_grad():
        Ht = [p(x).detach() for p, x in zip(parties, inputs)]
        theta0 = flat_params(server).reshape(1, -1)
    H = [h.numpy() for h in Ht]
    sizes = [h.shape[1] for h in H]
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    Hc = np.concatenate(H, axis=1)
    P = Hc.shape[1]
    if W.shape[1] != P:
        raise ValueError(f"the head takes {W.shape[1]} inputs, the embeddings have {P}")
    labels = y.detach().cpu().numpy().astype(np.int64)
    if labels.min() < 0 or labels.max() >= K:
        raise ValueError(f"y must hold class labels in [0, {K - 1}] (the head has K = {K})")
    # half-widths of the dither's support per component (rows: samples)
    hw = np.concatenate(
        [
            np.repeat(np.sqrt(max_error_sq(kd) * error_variances(c, h))[:, None], sz, axis=1)
            for c, h, kd, sz in zip(comps, Ht, kinds, sizes)
        ],
        axis=1,
    )
    hw0 = float(np.sqrt(max_error_sq(kind0) * error_variances(server_compressor, theta0)[0]))
    # a margin for float64 rounding of the reconstructions (checked on every draw)
    hw, hw0 = hw * (1.0 + 1e-9), hw0 * (1.0 + 1e-9)
    J = [j.detach().to(f64).cpu().numpy() for j in party_jacobians(parties, inputs)]
    u0 = Hc @ W.T + bias
    return _Problem(
        M,
        B,
        K,
        P,
        off,
        Ht,
        H,
        Hc,
        W,
        bias,
        labels,
        np.eye(K)[labels],
        _softmax(u0),
        hw,
        hw0,
        J,
        [Jm @ Jm.transpose(0, 2, 1) for Jm in J],
        u0,
        comps,
        server_compressor,
        theta0,
    )


@dataclass(frozen=True)
class _PartyBox:
    """What party block ``m``'s ranges and Poincaré constant share (float64, one row a sample)."""

    Pm: int
    Jop: np.ndarray  # (B,) ||J_i||
    hwm: np.ndarray  # (B, P) half-widths of the other parties' errors (own block 0)
    rho_e: np.ndarray  # (B, K, K) sup of Delta_c - Delta_k from the others' errors
    rho_0: np.ndarray  # (B, K, K) ... from the server error alone
    p: np.ndarray  # (B, K) probabilities at the exact view
    up: np.ndarray  # (B, K) softmax range on the box of the summed changes
    lo: np.ndarray
    off_label: np.ndarray  # (B,) >= sum_c |p^_c - y_c| = 2 (1 - p^_y) over the box


def _party_box(pb: _Problem, m: int) -> _PartyBox:
    """The box the logits of party block ``m``'s samples can reach, and what follows from it."""
    B, K, hw, hw0, off = pb.B, pb.K, pb.hw, pb.hw0, pb.off
    Jop = np.sqrt(np.linalg.eigvalsh(pb.Kmats[m])[:, -1].clip(min=0.0))
    seen = np.ones(pb.P, dtype=bool)
    seen[off[m] : off[m + 1]] = False
    hwm = hw * seen
    kappa = hw0 * hwm.sum(1)  # |sum_u E_cu eps_u| per class
    # sup of Delta_c - Delta_k: the others' errors through W-hat (W plus the server error,
    # kappa), and the server error alone (E h + e_b, rows c and k independent)
    rho_e = _pair_sup(pb.W, hwm) + 2.0 * kappa[:, None, None]
    rho_0 = np.broadcast_to((2.0 * hw0 * (np.abs(pb.Hc).sum(1) + 1.0))[:, None, None], (B, K, K))
    p, up, lo = softmax_box(pb.u0, rho_e + rho_0)
    off_label = 2.0 * (1.0 - lo[np.arange(B), pb.labels])
    return _PartyBox(int(off[m + 1] - off[m]), Jop, hwm, rho_e, rho_0, p, up, lo, off_label)


def _ranges(pb: _Problem) -> list[tuple[np.ndarray, np.ndarray | None]]:
    r"""Per block, the ranges :math:`(\beta_i, \gamma_i)` of :func:`per_sample_ranges`.

    ``gamma`` is ``None`` for the server block and without a server error.
    """
    B, W, Hc, hw, hw0, off = pb.B, pb.W, pb.Hc, pb.hw, pb.hw0, pb.off
    u0 = pb.u0
    out: list[tuple[np.ndarray, np.ndarray | None]] = []
    # server block: Delta = W eps (all parties), no server error
    p, up, lo = softmax_box(u0, _pair_sup(W, hw))
    tau = _tau(p, up, lo)
    e = np.sqrt((hw**2).sum(1))
    beta0 = np.sqrt((tau**2).sum(1)) * np.sqrt((np.linalg.norm(Hc, axis=1) + e) ** 2 + 1.0)
    beta0 += np.linalg.norm(pb.p0 - pb.Y, axis=1) * e
    out.append((beta0, None))
    top = pb.p0.argmax(axis=1)
    for m, Jm in enumerate(pb.J):  # (B, P_m, n_m)
        bx = _party_box(pb, m)
        Pm, Jop, up, lo = bx.Pm, bx.Jop, bx.up, bx.lo
        Km = pb.Kmats[m]
        Wm = W[:, off[m] : off[m + 1]]
        jw = np.sqrt(np.einsum("kp,bpq,kq->bk", Wm, Km, Wm).clip(min=0.0))  # ||J_i^T W_m[c]||
        nu = jw + Jop[:, None] * hw0 * math.sqrt(Pm)  # >= ||J_i^T W-hat_m[c]||
        # the changes of p sum to zero, so W-hat_m^T dp = sum_{c != t} dp_c (W-hat_m[c] -
        # W-hat_m[t]) for the top class t: often half the bound (dp_t ~ -sum of the others)
        Dm = Wm[None] - Wm[top][:, None, :]  # (B, K, P_m)
        nu_t = np.sqrt(np.einsum("bkp,bpq,bkq->bk", Dm, Km, Dm).clip(min=0.0))
        nu_t += Jop[:, None] * 2.0 * hw0 * math.sqrt(Pm)
        nu_t[np.arange(B), top] = 0.0
        _, up0, _ = softmax_box(u0, bx.rho_0)
        tau_s = _ratio_change(up0, bx.rho_e)
        # also the exact range on the box: at u0 without a server error (the base point is
        # then u0, and the box of the summed changes is the others' alone); with one, p at the
        # base v and at v + Delta both lie in the box of the summed changes, so |dp_c| <= up_c -
        # lo_c there
        tau_s = np.minimum(tau_s, _tau(bx.p, up, lo) if hw0 == 0 else up - lo)
        beta = np.minimum((tau_s * nu).sum(1), (tau_s * nu_t).sum(1))
        if hw0 == 0:
            out.append((beta, None))
            continue
        width = up - lo
        change = np.minimum((width * nu).sum(1), (width * nu_t).sum(1))
        gamma = 2.0 * Jop * hw0 * math.sqrt(Pm) * bx.off_label + change
        out.append((beta, gamma))
    return out


def _sup_p_one_minus_p(upper: np.ndarray, lower: np.ndarray) -> np.ndarray:
    r""":math:`\sup p(1 - p)` over :math:`p \in [\mathrm{lo}, \mathrm{up}]`, elementwise."""
    return np.where(
        upper <= 0.5, upper * (1.0 - upper), np.where(lower >= 0.5, lower * (1.0 - lower), 0.25)
    )


def poincare_factor(half_width: float) -> float:
    r"""Poincaré constant :math:`4w^2/\pi^2` of a uniform law on a convex set of diameter :math:`2w`.

    :math:`\operatorname{Var} f(U) \le (4w^2/\pi^2)\,\mathbb E\|\nabla f(U)\|^2` for every
    smooth ``f`` (Payne--Weinberger: the Neumann gap of a convex domain of diameter
    :math:`\ell` is at least :math:`\pi^2/\ell^2`). Equality on an interval
    :math:`[-w, w]` for :math:`f(u) = \sin(\pi u / 2w)`.
    """
    from cvfl_theory._validate import check_real

    w = check_real(half_width, "half_width", 0.0, math.inf, high_open=True)
    return 4.0 * w**2 / math.pi**2


def _poincare_constants(pb: _Problem) -> list[float | None]:
    r"""Per block, :math:`c_P` with :math:`\operatorname{Var} T \le c_P\,\mathbb E T` (Poincaré).

    Every error unit is uniform on a convex set of diameter :math:`2 w_j` (an interval, or a
    hexagon inside its circumscribed disc), independently, so for a smooth ``f`` of all of them
    (Payne--Weinberger, tensorised) :math:`\operatorname{Var} f \le \sum_j (4 w_j^2/\pi^2)\,
    \mathbb E\|\partial_j f\|^2`. For :math:`T = \frac12\|D\|^2` that is at most
    :math:`(4/\pi^2)\,\mathbb E\|D\|^2 \Lambda^2 = (8/\pi^2)\Lambda^2\,\mathbb E T`, with
    :math:`\Lambda` a bound on the operator norm of :math:`D`'s Jacobian in the scaled
    coordinates :math:`\varepsilon_j / w_j` over the support: :math:`\Lambda^2 \le 2(\sum_i
    g_i)^2 + \sum_i \mu_i^2`, the server error's part (common to the samples: a sum) and the
    rows' own errors (one block each: a sum of squares), with

    .. math:: g_i = w_0\|J_i\|\bigl(\|\hat p_i - y_i\|_1 + \|\hat W_m\|\,s_i\,
              \sqrt{\|\hat z_i\|^2 + 1}\bigr), \qquad
              \mu_i = 2\|J_i\|\,\|\hat W_m\|\,s_i\,\|\hat W_{-m}\operatorname{diag}(w_i)\|,

    :math:`s_i = 2\max_c \sup p_c(1 - p_c) \ge \|\operatorname{diag}\hat p - \hat p\hat
    p^\top\|` (Gershgorin) over the box, :math:`\|\hat W_m\| \le \|W_m\| + w_0\sqrt{K
    P_m}`. ``None`` for the server block and without a server error.
    """
    K, W, Hc, hw0, off = pb.K, pb.W, pb.Hc, pb.hw0, pb.off
    out: list[float | None] = [None]
    if hw0 == 0:
        return out + [None] * pb.M
    for m in range(pb.M):
        bx = _party_box(pb, m)
        Pm, Jop, hwm = bx.Pm, bx.Jop, bx.hwm
        s_i = 2.0 * _sup_p_one_minus_p(bx.up, bx.lo).max(axis=1)
        Wm = W[:, off[m] : off[m + 1]]
        wm_hat = float(np.linalg.norm(Wm, 2)) + hw0 * math.sqrt(K * Pm)
        z_hat = np.linalg.norm(Hc, axis=1) + np.linalg.norm(hwm, axis=1)
        g = hw0 * Jop * (bx.off_label + wm_hat * s_i * np.sqrt(z_hat**2 + 1.0))
        Wo = W[None, :, :] * hwm[:, None, :]  # (B, K, P): W diag(w_i), own block zero
        wo = np.linalg.norm(Wo, ord=2, axis=(1, 2)) + hw0 * math.sqrt(K) * np.linalg.norm(
            hwm, axis=1
        )
        mu = 2.0 * Jop * wm_hat * s_i * wo
        lam2 = 2.0 * float(g.sum()) ** 2 + float((mu**2).sum())
        # scaled units (half-width 1); ||grad T||^2 <= 2 Lambda^2 T for T = ||D||^2 / 2
        out.append(poincare_factor(1.0) * 2.0 * lam2)
    return out


def per_sample_ranges(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    compressors: Any,
    server_compressor: Any = None,
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    r"""The almost-sure per-sample ranges behind :func:`sampled_lemma1_bound`, one pair per block.

    For block ``m`` (``0``: the server) and every sample ``i``, over every error the dither's
    support allows,

    .. math:: \|a_i(\varepsilon_0, \varepsilon_i) - a_i(\varepsilon_0, 0)\| \le \beta_i,
              \qquad \|a_i(\varepsilon_0, \varepsilon_i) - a_i(\varepsilon_0', \varepsilon_i)\|
              \le \gamma_i,

    with :math:`a_i` sample ``i``'s gradient of block ``m`` at the compressed view (row ``i`` of
    the other parties' embeddings, and for a party the server model, compressed). The bounds
    come from the exact softmax range on the box the logits can reach (:func:`softmax_box`).

    Returns
    -------
    list of (numpy.ndarray, numpy.ndarray or None)
        ``(beta, gamma)``, each ``(B,)``; ``gamma`` is ``None`` for the server block and
        whenever the server model is not compressed.
    """
    return _ranges(_prepare(parties, server, inputs, y, compressors, server_compressor))


def poincare_constants(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    compressors: Any,
    server_compressor: Any = None,
) -> list[float | None]:
    r"""The constants :math:`c_P` of :math:`\operatorname{Var} T \le c_P\,\mathbb E T` behind :func:`sampled_lemma1_bound`.

    One per block (``None`` for the server block and without a server error):
    :math:`c_P = (8/\pi^2)\Lambda^2`, with :math:`\Lambda` the bound on the operator norm of
    the Jacobian of :math:`D = A(\varepsilon_0, \varepsilon) - A(\varepsilon_0',
    \varepsilon)` in the errors scaled by their supports' half-diameters (see the docs' C4.8
    page for the proof).
    """
    return _poincare_constants(_prepare(parties, server, inputs, y, compressors, server_compressor))


def _softmax(u: np.ndarray) -> np.ndarray:
    e = np.exp(u - u.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _server_block(
    s: _Sums,
    Hc: np.ndarray,
    Eps: np.ndarray,
    W: np.ndarray,
    bias: np.ndarray,
    Y: np.ndarray,
    p0: np.ndarray,
    B: int,
) -> None:
    r"""Block 0: :math:`a_i = (\hat p_i - y_i)\otimes[\hat h_i; 1] - (p_i - y_i)\otimes[h_i; 1]`."""
    Hh = Hc[None] + Eps  # (R, B, P)
    ph = _softmax(Hh @ W.T + bias)
    qh, q = ph - Y, p0 - Y
    # ||a_i||^2 = |qh|^2 (|hh|^2 + 1) - 2 (qh.q)(hh.h + 1) + |q|^2 (|h|^2 + 1)
    S = (
        (qh**2).sum(2) * ((Hh**2).sum(2) + 1.0)
        - 2.0 * (qh * q).sum(2) * ((Hh * Hc).sum(2) + 1.0)
        + (q**2).sum(1) * ((Hc**2).sum(1) + 1.0)
    ).sum(1)
    A = np.concatenate(
        [
            (qh.transpose(0, 2, 1) @ Hh - (q.T @ Hc)[None]).reshape(len(Eps), -1),
            (qh - q).sum(1),
        ],
        axis=1,
    )
    s.add(S, np.zeros(len(Eps)), A, B)


def _party_block(
    s: _Sums,
    m: int,
    Hc: np.ndarray,
    Eps: np.ndarray,
    E0: np.ndarray,
    E0b: np.ndarray,
    W: np.ndarray,
    bias: np.ndarray,
    Y: np.ndarray,
    p0: np.ndarray,
    off: np.ndarray,
    Km: np.ndarray,
    Jflat: np.ndarray,
    B: int,
    server_error: bool,
) -> None:
    r"""Party block ``m + 1``: :math:`a_i = J_i^\top(\hat W_m^\top(\hat p_i - y_i) - W_m^\top(p_i - y_i))`."""
    R = len(Eps)
    K, P = W.shape
    sl = slice(int(off[m]), int(off[m + 1]))
    Z = Hc[None] + Eps
    Z[:, :, sl] = Hc[:, sl]  # the party's own embedding is fresh

    def v_at(E: np.ndarray, Zr: np.ndarray) -> np.ndarray:
        Wh = W[None] + E[:, : K * P].reshape(R, K, P)
        bh = bias[None] + E[:, K * P :]
        # stacked matmuls (BLAS per draw), not einsum: ~10x faster here
        ph = _softmax(Zr @ Wh.transpose(0, 2, 1) + bh[:, None, :])
        return (ph - Y) @ Wh[:, :, sl]  # (R, B, P_m)

    v = v_at(E0, Z)
    v0 = (p0 - Y) @ W[:, sl]  # (B, P_m)
    A = (v - v0[None]).reshape(R, -1) @ Jflat
    if server_error:
        d = v - v_at(E0, np.broadcast_to(Hc, Z.shape))
        T = 0.5 * (((v - v_at(E0b, Z)).reshape(R, -1) @ Jflat) ** 2).sum(1)
    else:
        d = v - v0[None]
        T = np.zeros(R)
    S = np.einsum("rbp,bpq,rbq->r", d, Km, d)
    s.add(S, T, A, B)
