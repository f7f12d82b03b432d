r"""Lemma 1's tight bound at every local step of a round (C4.9 -- ours, not the paper's).

The tight bound of C4.5 (:mod:`cvfl_sim.bounds.tight_term`) bounds
:math:`\mathbb E_\varepsilon\|g_m(\theta_m, \varepsilon)\|^2`, with

.. math:: g_m(u, \varepsilon) = \nabla F_m(u) - \nabla\hat F_m(u;\varepsilon),

at a point :math:`\theta_m` fixed before the round's dither :math:`\varepsilon` is drawn.
:math:`F_m(u)` is the batch loss as a function of block ``m``'s parameters ``u`` at Lemma 1's
uncompressed point (the others' round-start embeddings :math:`H^{t_0}`, for a party the head
:math:`\theta_0^{t_0}`), :math:`\hat F_m` the same at the compressed point (:math:`\hat H^{t_0}`,
:math:`C_0(\theta_0^{t_0})`). At a later local step ``k`` of a round the block's point
:math:`\theta_m^k` was reached by ``k`` steps on :math:`\hat F_m`, so it depends on
:math:`\varepsilon`, and C4.5 evaluated there is not a bound. This module bounds Lemma 1's left
side at every local step through the **drift** from a path that does not depend on the dither.

**Statement.** Let :math:`\bar\theta^0 = \theta^0` (the round start) and
:math:`\bar\theta^{k+1} = \bar\theta^k - \eta\nabla F_m(\bar\theta^k)`, the block's local steps
on the *uncompressed* point (deterministic given the round start and its batch). Let
:math:`t_k^2 \ge \mathbb E\|g_m(\bar\theta^k, \varepsilon)\|^2` (C4.5 at :math:`\bar\theta^k`), let
:math:`F_m` be convex with :math:`\|\nabla^2 F_m\| \le L_m` everywhere, and let
:math:`\Lambda_m` bound the Lipschitz constant of :math:`u \mapsto g_m(u, \varepsilon)` for every
:math:`\varepsilon` on the dither's support. With :math:`\rho_m = \max(1, \eta L_m - 1)`,

.. math:: A_0 = t_0,\quad D_0 = 0,\qquad D_{k+1} = \rho_m D_k + \eta A_k,\qquad
          A_k = t_k + \Lambda_m D_k,

the left side at local step ``k`` obeys
:math:`\mathbb E\|\nabla_m F_B(\Phi_m^k) - \nabla_m F_B(\hat\Phi_m^k)\|^2 \le A_k^2`.

**Proof.** With :math:`\delta^k = \theta^k - \bar\theta^k`,
:math:`\delta^{k+1} = (I - \eta\bar H^k)\delta^k + \eta g_m(\theta^k, \varepsilon)`, where
:math:`\bar H^k = \int_0^1\nabla^2F_m(\bar\theta^k + s\delta^k)\,ds` has its eigenvalues in
:math:`[0, L_m]`, so :math:`\|I - \eta\bar H^k\| \le \rho_m` and
:math:`\|\delta^{k+1}\| \le \rho_m\|\delta^k\| + \eta\|g_m(\theta^k, \varepsilon)\|`; and
:math:`\|g_m(\theta^k, \varepsilon)\| \le \|g_m(\bar\theta^k, \varepsilon)\| + \Lambda_m\|\delta^k\|`,
for every draw. Minkowski's inequality in :math:`L^2` of the dither turns both into the
recursion for :math:`A_k \ge \sqrt{\mathbb E\|g_m(\theta^k, \varepsilon)\|^2}` and
:math:`D_k \ge \sqrt{\mathbb E\|\delta^k\|^2}`, by induction on ``k``. The full text is in the
docs (``docs/tight_term.rst``, "Every local step of a round").

**Constants of the analytic model** (linear parties :math:`h_m = A_m x + c_m`, linear softmax
head :math:`z \mapsto Wz + b`, cross entropy; :math:`S_i = \mathrm{diag}(p_i) - p_ip_i^\top
\preceq \tfrac12 I`). Party ``m``: :math:`\nabla^2F_m = \frac1B\sum_i \tilde x_i\tilde x_i^\top
\otimes W_m^\top S_iW_m \succeq 0`, so :math:`L_m = \tfrac12\|W_m\|_2^2\,\lambda_{\max}(\tilde
X_m^\top\tilde X_m/B)` (:math:`\tilde x = (x, 1)`, :math:`W_m` the head's columns of block
``m``); :math:`\hat F_m` has :math:`\hat W_m = W_m + \varepsilon_{W_m}`, whose norm is at most
:math:`\|W_m\|_2 + \|\varepsilon_{W_m}\|_F` on the support, and :math:`\Lambda_m = \max(L_m, \hat
L_m) = \hat L_m`: both Hessians are positive semi-definite, so the eigenvalues of their
difference lie in :math:`[-\hat L_m, L_m]`. The server: :math:`\nabla^2F_0 =
\frac1B\sum_i\tilde z_i\tilde z_i^\top\otimes S_i`, :math:`L_0 = \tfrac12\lambda_{\max}(\tilde
Z^\top\tilde Z/B)` on :math:`H^{t_0}`, and :math:`\hat L_0` the same with
:math:`\|\tilde Z\|_2 + \|E\|_F` for the compressed embeddings. Every norm is a closed form; no
constant is estimated. For other models :math:`F_m` is not convex and :math:`L_m` is not
certified: :func:`round_tight_bounds` refuses them.

The inflation is governed by :math:`\eta\Lambda_m k`: with :math:`\rho_m = 1`,
:math:`A_k \le \max_{j \le k} t_j\,(1 + \eta\Lambda_m)^k`. Under the step condition of
Theorem 4.2 in the block's own constant, :math:`\eta Q L_m \le 1/16`, that is at most
:math:`e^{\Lambda_m/(16 L_m)}`: :math:`\Lambda_m/L_m = \hat L_m/L_m` is 1.1--1.4 at 4 bits and
1.7--3.4 at 2 bits (measured on breast cancer after training, the server model compressed too),
so 1.15--1.55 on the squared bound. With a large step
or many local steps it grows geometrically, and the bound says so by its size.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..vfl.models import LinearHead, MLPEmbedding
from ._autodiff import flat_params, plain_linear, server_loss, with_block
from ._jacobians import EmbeddingJacobian
from .analytic_constants import is_analytic
from .tight_term import (
    SOFTMAX_LIPSCHITZ,
    error_kind,
    error_variances,
    max_error_sq,
    tight_lemma1_bound_for,
)

__all__ = [
    "DriftConstants",
    "RoundTightBound",
    "contraction",
    "drift_bounds",
    "drift_constants",
    "reference_path",
    "round_sampled_bounds",
    "round_tight_bounds",
]


@dataclass(frozen=True)
class DriftConstants:
    r"""The constants of the drift recursion, one entry per block ``m = 0..M`` (server first).

    Attributes
    ----------
    smoothness : numpy.ndarray
        :math:`L_m`, a bound on :math:`\|\nabla^2 F_m\|` everywhere (the uncompressed point).
    lipschitz : numpy.ndarray
        :math:`\Lambda_m = \max(L_m, \hat L_m)`, a Lipschitz constant of :math:`u \mapsto
        g_m(u, \varepsilon)` for every dither on the support.
    contraction : numpy.ndarray
        :math:`\rho_m = \max(1, \eta L_m - 1)`, the norm of one uncompressed step's Jacobian.
    """

    smoothness: np.ndarray
    lipschitz: np.ndarray
    contraction: np.ndarray


@dataclass(frozen=True)
class RoundTightBound:
    r"""Lemma 1's left side bounded at every local step of one round (C4.9, ours).

    Attributes
    ----------
    bound : numpy.ndarray
        ``(K, M + 1)``: :math:`A_k^2`, a bound on the expectation over the round's dither of
        Lemma 1's left side at local step ``k`` (row ``k``), each block at its own point.
    reference : numpy.ndarray
        ``(K, M + 1)``: :math:`t_k^2`, C4.5 at the reference path's points (row 0 the round
        start, where ``bound`` equals it).
    constants : DriftConstants
    eta : float
        The round's step size.
    """

    bound: np.ndarray
    reference: np.ndarray
    constants: DriftConstants
    eta: float


def drift_bounds(reference: Any, eta: float, lipschitz: Any, contraction: Any) -> np.ndarray:
    r"""The recursion of C4.9: :math:`A_k^2` from the reference bounds :math:`t_k^2`.

    Parameters
    ----------
    reference : array_like
        ``(K, M + 1)`` bounds :math:`t_k^2 \ge \mathbb E\|g_m(\bar\theta^k, \varepsilon)\|^2` at
        the reference path's points.
    eta : float
        The step size, ``> 0``.
    lipschitz, contraction : array_like
        ``(M + 1,)`` :math:`\Lambda_m \ge 0` and :math:`\rho_m \ge 1`.

    Returns
    -------
    numpy.ndarray
        ``(K, M + 1)``: :math:`A_k^2` with :math:`A_k = t_k + \Lambda_m D_k`, :math:`D_0 = 0`,
        :math:`D_{k+1} = \rho_m D_k + \eta A_k`.

    Examples
    --------
    One block, :math:`t_k = 1`, :math:`\eta = 0.1`, :math:`\Lambda = 2`, :math:`\rho = 1`:
    :math:`A_1 = 1 + 2(0.1) = 1.2`, :math:`A_2 = 1 + 2(0.1 + 0.12) = 1.44`.

    >>> drift_bounds([[1.0], [1.0], [1.0]], 0.1, [2.0], [1.0]).ravel().round(4).tolist()
    [1.0, 1.44, 2.0736]
    """
    t2 = np.asarray(reference, dtype=np.float64)
    if t2.ndim != 2 or t2.shape[0] < 1:
        raise ValueError(f"reference must be a (K, M + 1) array with K >= 1, got shape {t2.shape}")
    if not np.all(t2 >= 0):  # also refuses NaN
        raise ValueError("reference must hold squared bounds >= 0 (no NaN)")
    lam = np.asarray(lipschitz, dtype=np.float64)
    rho = np.asarray(contraction, dtype=np.float64)
    for name, v, low in (("lipschitz", lam, 0.0), ("contraction", rho, 1.0)):
        if v.shape != (t2.shape[1],) or not np.all(v >= low) or not np.all(np.isfinite(v)):
            raise ValueError(f"{name} must be {t2.shape[1]} finite values >= {low:g}")
    if not (isinstance(eta, (int, float)) and math.isfinite(eta) and eta > 0):
        raise ValueError(f"eta must be a finite step size > 0, got {eta!r}")
    t = np.sqrt(t2)
    A = np.empty_like(t)
    D = np.zeros(t.shape[1])
    for k in range(t.shape[0]):
        A[k] = t[k] + lam * D
        D = rho * D + eta * A[k]
    return np.asarray(A**2)


def contraction(eta: float, smoothness: Any) -> np.ndarray:
    r""":math:`\rho = \max(1, \eta L - 1)`, the contraction of one uncompressed step.

    The norm of :math:`I - \eta\bar H` for :math:`0 \preceq \bar H \preceq L I` (a convex block:
    no contraction below 1 without strong convexity).

    >>> contraction(0.1, [2.0, 30.0]).tolist()
    [1.0, 2.0]
    """
    return np.maximum(1.0, eta * np.asarray(smoothness, dtype=np.float64) - 1.0)


def _lambda_max(X: np.ndarray) -> float:
    """Largest eigenvalue of ``XᵀX`` (0 for an empty matrix)."""
    G = X.T @ X if X.shape[0] >= X.shape[1] else X @ X.T
    return float(max(np.linalg.eigvalsh(G)[-1], 0.0)) if G.size else 0.0


def _augmented(x: np.ndarray, bias: bool) -> np.ndarray:
    """``x`` with a column of ones where the layer has a bias."""
    return np.hstack([x, np.ones((x.shape[0], 1))]) if bias else x


def drift_constants(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    compressors: Sequence[Any],
    server_compressor: Any,
    eta: float,
) -> DriftConstants:
    r""":math:`L_m, \Lambda_m, \rho_m` of C4.9 for the analytic model at a round start.

    ``parties`` and ``server`` hold the round-start models (the toolkit's linear parties and
    linear head); the error laws are the compressors' on the round-start embeddings and the flat
    server parameters, their supports those of :func:`~cvfl_sim.bounds.tight_term.max_error_sq`.

    Raises
    ------
    ValueError
        For a model that is not the analytic one, or a compressor without a known bounded,
        zero-mean error law (see :func:`~cvfl_sim.bounds.tight_term.error_kind`).
    """
    if not is_analytic(parties, server):
        raise ValueError(
            "the drift bound (C4.9) is proved for the analytic model only: linear parties "
            "(parties_model='linear') and a linear head (server_model='linear')"
        )
    head = plain_linear(server, LinearHead)
    assert head is not None
    W = head.weight.detach().to(torch.float64).cpu().numpy()
    with torch.no_grad():
        H = [p(x).detach().to(torch.float64).cpu().numpy() for p, x in zip(parties, inputs)]
    sizes = [h.shape[1] for h in H]
    B = H[0].shape[0]
    theta0 = flat_params(server).to(torch.float64).reshape(1, -1)
    s0 = float(error_variances(server_compressor, theta0)[0])
    c0 = max_error_sq(error_kind(server_compressor))
    L = np.zeros(len(parties) + 1)
    L_hat = np.zeros(len(parties) + 1)
    Z = _augmented(np.hstack(H), head.bias is not None)
    e_sq = 0.0  # the largest ||E||_F^2 of the embeddings' errors on the support
    off = 0
    for m, (party, x, h, comp) in enumerate(zip(parties, inputs, H, compressors), start=1):
        layer = plain_linear(party, MLPEmbedding)
        assert layer is not None
        Wm = W[:, off : off + sizes[m - 1]]
        off += sizes[m - 1]
        X = _augmented(x.detach().to(torch.float64).cpu().numpy(), layer.bias is not None)
        lam_x = _lambda_max(X) / B
        w = math.sqrt(_lambda_max(Wm))
        w_err = math.sqrt(c0 * Wm.size * s0)  # ||eps_{W_m}||_F on the support
        L[m] = SOFTMAX_LIPSCHITZ * w**2 * lam_x
        L_hat[m] = SOFTMAX_LIPSCHITZ * (w + w_err) ** 2 * lam_x
        e_sq += max_error_sq(error_kind(comp)) * h.shape[1] * float(error_variances(comp, h).sum())
    z = math.sqrt(_lambda_max(Z))
    L[0] = SOFTMAX_LIPSCHITZ * z**2 / B
    L_hat[0] = SOFTMAX_LIPSCHITZ * (z + math.sqrt(e_sq)) ** 2 / B
    # both blocks' Hessians are PSD (<= L and <= L_hat): their difference has norm <= the larger
    return DriftConstants(L, np.maximum(L, L_hat), contraction(eta, L))


def reference_path(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    eta: float,
    steps: int,
) -> list[tuple[list[nn.Module], nn.Module]]:
    r"""The uncompressed local steps :math:`\bar\theta^0, \dots, \bar\theta^{K-1}` of every block.

    ``parties`` and ``server`` hold the round start; each block steps on Lemma 1's uncompressed
    point (the others' round-start embeddings, a party's head at :math:`\theta_0^{t_0}`) with
    plain SGD of step ``eta``. Returns ``steps`` pairs ``(parties, server)`` of copies (entry 0
    the given models themselves).
    """
    with torch.no_grad():
        H = [p(x).detach() for p, x in zip(parties, inputs)]
    stale = torch.cat(H, dim=1)
    sizes = [int(h.shape[1]) for h in H]
    theta0 = flat_params(server)
    path: list[tuple[list[nn.Module], nn.Module]] = [(list(parties), server)]
    now_p = [copy.deepcopy(p) for p in parties]
    now_s = copy.deepcopy(server)
    for _ in range(steps - 1):
        with torch.enable_grad():
            grads = [
                torch.autograd.grad(
                    server_loss(server, theta0, with_block(stale, p(x), sizes, m), y),
                    list(p.parameters()),
                )
                for m, (p, x) in enumerate(zip(now_p, inputs), start=1)
            ]
            g0 = torch.autograd.grad(server_loss(now_s, None, stale, y), list(now_s.parameters()))
        with torch.no_grad():
            for p, g in zip(now_p, grads):
                for q, gq in zip(p.parameters(), g):
                    q.sub_(eta * gq)
            for q, gq in zip(now_s.parameters(), g0):
                q.sub_(eta * gq)
        path.append(([copy.deepcopy(p) for p in now_p], copy.deepcopy(now_s)))
    return path


def _round_bounds(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    compressors: Any,
    server_compressor: Any,
    eta: float,
    steps: int,
    reference_at: Callable[[int, list[nn.Module], nn.Module, list[Any]], np.ndarray],
) -> RoundTightBound:
    """C4.9 with the reference bounds ``reference_at(k, parties_k, server_k, compressors)``."""
    from cvfl_theory._validate import check_int_in_range

    K = check_int_in_range(steps, "steps", 1, 10**6)
    if not (isinstance(eta, (int, float)) and math.isfinite(eta) and eta > 0):
        raise ValueError(f"eta must be a finite step size > 0, got {eta!r}")
    M = len(parties)
    comps = list(compressors) if isinstance(compressors, Sequence) else [compressors] * M
    constants = drift_constants(parties, server, inputs, comps, server_compressor, float(eta))
    path = reference_path(parties, server, inputs, y, float(eta), K)
    reference = np.stack([reference_at(k, ps, s, comps) for k, (ps, s) in enumerate(path)])
    bound = drift_bounds(reference, float(eta), constants.lipschitz, constants.contraction)
    return RoundTightBound(bound, reference, constants, float(eta))


def round_tight_bounds(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    compressors: Any,
    server_compressor: Any,
    eta: float,
    steps: int,
    *,
    jacobians: Sequence[EmbeddingJacobian] | None = None,
    first: Any = None,
) -> RoundTightBound:
    r"""C4.9: a bound on Lemma 1's left side at each local step ``0..steps-1`` of a round.

    Parameters
    ----------
    parties, server : nn.Module
        The round-start models: the analytic model (linear parties, linear head), in the dtype
        the bound is computed in (float64 for the probe).
    inputs, y : tensors
        The round's batch, reused by every local step.
    compressors, server_compressor
        As in :func:`~cvfl_sim.bounds.tight_term.tight_lemma1_bound_for` (dithered quantizers
        or ``Identity``).
    eta : float
        The round's step size (constant within a round, as in Algorithm 1).
    steps : int
        ``K >= 1`` local steps to bound.
    jacobians : sequence of EmbeddingJacobian, optional
        The parties' embedding Jacobians (a linear party's do not depend on its parameters, so
        one set serves every point of the path).
    first : array_like, optional
        ``(M + 1,)`` C4.5 at the round start, if the caller has it.

    Returns
    -------
    RoundTightBound
        The expectations over the dither at every step are bounded (C4.5 is a bound on an
        expectation).
    """
    with torch.no_grad():
        stale = torch.cat([p(x) for p, x in zip(parties, inputs)], dim=1).detach()
    theta0 = flat_params(server)

    def reference_at(k: int, ps: list[nn.Module], s: nn.Module, comps: list[Any]) -> np.ndarray:
        if k == 0 and first is not None:
            return np.asarray(first, dtype=np.float64)
        return np.asarray(
            tight_lemma1_bound_for(
                ps,
                s,
                inputs,
                y,
                comps,
                server_compressor,
                jacobians=jacobians,
                sup_form=False,
                stale=stale if k else None,
                theta0=theta0 if k else None,
            ).bound,
            dtype=np.float64,
        )

    return _round_bounds(
        parties, server, inputs, y, compressors, server_compressor, eta, steps, reference_at
    )


def round_sampled_bounds(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    compressors: Any,
    server_compressor: Any,
    eta: float,
    steps: int,
    *,
    draws: int = 4000,
    delta: float = 0.05,
    seed: int = 0,
) -> RoundTightBound:
    r"""C4.9 with C4.8 on the reference path: every local step, with probability ``>= 1 - delta``.

    The reference bounds :math:`t_k^2` are the confidence bounds of C4.8
    (:func:`~cvfl_sim.bounds.sampled_lemma1.sampled_lemma1_bound`, ``draws`` dither draws each)
    at the points of the uncompressed local path: block ``m`` at :math:`\bar\theta_m^k`, the
    others at the round start (the point of Lemma 1 at step ``k``, the error laws those of the
    round start). All ``steps * (M + 1)`` of them hold at once with probability at least
    ``1 - delta`` over the draws (a union bound: each at level ``delta / (steps (M + 1))``), and
    then so does every row of the result (the drift recursion is deterministic). It costs
    ``1 + (steps - 1)(M + 1)`` C4.8 evaluations (after the round start one per block, each still
    drawing every party's dither): up to about ``(M + 1) steps`` times the round start's.

    Parameters
    ----------
    parties, server, inputs, y, compressors, server_compressor, eta, steps
        As in :func:`round_tight_bounds`.
    draws, delta, seed
        As in :func:`~cvfl_sim.bounds.sampled_lemma1.sampled_lemma1_bound`; ``delta`` for the
        whole round.

    Returns
    -------
    RoundTightBound
        ``bound`` row ``k``: the expectation over the dither of Lemma 1's left side at local
        step ``k``, bounded with probability at least ``1 - delta`` (all rows at once).
    """
    from cvfl_theory._validate import check_int_in_range, check_real

    from .sampled_lemma1 import sampled_lemma1_bound

    K = check_int_in_range(steps, "steps", 1, 10**6)
    level = check_real(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    M = len(parties)
    per_bound = level / (K * (M + 1))

    def reference_at(k: int, ps: list[nn.Module], s: nn.Module, comps: list[Any]) -> np.ndarray:
        if k == 0:
            return np.asarray(
                sampled_lemma1_bound(
                    parties,
                    server,
                    inputs,
                    y,
                    comps,
                    server_compressor,
                    draws=draws,
                    delta=per_bound,
                    seed=seed,
                ).bound,
                dtype=np.float64,
            )
        out = np.empty(M + 1)
        for m in range(M + 1):
            # block m at its reference point, every other block at the round start
            at_parties = [ps[j] if j == m - 1 else parties[j] for j in range(M)]
            out[m] = sampled_lemma1_bound(
                at_parties,
                s if m == 0 else server,
                inputs,
                y,
                comps,
                server_compressor,
                draws=draws,
                delta=per_bound,
                seed=seed + k * (M + 1) + m,
                blocks=[m],
            ).bound[m]
        return out

    return _round_bounds(
        parties, server, inputs, y, compressors, server_compressor, eta, K, reference_at
    )
