r"""Closed-form C3 constants of the analytic model: linear parties and a linear softmax head.

The model (``parties_model="linear"``, ``server_model="linear"`` in :class:`~cvfl_sim.CVFLConfig`):
party ``m`` embeds :math:`h_{m,i} = W_m x_{m,i} + b_m = \tilde W_m \tilde x_{m,i}` with
:math:`\tilde x = [x; 1]`, :math:`\tilde W_m = [W_m, b_m] \in \mathbb{R}^{P_m \times (D_m+1)}`; the
server (:math:`\theta_0 = \tilde A = [A, c]`, :math:`A \in \mathbb{R}^{K\times P}`,
:math:`P = \sum_m P_m`) computes logits :math:`o_i = A z_i + c = \tilde A \tilde z_i` of the
concatenated embedding :math:`z_i = [h_{1,i}; \dots; h_{M,i}]`, :math:`\tilde z_i = [z_i; 1]`, and the
loss is softmax cross entropy :math:`\ell_i = -\log \mathrm{softmax}(o_i)_{y_i}` (two classes are
two logits, as the simulator trains them). With :math:`p_i = \mathrm{softmax}(o_i)`:

.. math::
    g_i = \nabla_o \ell_i = p_i - e_{y_i}, \quad \|g_i\| \le \sqrt 2, \qquad
    S_i = \nabla_o^2 \ell_i = \mathrm{diag}(p_i) - p_i p_i^\top, \quad
    s_i := \lambda_{\max}(S_i) \le \tfrac12 .

(:math:`\|g\|^2 = (1-p_y)^2 + \sum_{k\ne y} p_k^2 \le 2(1-p_y)^2`; :math:`v^\top S v` is the
variance of :math:`v_k` under :math:`k \sim p`, at most :math:`\tfrac14 (v_{\max} - v_{\min})^2
\le \tfrac12\|v\|^2`.)

Everything below is in the **chain reading** of C3/C4.1 (``H_m`` bounds the Hessian of
:math:`F_{\mathcal B}` w.r.t. the *embeddings*, :math:`h_0 = \theta_0`) with **operator norms**,
and :math:`F_{\mathcal B}` a batch *mean* of size ``b``. Derivations:

**G_m (C3.5).** :math:`\mathrm{vec}(H_{m,\mathcal B}) = (\tilde X_{m,\mathcal B} \otimes I_{P_m})
\mathrm{vec}(\tilde W_m^\top)` up to a permutation, so the Jacobian of the ``(b, P_m)`` batch
embedding w.r.t. :math:`\theta_m` has singular values those of :math:`\tilde X_{m,\mathcal B}`,
each repeated :math:`P_m` times: :math:`G_m(\mathcal B) = \sigma_{\max}(\tilde X_{m,\mathcal B})`
exactly (:func:`embedding_jacobian_norm`). Over **every** batch of at most ``B`` rows
(:func:`embedding_jacobian_sup`): :math:`\tilde X_{\mathcal B}^\top \tilde X_{\mathcal B} \preceq
\tilde X^\top \tilde X` (a sub-sum of PSD terms) and :math:`\lambda_{\max} \le \mathrm{tr}`, so
:math:`G_m^2 \le \min(\lambda_{\max}(\tilde X_m^\top \tilde X_m), \sum_{\text{top } B}
\|\tilde x_{m,i}\|^2)` (equality for ``B = 1``). :math:`G_0 = 1` (:math:`h_0 = \theta_0`).

**H_m, embedding block (C3.4).** :math:`\nabla_{h_{m,i}} F_{\mathcal B} = \frac1b A_m^\top g_i`, so
the cross-Hessian w.r.t. the other parties' batch embeddings is block diagonal over samples,
:math:`\frac1b\,\mathrm{blockdiag}_i(A_m^\top S_i A_{-m})`, with operator norm exactly
:math:`\frac1b \max_i \|A_m^\top S_i A_{-m}\|_2` (:func:`cross_hessian_norm`) and at most
:math:`\frac1{2b}\|A_m\|_2\|A_{-m}\|_2` at any point.

**H_m, server block.** For ``m >= 1`` party ``m`` also sees :math:`C_0(\theta_0)`. A change
:math:`\delta\tilde A` moves :math:`\nabla_{h_{m,i}} F_{\mathcal B}` by
:math:`\frac1b(\delta A_m^\top g_i + A_m^\top S_i \delta\tilde A \tilde z_i)`, of norm
:math:`\le \frac1b(\|g_i\| + s_i \|A_m\|\|\tilde z_i\|)\|\delta\tilde A\|_F`; stacking the ``b``
rows gives :math:`H_{m,0} \le \frac1{\sqrt b}(\sqrt2 + \tfrac12\|A_m\|\,\tilde z_{\max})`. The server
(``m = 0``) sees the parties' embeddings: :math:`\nabla_{\tilde A} F_{\mathcal B} = \frac1b \sum_i
g_i \tilde z_i^\top` moves by :math:`\frac1b\sum_i (S_i A \delta z_i \tilde z_i^\top + g_i
[\delta z_i; 0]^\top)` and Cauchy–Schwarz over ``i`` gives :math:`H_0 \le \frac1{\sqrt b}(\sqrt2 +
\tfrac12\|A\|\,\tilde z_{\max})` (the sum over samples is coherent: :math:`1/\sqrt b`, not
:math:`1/b`). Joining the blocks, :math:`\|[L_1, L_2]\| \le (\|L_1\|^2 + \|L_2\|^2)^{1/2}`:
:math:`H_m^2 \le H_{m,\mathrm{emb}}^2 + H_{m,0}^2`.

Lemma 1 (C4.1) follows for the *realised* errors:
:math:`\|\nabla_m F_{\mathcal B}(\Phi_m) - \nabla_m F_{\mathcal B}(\hat\Phi_m)\| \le G_m H_m
\|\Phi_{-m} - \hat\Phi_{-m}\|` with :math:`H_m` the supremum on the segment between the two views;
norms are convex, so the supremum of :math:`\|A_m\|`, :math:`\|\tilde z_i\|` on a segment is at an
end. :class:`LinearTrajectory` records both ends (the fresh and the compressed values) during
training.

**L (C3.1).** :math:`\nabla^2 F = \frac1N\sum_i (J_i^\top S_i J_i + \sum_k g_{ik} \nabla^2 o_{ik})`
with :math:`J_i = \partial o_i/\partial\Theta`, :math:`J_i v = \delta\tilde A \tilde z_i + A\,\delta
z_i`, :math:`\delta z_i = [\delta\tilde W_m \tilde x_{m,i}]_m`. Gauss–Newton part:
:math:`\frac1N\sum_i s_i\|J_i v\|^2 \le 2\|\delta\tilde A\|^2 \lambda_Z + 2\|A\|^2 \lambda_X
\|\delta\tilde W\|^2` with :math:`\lambda_Z = \lambda_{\max}(\frac1N\sum_i s_i \tilde z_i\tilde
z_i^\top)`, :math:`\lambda_X = \max_m \lambda_{\max}(\frac1N\sum_i s_i \tilde x_{m,i}\tilde
x_{m,i}^\top)`. Bilinear part: :math:`|2 g_i^\top \delta A\,\delta z_i| \le \|g_i\| r_i
(\|\delta\tilde A\|^2 + \|\delta\tilde W\|^2)`, :math:`r_i = \max_m \|\tilde x_{m,i}\|`. Hence
(:func:`smoothness_bound`)

.. math::
    L \le 2\max(\lambda_Z, \|A\|^2\lambda_X) + \frac1N \sum_i \|g_i\| r_i .

Along the run (``analytic_constants``), with :math:`s_i \le \frac12` and :math:`\|g_i\| \le
\sqrt2`: :math:`\lambda_Z \le \frac1{2N}\|\tilde Z\|_2^2` and

.. math::
    L \le \max\Big(\max_t \frac{\|\tilde Z(\Theta^t)\|_2^2}{N},\;
    \max_t \|A^t\|_2^2 \max_m\lambda_{\max}(\tilde X_m^\top\tilde X_m/N)\Big)
    + \frac{\sqrt 2}{N}\sum_i r_i

over the iterates :math:`\Theta^t`; :math:`\|\tilde Z\|_2` and :math:`\|A\|_2` are convex in
the parameters, so the bound holds on every segment between consecutive iterates (what the
descent lemma uses). On a batch of ``b`` rows the same argument bounds the batch Hessian, hence
every block-row smoothness :math:`L_m` (C3.1), with :math:`\|\tilde Z_{\mathcal B}\|_2^2/b \le
\min(\|\tilde Z\|_2^2/b, \max_i\|\tilde z_i\|^2)` and :math:`\lambda_{\max}(\tilde X_{m,\mathcal
B}^\top \tilde X_{m,\mathcal B})/b \le \min(N\lambda_X/b, \max_i \|\tilde x_{m,i}\|^2)`; the
bilinear part is at most :math:`\sqrt2\max_i r_i`.

**sigma_m^2 (C3.3), exact.** The simulator's batches are uniformly random ``b``-subsets (a
permutation cut into chunks). Sampling without replacement gives exactly
:math:`\mathbb{E}\|\nabla_m F_{\mathcal B} - \nabla_m F\|^2 = \frac{N-b}{b(N-1)} \frac1N
\sum_i \|\nabla_m\ell_i - \nabla_m F\|^2`, with per-sample gradients :math:`\nabla_{\tilde W_m}
\ell_i = A_m^\top g_i \tilde x_{m,i}^\top`, :math:`\nabla_{\tilde A}\ell_i = g_i \tilde z_i^\top`
(:func:`sigma2_exact`); :math:`\sigma_m^2` is ``B`` times the largest of these over the batch
sizes ``b`` the run uses.

References
----------
- [CVFL]_ Castiglia et al., ICML 2022 (Assumptions 1-5, Lemma 1, Theorem 4.2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from cvfl_theory._validate import check_int_in_range
from cvfl_theory.table import Table

from ..vfl.config import CVFLConfig
from ..vfl.data import VerticalDataset
from ..vfl.models import LinearHead, MLPEmbedding
from ..vfl.results import RunResult
from ..vfl.train import train
from ._autodiff import plain_linear

__all__ = [
    "LinearPoint",
    "LinearTrajectory",
    "AnalyticConstants",
    "augment",
    "softmax_parts",
    "embedding_jacobian_norm",
    "embedding_jacobian_sup",
    "cross_hessian_norm",
    "smoothness_bound",
    "sigma2_exact",
    "linear_point",
    "is_analytic",
    "step_from_constants",
    "train_recorded",
    "analytic_constants",
]

SQRT2 = math.sqrt(2.0)


# ---------------------------------------------------------------------------------------------
# a parameter point and per-sample quantities
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LinearPoint:
    r"""Parameters :math:`\Theta = [\tilde A; \tilde W_1; \dots; \tilde W_M]` of the analytic model.

    Attributes
    ----------
    W : tuple of numpy.ndarray
        :math:`\tilde W_m = [W_m, b_m]`, shape ``(P_m, D_m + 1)``.
    A : numpy.ndarray
        :math:`\tilde A = [A, c]`, shape ``(K, P + 1)``.
    """

    W: tuple[np.ndarray, ...]
    A: np.ndarray

    @property
    def sizes(self) -> list[int]:
        """Embedding sizes :math:`P_m`."""
        return [int(w.shape[0]) for w in self.W]

    def flat(self) -> np.ndarray:
        """All parameters as one vector (for de-duplication)."""
        return np.concatenate([self.A.ravel(), *(w.ravel() for w in self.W)])


def augment(X: Any) -> np.ndarray:
    r""":math:`\tilde X = [X, \mathbf 1]` as float64, ``(n, D) -> (n, D + 1)``."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n, D), got shape {X.shape}")
    return np.hstack([X, np.ones((X.shape[0], 1))])


def _embeddings(point: LinearPoint, parts: Sequence[np.ndarray]) -> np.ndarray:
    r""":math:`\tilde z_i` for every sample, ``(n, P + 1)``."""
    if len(parts) != len(point.W):
        raise ValueError(f"parts lists {len(parts)} blocks for {len(point.W)} parties")
    Z = [augment(x) @ w.T for x, w in zip(parts, point.W)]
    n = Z[0].shape[0]
    return np.hstack([*Z, np.ones((n, 1))])


def softmax_parts(logits: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""Per-sample :math:`p_i`, :math:`g_i = p_i - e_{y_i}`, :math:`S_i` and :math:`s_i = \lambda_{\max}(S_i)`.

    Parameters
    ----------
    logits : array_like
        ``(n, K)``.
    y : array_like
        ``(n,)`` integer labels.

    Returns
    -------
    p, g : numpy.ndarray
        ``(n, K)``.
    S : numpy.ndarray
        ``(n, K, K)``.
    s : numpy.ndarray
        ``(n,)``, each in ``[0, 1/2]``.

    Examples
    --------
    >>> p, g, S, s = softmax_parts([[0.0, 0.0]], [0])
    >>> float(s[0])
    0.5
    """
    o = np.asarray(logits, dtype=np.float64)
    yv = np.asarray(y, dtype=np.int64)
    if o.ndim != 2 or yv.shape != (o.shape[0],):
        raise ValueError(f"logits must be (n, K) and y (n,), got {o.shape} and {yv.shape}")
    e = np.exp(o - o.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    g = p.copy()
    g[np.arange(len(yv)), yv] -= 1.0
    S = np.einsum("ik,kl->ikl", p, np.eye(p.shape[1])) - p[:, :, None] * p[:, None, :]
    s = np.linalg.eigvalsh(S)[:, -1]
    return p, g, S, np.clip(s, 0.0, 0.5)


# ---------------------------------------------------------------------------------------------
# the constants, one function each
# ---------------------------------------------------------------------------------------------
def embedding_jacobian_norm(X_batch: Any) -> float:
    r"""Exact :math:`G_m(\mathcal B) = \|\partial H_{m,\mathcal B}/\partial\theta_m\|_2 = \sigma_{\max}([X_{m,\mathcal B}, \mathbf 1])` (C3.5).

    Parameters
    ----------
    X_batch : array_like
        ``(b, D_m)`` features of the batch.

    Examples
    --------
    >>> embedding_jacobian_norm([[3.0]])  # sqrt(3^2 + 1)
    3.1622776601683795
    """
    return float(np.linalg.norm(augment(X_batch), 2))


def embedding_jacobian_sup(X: Any, B: int) -> float:
    r"""Upper bound on :math:`G_m(\mathcal B)` over **every** batch of at most ``B`` rows of ``X``.

    :math:`G_m^2 \le \min(\lambda_{\max}(\tilde X^\top\tilde X), \sum_{\text{top } B}\|\tilde
    x_i\|^2)`; exact for ``B = 1`` (C3.5, see the module docstring).

    Examples
    --------
    >>> embedding_jacobian_sup([[3.0], [0.0]], 1)
    3.1622776601683795
    """
    Xt = augment(X)
    B = check_int_in_range(B, "B", 1, Xt.shape[0])
    rows = np.sort(np.sum(Xt**2, axis=1))[::-1]
    return float(math.sqrt(min(np.linalg.norm(Xt, 2) ** 2, rows[:B].sum())))


def _blocks(A: np.ndarray, sizes: Sequence[int], m: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns of party ``m`` (``1..M``) and of the other parties in ``A`` (``(K, P)``)."""
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    own = A[:, offs[m - 1] : offs[m]]
    other = np.hstack([A[:, : offs[m - 1]], A[:, offs[m] : offs[-1]]])
    return own, other


def cross_hessian_norm(A: Any, logits: Any, sizes: Sequence[int], m: int) -> float:
    r"""Exact :math:`\|\nabla^2_{h_m, h_{-m}} F_{\mathcal B}\|_2 = \frac1b\max_i\|A_m^\top S_i A_{-m}\|_2` (C3.4, chain reading).

    The Hessian of the batch-mean loss w.r.t. party ``m``'s batch embedding and the other
    parties' batch embeddings (the server block is not included).

    Parameters
    ----------
    A : array_like
        ``(K, P)`` head weights (without the bias column).
    logits : array_like
        ``(b, K)`` logits of the batch.
    sizes : sequence of int
        :math:`P_1, \dots, P_M`.
    m : int
        Party, ``1..M``.
    """
    A = np.asarray(A, dtype=np.float64)
    o = np.asarray(logits, dtype=np.float64)
    _, _, S, _ = softmax_parts(o, np.zeros(o.shape[0], dtype=np.int64))
    own, other = _blocks(A, sizes, m)
    if other.shape[1] == 0:
        return 0.0
    mats = np.einsum("kp,ikl,lq->ipq", own, S, other)
    return float(np.max(np.linalg.norm(mats, 2, axis=(1, 2)))) / o.shape[0]


def _point_softmax(
    point: LinearPoint, parts: Sequence[np.ndarray], y: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r""":math:`\tilde Z`, :math:`g_i` and :math:`s_i` at a point: one forward pass, one softmax."""
    Zt = _embeddings(point, parts)
    _, g, _, s = softmax_parts(Zt @ point.A.T, y)
    return Zt, g, s


def _smoothness(
    A: np.ndarray, Xt: Sequence[np.ndarray], Zt: np.ndarray, g: np.ndarray, s: np.ndarray
) -> float:
    r""":func:`smoothness_bound` from a point's parts (see :func:`_point_softmax`).

    ``A`` is the head ``(K, P + 1)``, ``Xt`` the augmented features, ``Zt``, ``g``, ``s`` the
    point's :math:`\tilde Z`, :math:`g_i`, :math:`s_i`.
    """
    N = Zt.shape[0]
    lam_z = float(np.linalg.eigvalsh((Zt * s[:, None]).T @ Zt / N)[-1])
    lam_x = max(float(np.linalg.eigvalsh((x * s[:, None]).T @ x / N)[-1]) for x in Xt)
    a2 = float(np.linalg.norm(A[:, :-1], 2)) ** 2
    r = np.max(np.stack([np.linalg.norm(x, axis=1) for x in Xt]), axis=0)
    return 2.0 * max(lam_z, a2 * lam_x) + float(np.mean(np.linalg.norm(g, axis=1) * r))


def smoothness_bound(point: LinearPoint, parts: Sequence[np.ndarray], y: Any) -> float:
    r"""Upper bound on :math:`L = \|\nabla^2 F(\Theta)\|_2` at one point (C3.1, module docstring).

    :math:`L \le 2\max(\lambda_Z, \|A\|^2\lambda_X) + \frac1N\sum_i \|g_i\| r_i`, computed from
    the point's exact :math:`s_i`, :math:`g_i` over the samples ``parts``, ``y``.
    """
    Zt, g, s = _point_softmax(point, parts, y)
    return _smoothness(point.A, [augment(x) for x in parts], Zt, g, s)


def _grad_variances(
    point: LinearPoint, Xt: Sequence[np.ndarray], Zt: np.ndarray, g: np.ndarray
) -> np.ndarray:
    r""":math:`\frac1N\sum_i\|\nabla_m\ell_i - \nabla_m F\|^2` for ``m = 0..M`` (C3.3).

    From the per-sample gradients :math:`\nabla_{\tilde A}\ell_i = g_i\tilde z_i^\top` and
    :math:`\nabla_{\tilde W_m}\ell_i = A_m^\top g_i \tilde x_{m,i}^\top`; ``Xt`` are the augmented
    features, ``Zt`` and ``g`` come from :func:`_point_softmax`.
    """
    n = Zt.shape[0]
    grads = [np.einsum("ik,ip->ikp", g, Zt).reshape(n, -1)]
    for m in range(1, len(point.W) + 1):
        own, _ = _blocks(point.A[:, :-1], point.sizes, m)
        u = g @ own  # A_m^T g_i, (n, P_m)
        grads.append(np.einsum("ip,id->ipd", u, Xt[m - 1]).reshape(n, -1))
    return np.asarray([float(np.mean(np.sum((G - G.mean(axis=0)) ** 2, axis=1))) for G in grads])


def _worst_batch_factor(N: int, B: int, batch_sizes: Sequence[int]) -> float:
    r""":math:`B \max_b \frac{N-b}{b(N-1)}` over ``batch_sizes`` (each in ``[1, N]``)."""
    factors = []
    for b in batch_sizes:
        if not 1 <= int(b) <= N:
            raise ValueError(f"batch sizes must be in [1, {N}], got {b}")
        factors.append((N - b) / (b * (N - 1)) if N > 1 else 0.0)
    return B * max(factors)


def sigma2_exact(
    point: LinearPoint, parts: Sequence[np.ndarray], y: Any, B: int, batch_sizes: Sequence[int]
) -> np.ndarray:
    r"""Exact :math:`\sigma_m^2` at a point for uniformly random batches without replacement (C3.3).

    :math:`\sigma_m^2 = B \max_b \frac{N-b}{b(N-1)} \frac1N\sum_i\|\nabla_m\ell_i - \nabla_m F\|^2`
    over the batch sizes ``b`` in ``batch_sizes``, so that :math:`\mathbb{E}\|\nabla_m F_{\mathcal
    B} - \nabla_m F\|^2 \le \sigma_m^2/B` holds for each of them.

    Returns
    -------
    numpy.ndarray
        ``(M + 1,)``, server first.
    """
    worst = _worst_batch_factor(len(np.asarray(y)), B, batch_sizes)
    Zt, g, _ = _point_softmax(point, parts, y)
    return worst * _grad_variances(point, [augment(x) for x in parts], Zt, g)


# ---------------------------------------------------------------------------------------------
# recording a run's points
# ---------------------------------------------------------------------------------------------
def is_analytic(parties: Sequence[nn.Module], server: nn.Module) -> bool:
    """Whether the models are the analytic model: the toolkit's linear parties and linear head.

    Only the toolkit's own modules count (:class:`~cvfl_sim.vfl.models.MLPEmbedding` without a
    hidden layer, :class:`~cvfl_sim.vfl.models.LinearHead`, or a bare ``nn.Linear``): a custom
    module could apply a function in its ``forward`` that no submodule shows.
    """
    return all(plain_linear(p, MLPEmbedding) is not None for p in parties) and (
        plain_linear(server, LinearHead) is not None
    )


def linear_point(parties: Sequence[nn.Module], server: nn.Module) -> LinearPoint:
    """The :class:`LinearPoint` of linear party modules and a linear head (float64 copies)."""

    def lin(mod: nn.Module, what: str) -> nn.Linear:
        inner = getattr(mod, "net", mod)
        if not isinstance(inner, nn.Linear):
            raise TypeError(
                f"{what} must be a linear map (parties_model='linear', server_model='linear'), "
                f"got {type(mod).__name__}"
            )
        return inner

    def aug(layer: nn.Linear) -> np.ndarray:
        w = layer.weight.detach().to(torch.float64).numpy()
        b = (
            layer.bias.detach().to(torch.float64).numpy()
            if layer.bias is not None
            else np.zeros(w.shape[0])
        )
        return np.hstack([w, b[:, None]])

    return LinearPoint(
        W=tuple(aug(lin(p, f"party {m + 1}")) for m, p in enumerate(parties)),
        A=aug(lin(server, "the server head")),
    )


@dataclass
class LinearTrajectory:
    r"""Every parameter point an analytic run visited, and the norms of the compressed values.

    Filled by :func:`train_recorded` through forward hooks: each call of the server head
    records the joint point :math:`\Theta^t` (every local step of every round, and every
    evaluation), each call of the parties' frozen compressed copy :math:`C_0(\theta_0^{t_0})`
    (or of a probe's copy of the head) records :math:`\|\hat A\|`, and every embedding row --
    the parties' fresh outputs and the heads' (compressed) inputs -- updates the largest
    per-party block norm :math:`\max_i\|h_{m,i}\|`.

    Attributes
    ----------
    points : list of LinearPoint
        Distinct consecutive points (the server head's calls), in order.
    block_max : numpy.ndarray
        ``(M,)`` largest row norm of each party's block among all rows the heads received.
    a_max : numpy.ndarray
        ``(M + 1,)``: the largest :math:`\|A\|_2` (index 0) and :math:`\|A_m\|_2` (``1..M``)
        over the head and its compressed copies.
    a_other_max : numpy.ndarray
        ``(M,)`` the largest :math:`\|A_{-m}\|_2`.
    fresh_max : numpy.ndarray
        ``(M,)`` like ``block_max`` over the parties' own (uncompressed) outputs only.
    a_iterate_max : float
        The largest :math:`\|A\|_2` of the head's iterates (not of its compressed copies).
    """

    sizes: list[int]
    points: list[LinearPoint] = field(default_factory=list)
    block_max: np.ndarray = field(default_factory=lambda: np.zeros(0))
    a_max: np.ndarray = field(default_factory=lambda: np.zeros(0))
    a_other_max: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        M = len(self.sizes)
        self.block_max = np.zeros(M)
        self.fresh_max = np.zeros(M)
        self.a_iterate_max = 0.0
        self.a_max = np.zeros(M + 1)
        self.a_other_max = np.zeros(M)
        self._last: np.ndarray | None = None

    @property
    def z_max(self) -> float:
        r""":math:`\tilde z_{\max}`: bound on :math:`\|[z; 1]\|` for any row built from seen blocks."""
        return float(math.sqrt(1.0 + float(np.sum(self.block_max**2))))

    @property
    def z_fresh_max(self) -> float:
        r"""The same over the parties' fresh (uncompressed) embeddings only -- what :math:`F` sees."""
        return float(math.sqrt(1.0 + float(np.sum(self.fresh_max**2))))

    def _norms(self, A: np.ndarray) -> None:
        self.a_max[0] = max(self.a_max[0], float(np.linalg.norm(A, 2)))
        for m in range(1, len(self.sizes) + 1):
            own, other = _blocks(A, self.sizes, m)
            self.a_max[m] = max(self.a_max[m], float(np.linalg.norm(own, 2)))
            if other.shape[1]:
                self.a_other_max[m - 1] = max(
                    self.a_other_max[m - 1], float(np.linalg.norm(other, 2))
                )

    def _rows(self, Z: torch.Tensor) -> None:
        z = Z.detach().to(torch.float64)
        if z.ndim != 2 or z.shape[1] != sum(self.sizes):
            return
        for m, blk in enumerate(z.split(self.sizes, dim=1)):
            self.record_block(m, blk)

    def record_block(self, m: int, h: torch.Tensor, fresh: bool = False) -> None:
        """Record rows ``h`` (``(b, P_m)``) of party ``m``'s (0-based) block; ``fresh``: its output."""
        v = h.detach().to(torch.float64)
        if v.ndim == 2 and v.shape[0]:
            top = float(v.norm(dim=1).max())
            self.block_max[m] = max(self.block_max[m], top)
            if fresh:
                self.fresh_max[m] = max(self.fresh_max[m], top)

    def record(self, point: LinearPoint, Z: torch.Tensor) -> None:
        """Record a call of the server head on ``Z`` at ``point``."""
        self._rows(Z)
        flat = point.flat()
        if self._last is None or not np.array_equal(flat, self._last):
            self.points.append(point)
            self._last = flat
            self._norms(point.A[:, :-1])
            self.a_iterate_max = max(self.a_iterate_max, float(np.linalg.norm(point.A[:, :-1], 2)))

    def record_hat(self, A_hat: np.ndarray, Z: torch.Tensor) -> None:
        r"""Record a call of the compressed copy :math:`C_0(\theta_0)` on ``Z``."""
        self._rows(Z)
        self._norms(A_hat[:, :-1])


def train_recorded(
    dataset: VerticalDataset, config: CVFLConfig, **train_kwargs: Any
) -> tuple[RunResult, LinearTrajectory]:
    """Train the analytic model with :func:`cvfl_sim.train` and record every point it visits.

    ``config.parties_model`` and ``config.server_model`` must both be ``"linear"``; they are
    replaced by factories building the very same modules (same seed, same initialisation) with
    forward hooks that fill a :class:`LinearTrajectory`. The training itself is unchanged.
    ``train_kwargs`` go to :func:`cvfl_sim.train` (e.g. ``probe=`` a Lemma-1 probe).
    """
    if config.parties_model != "linear" or config.server_model != "linear":
        raise ValueError(
            "the analytic model needs parties_model='linear' and server_model='linear', got "
            f"{config.parties_model!r} and {config.server_model!r}"
        )
    es = config.embedding_size
    sizes = list(es) if isinstance(es, (list, tuple)) else [int(es)] * dataset.n_parties
    traj = LinearTrajectory(sizes=sizes)
    parties: list[nn.Module] = []
    holder: dict[str, nn.Module] = {}

    def party_hook(m: int) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            try:  # a functorch-transformed call (copies made by a probe) has nothing to record
                traj.record_block(m, output, fresh=True)
            except RuntimeError:
                return

        return hook

    def party_factory(m: int, d: int, shape: Any) -> nn.Module:
        mod = MLPEmbedding(d, sizes[m], hidden=0)
        mod.register_forward_hook(party_hook(m))
        parties.append(mod)
        return mod

    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        try:  # a functorch-transformed call (copies made by a probe) has nothing to record
            Z = args[0].detach()
            if module is holder["server"]:
                traj.record(linear_point(parties, module), Z)
            else:  # the frozen compressed copy C_0(θ_0^{t0}), or a probe's copy of the head
                traj.record_hat(linear_point([], module).A, Z)
        except RuntimeError:
            return

    def server_factory(n_in: int, n_classes: int) -> nn.Module:
        head = LinearHead(n_in, n_classes)
        holder["server"] = head
        head.register_forward_hook(hook)
        return head

    cfg = CVFLConfig(**{**vars(config), "parties_model": party_factory})
    cfg.server_model = server_factory
    res = train(dataset, cfg, **train_kwargs)
    res.config["parties_model"] = "linear"
    res.config["server_model"] = "linear"
    return res, traj


# ---------------------------------------------------------------------------------------------
# all constants of a run
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AnalyticConstants:
    r"""C3 constants of an analytic run: proved bounds, or exact values maximised over its points.

    Attributes
    ----------
    L : float
        Bound on :math:`\|\nabla^2 F\|_2` on every segment between the run's iterates (sup
        form, :math:`s_i \le 1/2`, :math:`\|g_i\| \le \sqrt2`, with the largest fresh
        embedding row and head norm of the iterates; the segments are covered because
        :math:`\|z_i\|` and :math:`\|A\|` are convex in the parameters).
    L_points : float
        Largest :func:`smoothness_bound` over the visited points (exact :math:`s_i`, :math:`g_i`).
    L_m : tuple of float
        Bound on every block-row smoothness of the batch Hessian (``M + 1`` entries).
    sigma2 : tuple of float
        Exact :math:`\sigma_m^2` maximised over the visited points (``m = 0..M``).
    H : tuple of float
        :math:`H_m` (chain reading, operator norm, server block included), sup over the run.
    H_emb : tuple of float
        The embedding block alone (``H_emb[0] = H[0]``).
    G : tuple of float
        :math:`G_m`, over every batch of at most ``B`` rows (``G_0 = 1``).
    B, b_min : int
        Nominal batch size and the smallest batch the run uses.
    points : int
        Number of distinct points the constants are maximised over.
    """

    L: float
    L_points: float
    L_m: tuple[float, ...]
    sigma2: tuple[float, ...]
    H: tuple[float, ...]
    H_emb: tuple[float, ...]
    G: tuple[float, ...]
    B: int
    b_min: int
    points: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-able dictionary."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def table(self) -> Table:
        """The constants per block ``m = 0..M`` (``L`` and ``L_points`` repeated on every row)."""
        rows = [
            [
                m,
                self.L,
                self.L_points,
                self.L_m[m],
                self.sigma2[m],
                self.H[m],
                self.H_emb[m],
                self.G[m],
            ]
            for m in range(len(self.G))
        ]
        return Table(
            ["m", "L (proved)", "L (points)", "L_m", "sigma2_m", "H_m", "H_m (emb. block)", "G_m"],
            rows,
            title=f"Analytic C3 constants (chain reading, operator norms): B={self.B}, smallest "
            f"batch {self.b_min}, {self.points} points",
        )

    def __str__(self) -> str:
        return str(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


def _server_block_bound(a: float, z_max: float, b: int) -> float:
    r""":math:`(\sqrt2 + \tfrac12 a\,\tilde z_{\max})/\sqrt b`: the server block of :math:`H_m` (``H_0`` too).

    ``a`` is :math:`\|A_m\|_2` (:math:`\|A\|_2` for ``m = 0``); the sum over the batch is coherent,
    hence :math:`1/\sqrt b` (module docstring, *H_m, server block*).
    """
    return (SQRT2 + 0.5 * a * z_max) / math.sqrt(b)


def _embedding_block_bound(a_own: float, a_other: float, b: int) -> float:
    r""":math:`\tfrac1{2b}\|A_m\|_2\|A_{-m}\|_2`: the embedding block of :math:`H_m` (C3.4, :math:`s_i \le \tfrac12`)."""
    return 0.5 * a_own * a_other / b


def analytic_constants(
    dataset: VerticalDataset,
    trajectory: LinearTrajectory,
    B: int,
    *,
    max_points: int | None = 400,
) -> AnalyticConstants:
    r"""The C3 constants of an analytic run (module docstring for every derivation).

    Parameters
    ----------
    dataset : VerticalDataset
        The run's data (training split).
    trajectory : LinearTrajectory
        From :func:`train_recorded`.
    B : int
        The run's batch size.
    max_points : int or None
        Evaluate the point-wise exact quantities (:math:`\sigma_m^2`, ``L_points``) on at most
        this many points, evenly spaced along the trajectory (first and last included); ``None``
        uses all. The sup-form ``L``, ``L_m``, ``H`` and ``G`` always cover every point.

    Returns
    -------
    AnalyticConstants
    """
    if not trajectory.points:
        raise ValueError("the trajectory holds no points (was it filled by train_recorded?)")
    parts = [np.asarray(p, dtype=np.float64) for p in dataset.train_parts]
    y = np.asarray(dataset.y_train)
    N = len(y)
    B = check_int_in_range(B, "B", 1, N)
    M = len(parts)
    sizes = {B, N - (N // B) * B} - {0}
    b_min = min(sizes)
    pts = trajectory.points
    if max_points is not None and len(pts) > max_points:
        idx = np.unique(np.linspace(0, len(pts) - 1, max_points).round().astype(int))
        pts = [pts[i] for i in idx]
    Xt = [augment(x) for x in parts]
    worst = _worst_batch_factor(N, B, sorted(sizes))
    sigma2 = np.zeros(M + 1)
    L_points = 0.0
    for pt in pts:  # one softmax per point serves sigma2_exact and smoothness_bound
        Zt, g, s = _point_softmax(pt, parts, y)
        sigma2 = np.maximum(sigma2, worst * _grad_variances(pt, Xt, Zt, g))
        L_points = max(L_points, _smoothness(pt.A, Xt, Zt, g, s))

    zmax = trajectory.z_max
    a = trajectory.a_max
    # L, L_m: F and F_B at the iterates (fresh embeddings, the head's own A), not the compressed
    # views. ||Z~(theta)||_2 and ||A||_2 are convex along a segment, so their maxima over every
    # iterate bound them on every segment between consecutive iterates.
    zf, af = trajectory.z_fresh_max, trajectory.a_iterate_max
    z_op2 = max(float(np.linalg.norm(_embeddings(pt, parts), 2)) ** 2 for pt in trajectory.points)
    lam_x = max(float(np.linalg.eigvalsh(x.T @ x / N)[-1]) for x in Xt)
    r = np.max(np.stack([np.linalg.norm(x, axis=1) for x in Xt]), axis=0)
    L = max(z_op2 / N, af**2 * lam_x) + SQRT2 * float(np.mean(r))
    xrow2 = max(float(np.max(np.sum(x**2, axis=1))) for x in Xt)
    zb2 = min(z_op2 / b_min, zf**2)
    L_batch = max(zb2, af**2 * min(lam_x * N / b_min, xrow2)) + SQRT2 * float(np.max(r))

    H = [_server_block_bound(a[0], zmax, b_min)]
    H_emb = [H[0]]
    G = [1.0]
    for m in range(1, M + 1):
        h_emb = _embedding_block_bound(a[m], trajectory.a_other_max[m - 1], b_min)
        h_srv = _server_block_bound(a[m], zmax, b_min)
        H_emb.append(h_emb)
        H.append(math.sqrt(h_emb**2 + h_srv**2))
        G.append(embedding_jacobian_sup(parts[m - 1], B))

    def tup(v: Sequence[float] | np.ndarray) -> tuple[float, ...]:
        return tuple(float(x) for x in v)

    return AnalyticConstants(
        L=float(L),
        L_points=float(L_points),
        L_m=tup([L_batch] * (M + 1)),
        sigma2=tup(sigma2),
        H=tup(H),
        H_emb=tup(H_emb),
        G=tup(G),
        B=B,
        b_min=int(b_min),
        points=len(trajectory.points),
    )


def step_from_constants(
    dataset: VerticalDataset, config: CVFLConfig, *, tries: int = 6
) -> tuple[float, int]:
    r"""A step for the analytic model that its own proved constants allow: ``(eta, trainings)``.

    Theorem 4.2 needs :math:`\eta \le 1/(16 Q \max(L, \max_m L_m))` (as recovered) with
    constants that hold on the trajectory, and the trajectory depends on :math:`\eta`. Starting
    from ``config.lr``, each training gives its proved constants (:func:`analytic_constants`)
    and their limit; the next step is 0.9 times that limit, until a step is within the limit of
    the constants of its own run.

    Raises
    ------
    ValueError
        ``config.lr`` is not a number, or the models are not the analytic model.
    RuntimeError
        No such step was found in ``tries`` trainings.
    """
    import dataclasses

    from cvfl_theory.bounds import max_step_size

    tries = check_int_in_range(tries, "tries", 1, 100)
    if isinstance(config.lr, bool) or not isinstance(config.lr, (int, float)):
        raise ValueError(
            f"step_from_constants needs a constant lr to start from, got {config.lr!r}"
        )
    eta = float(config.lr)
    for k in range(1, tries + 1):
        _, traj = train_recorded(dataset, dataclasses.replace(config, lr=eta, progress=False))
        c = analytic_constants(dataset, traj, int(config.batch_size))
        limit = max_step_size(int(config.Q), c.L, c.L_m)
        if eta <= limit:
            return eta, k
        eta = 0.9 * limit
    raise RuntimeError(f"no step within its own constants' limit after {tries} trainings")
