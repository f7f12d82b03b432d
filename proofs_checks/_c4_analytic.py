"""Shared pieces of the checks of the analytic model's proved constants (C4.2, C4.7).

Points of the analytic model (linear parties, linear softmax head) built where a proved bound of
:mod:`cvfl_sim.bounds.analytic_constants` is nearly an equality, and the exact quantities the
bounds are compared with, computed here with :mod:`torch.autograd` on the loss written out
from the model's definition (no code of the package under test):

- :func:`aligned_point`: two classes at ``p = 1/2`` (all embeddings 0, no bias), the head's
  party blocks along ``(1, -1)``: the embedding block of :math:`H_m` is
  :math:`\\tfrac12\\|A_m\\|\\|A_{-m}\\|` exactly, and dominates for a large head;
- :func:`saturated_point`: every sample confidently wrong in the same way (the logits' bias
  ``(gap, -gap)``, all labels 1, a tiny head): :math:`\\|g_i\\| = \\sqrt2`, :math:`S_i = 0`, so the
  coherent server block of :math:`H_m` is :math:`\\sqrt2/\\sqrt b` and, with nearly equal large
  feature rows, the bilinear part of the Hessian is :math:`\\sqrt2\\,\\|\\bar{\\tilde x}\\|`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

V = np.array([1.0, -1.0]) / math.sqrt(2.0)
"""The top eigenvector of the two-class softmax Hessian ``diag(p) - pp^T``."""

D = 2
"""Features per party."""


def data(n: int, seed: int, centre: float = 0.0) -> list[np.ndarray]:
    """Two parties' ``(n, D)`` features: ``centre`` plus standard normal noise (``0.1`` times it when centred)."""
    gen = np.random.default_rng(seed)
    scale = 0.1 if centre else 1.0
    return [centre + scale * gen.normal(size=(n, D)) for _ in range(2)]


def dataset(parts: Sequence[np.ndarray], y: np.ndarray) -> Any:
    """A :class:`~cvfl_sim.vfl.data.VerticalDataset` with ``parts`` as training split."""
    from cvfl_sim.vfl.data import VerticalDataset

    return VerticalDataset(
        train_parts=list(parts),
        test_parts=[p[:2] for p in parts],
        y_train=y,
        y_test=y[:2],
        n_classes=2,
    )


def aligned_point(alpha: float) -> Any:
    """Embeddings 0, head ``[alpha v, alpha v, 0]``: softmax at 1/2, both blocks along ``v``."""
    from cvfl_sim.bounds.analytic_constants import LinearPoint

    A = np.zeros((2, 3))
    A[:, 0] = alpha * V
    A[:, 1] = alpha * V
    return LinearPoint(W=tuple(np.zeros((1, D + 1)) for _ in range(2)), A=A)


def saturated_point(gap: float = 20.0, head: float = 0.01) -> Any:
    """Embeddings 0, a tiny head along ``v`` and the bias ``(gap, -gap)``: class 0 predicted."""
    from cvfl_sim.bounds.analytic_constants import LinearPoint

    A = np.zeros((2, 3))
    A[:, 0] = head * V
    A[:, 1] = head * V
    A[:, 2] = [gap, -gap]
    return LinearPoint(W=tuple(np.zeros((1, D + 1)) for _ in range(2)), A=A)


def random_point(seed: int) -> Any:
    """A generic point (standard normal parameters)."""
    from cvfl_sim.bounds.analytic_constants import LinearPoint

    gen = np.random.default_rng(seed)
    return LinearPoint(
        W=tuple(gen.normal(size=(1, D + 1)) for _ in range(2)), A=gen.normal(size=(2, 3))
    )


def trajectory(points: Sequence[Any], parts: Sequence[np.ndarray]) -> Any:
    """A :class:`~cvfl_sim.bounds.analytic_constants.LinearTrajectory` that visited ``points``.

    Each point is recorded as a call of the server head on every training row, and each party's
    rows as its fresh output, as :func:`~cvfl_sim.bounds.analytic_constants.train_recorded` does.
    """
    from cvfl_sim.bounds.analytic_constants import LinearTrajectory

    traj = LinearTrajectory(sizes=[1, 1])
    for pt in points:
        H = [
            torch.as_tensor(np.hstack([x, np.ones((len(x), 1))]) @ w.T) for x, w in zip(parts, pt.W)
        ]
        for m, h in enumerate(H):
            traj.record_block(m, h, fresh=True)
        traj.record(pt, torch.cat(H, dim=1))
    return traj


def loss(
    flat: torch.Tensor,
    shapes: Sequence[tuple[int, int]],
    X: Sequence[torch.Tensor],
    y: torch.Tensor,
) -> torch.Tensor:
    """Mean cross entropy of the analytic model with parameters ``flat = [A~, W~_1, W~_2]``."""
    mats, off = [], 0
    for s in shapes:
        mats.append(flat[off : off + s[0] * s[1]].reshape(s))
        off += s[0] * s[1]
    A, Ws = mats[0], mats[1:]
    Z = torch.cat([x @ w[:, :-1].T + w[:, -1] for x, w in zip(X, Ws)], dim=1)
    return torch.nn.functional.cross_entropy(Z @ A[:, :-1].T + A[:, -1], y)


def parameter_hessian(
    point: Any, parts: Sequence[np.ndarray], y: np.ndarray, rows: Any = None
) -> tuple[np.ndarray, list[int]]:
    """Exact Hessian of the mean loss over ``rows`` (all by default) in ``[A~, W~_1, W~_2]``, and the block sizes."""
    idx = np.arange(len(y)) if rows is None else np.asarray(rows)
    X = [torch.as_tensor(x[idx]) for x in parts]
    mats = [point.A, *point.W]
    shapes = [m.shape for m in mats]
    flat = torch.as_tensor(np.concatenate([m.ravel() for m in mats]))
    yy = torch.as_tensor(y[idx])
    Hs = torch.autograd.functional.hessian(lambda t: loss(t, shapes, X, yy), flat)
    return Hs.numpy(), [s[0] * s[1] for s in shapes]


def embedding_hessian_norms(
    point: Any, parts: Sequence[np.ndarray], y: np.ndarray, rows: Sequence[int]
) -> np.ndarray:
    r"""Exact :math:`\|\nabla^2_{h_m, \Phi_{-m}} F_B\|_2` for ``m = 0..M`` on the batch ``rows`` (chain reading).

    Rows of the block: party ``m``'s batch embedding (:math:`\theta_0 = \tilde A` for ``m = 0``);
    columns: everything else block ``m`` sees (:math:`\tilde A` and the other parties' batch
    embeddings; every embedding for ``m = 0``).
    """
    idx = np.asarray(rows)
    A = torch.as_tensor(point.A)
    K, P1 = A.shape
    Z = torch.cat(
        [
            torch.as_tensor(np.hstack([x[idx], np.ones((len(idx), 1))])) @ torch.as_tensor(w).T
            for x, w in zip(parts, point.W)
        ],
        dim=1,
    )
    b, P = Z.shape
    yy = torch.as_tensor(y[idx])
    n0 = K * P1

    def F(flat: torch.Tensor) -> torch.Tensor:
        Ah = flat[:n0].reshape(K, P1)
        z = flat[n0:].reshape(b, P)
        return torch.nn.functional.cross_entropy(z @ Ah[:, :-1].T + Ah[:, -1], yy)

    Hs = torch.autograd.functional.hessian(F, torch.cat([A.reshape(-1), Z.reshape(-1)])).numpy()
    out = [float(np.linalg.norm(Hs[:n0, n0:], 2))]
    offs = np.concatenate([[0], np.cumsum(point.sizes)])
    for m in range(len(point.sizes)):
        own = np.array([n0 + i * P + c for i in range(b) for c in range(offs[m], offs[m + 1])])
        rest = np.setdiff1d(np.arange(Hs.shape[0]), own)
        out.append(float(np.linalg.norm(Hs[np.ix_(own, rest)], 2)))
    return np.array(out)
