r"""Spectral norms of Gram matrices, dense or kept as operators (C3.4, C3.5, C4.1).

The chain-reading constants of Lemma 1 are spectral norms of embedding Jacobians and Hessian
cross blocks: :math:`\|A\|_2 = \sqrt{\lambda_{\max}(AA^\top)}`. :func:`gram_op_norm` takes
the largest eigenvalue of a dense Gram matrix from LAPACK; :func:`op_norms` takes many at once
from a batched Lanczos iteration (:func:`lanczos_top`) on operators that never form the Gram
matrix: :class:`GramFactors` (a factor plus small diagonal blocks) and any
:class:`GramOperator` (a party's embedding Jacobian, :mod:`cvfl_sim.bounds._jacobians`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

__all__: list[str] = []


def gram(A: torch.Tensor) -> torch.Tensor:
    r"""The Gram matrix of ``A``'s shorter side, in float64: :math:`AA^\top` or :math:`A^\top A`.

    Both have the nonzero eigenvalues :math:`\sigma_i(A)^2`, so :func:`gram_op_norm` of either
    is ``A``'s spectral norm.
    """
    a = A.detach().to(torch.float64)
    return a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a


def gram_op_norm(G: torch.Tensor) -> float:
    r""":math:`\sqrt{\lambda_{\max}(G)}` of a Gram matrix :math:`G = AA^\top`: ``A``'s 2-norm.

    Only the largest eigenvalue is computed (LAPACK ``dsyevx``: tridiagonal reduction, then
    bisection to :math:`\epsilon\|G\|` absolute accuracy, as a full ``eigvalsh``), about twice
    as fast as all of them. 0 for an empty matrix; ``nan`` if ``G`` has a non-finite entry
    (also where a finite ``A``'s Gram overflowed).
    """
    import scipy.linalg

    n = int(G.shape[0])
    if n == 0:
        return 0.0
    g = G.detach().to(torch.float64).cpu().numpy()
    if not np.isfinite(g).all():
        return math.nan
    top = scipy.linalg.eigh(
        g, eigvals_only=True, subset_by_index=[n - 1, n - 1], driver="evx", check_finite=False
    )
    return math.sqrt(max(float(top[0]), 0.0))


#: Gram matrices up to this size go to LAPACK (all eigenvalues of a stack at once); larger ones
#: to the batched Lanczos iteration of :func:`op_norms`.
LANCZOS_MIN_SIZE = 64
#: Relative residual :math:`r/\theta` (:math:`r = \|Gy - \theta y\|`) at which a Ritz pair
#: :math:`(\theta, y)` is accepted. The value returned is :math:`\theta + r`: an eigenvalue lies
#: in :math:`[\theta - r, \theta + r]`, so it is at least that eigenvalue and at most
#: :math:`10^{-6}` relative above it. Where that eigenvalue is not the top one (the start vector
#: hardly meets the top eigenvector and another eigenvalue lies within a small gap below it)
#: the value is below :math:`\lambda_{\max}` by up to about that gap: 9e-6 relative at a gap of
#: 1e-5 in a review's random near-ties, never on the Lemma-1 probe's matrices (2688 norms, top
#: gaps 1e-4 and more). At :math:`10^{-13}` the probe's Jacobian Grams needed 19 - 24 steps,
#: at :math:`10^{-6}` 13 - 18.
LANCZOS_TOL = 1e-6
#: Most Lanczos steps before a matrix falls back to LAPACK.
LANCZOS_MAX_STEPS = 120


class GramOperator(Protocol):
    r"""A symmetric positive semi-definite matrix :math:`G` known by its products.

    Operators with equal :meth:`stack_key` (and type) make their products in one batch:
    :meth:`stacked_matvec` prepares the batch once and returns the product map.
    """

    @property
    def n(self) -> int:
        """The matrix's size."""
        ...

    def gram_diagonal(self) -> np.ndarray:
        """The diagonal of :math:`G`."""
        ...

    def gram_dense(self) -> torch.Tensor:
        """:math:`G` as a dense ``(n, n)`` float64 matrix."""
        ...

    def stack_key(self) -> Hashable:
        """Operators of one type and key can be stacked."""
        ...

    @classmethod
    def stacked_matvec(cls, ops: Sequence[Any]) -> Callable[[np.ndarray], np.ndarray]:
        r"""The map ``(b, n) -> (b, n)``, :math:`v_i \mapsto G_i v_i` for ``ops`` of one key."""
        ...


@dataclass(frozen=True)
class GramFactors:
    r"""A Gram matrix kept in factored form: :math:`G = RR^\top + \mathrm{blockdiag}(D_1, \dots)`.

    ``R`` is ``(n, k)``; ``blocks`` is ``None`` or ``(n / s, s, s)``, symmetric positive
    semi-definite blocks on the diagonal. :math:`\sqrt{\lambda_{\max}(G)}` is the spectral norm
    of :math:`[R \mid \mathrm{blockdiag}(D_i^{1/2})]`: a Hessian cross block whose columns split
    into dense ones and per-sample ones
    (:func:`~cvfl_sim.bounds._autodiff.embedding_hessian_factors_at`), or any matrix by
    :meth:`of`. Products with :math:`G` cost :math:`O(nk)` without forming it. A
    :class:`GramOperator`.
    """

    R: torch.Tensor
    blocks: torch.Tensor | None = None

    @classmethod
    def of(cls, A: torch.Tensor) -> GramFactors:
        """The factors of ``A``'s shorter-side Gram (:func:`gram`), in float64."""
        a = A.detach().to(torch.float64)
        return cls(a if a.shape[0] <= a.shape[1] else a.T)

    @property
    def n(self) -> int:
        """The Gram matrix's size."""
        return int(self.R.shape[0])

    @functools.cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray | None]:
        """``R`` and ``blocks`` as float64 numpy arrays, converted once for all products."""
        R = self.R.detach().to(torch.float64).cpu().numpy()
        D = None if self.blocks is None else self.blocks.detach().to(torch.float64).cpu().numpy()
        return R, D

    def gram_diagonal(self) -> np.ndarray:
        """The diagonal of :math:`G`."""
        R, D = self.arrays
        diag = np.einsum("ij,ij->i", R, R)
        if D is not None:
            diag += np.diagonal(D, axis1=1, axis2=2).reshape(-1)
        return diag

    def gram_dense(self) -> torch.Tensor:
        """:math:`G` as a dense ``(n, n)`` float64 matrix."""
        R, D = self.arrays
        G = R @ R.T
        if D is not None:
            nb, s, _ = D.shape
            idx = np.arange(nb)
            G.reshape(nb, s, nb, s)[idx, :, idx, :] += D
        return torch.from_numpy(G).to(self.R.device)

    def stack_key(self) -> Hashable:
        """The block size (0 without blocks): factors are padded to one width."""
        return 0 if self.blocks is None else int(self.blocks.shape[1])

    @classmethod
    def stacked_matvec(cls, ops: Sequence[Any]) -> Callable[[np.ndarray], np.ndarray]:
        r""":math:`R_i(R_i^\top v_i) + \mathrm{blockdiag}(D_i)v_i`, the factors zero-padded."""
        k = max(int(op.R.shape[1]) for op in ops)
        R = np.zeros((len(ops), ops[0].n, k))
        for row, op in enumerate(ops):
            R[row, :, : op.R.shape[1]] = op.arrays[0]
        Rt = R.transpose(0, 2, 1)
        D = None if ops[0].blocks is None else np.stack([op.arrays[1] for op in ops])

        def matvec(V: np.ndarray) -> np.ndarray:
            w = (R @ (Rt @ V[:, :, None]))[:, :, 0]
            if D is not None:
                b, nb, s, _ = D.shape
                w += np.einsum("bkij,bkj->bki", D, V.reshape(b, nb, s)).reshape(b, -1)
            return w

        return matvec


def op_norms(operators: Sequence[GramOperator]) -> list[float]:
    r""":math:`\sqrt{\lambda_{\max}(G)}` of each Gram operator, all of one size in one batch.

    Up to :data:`LANCZOS_MIN_SIZE` rows LAPACK computes every eigenvalue of the dense matrices.
    Larger ones of one size run one Lanczos iteration together (:func:`lanczos_top`), the
    operators of one type and :meth:`~GramOperator.stack_key` making their products in one
    batch: the largest Ritz value :math:`\theta` of the Krylov space of a fixed generic start
    vector, accepted once the top Ritz pair's residual :math:`r` is at most :data:`LANCZOS_TOL`
    times it, and returned as :math:`\theta + r`. An eigenvalue lies in :math:`[\theta - r,
    \theta + r]`, and :math:`\theta`, a Rayleigh quotient, is at most :math:`\lambda_{\max}`; so
    where that eigenvalue is the top one the value is in :math:`[\lambda_{\max}, (1 +
    10^{-6})\lambda_{\max}]`. That it is the top one rests on the start vector (and the
    restarts at invariant subspaces) meeting the top eigenvector well enough, not on a proof:
    where another eigenvalue lies within a small gap below the top and the start vector hardly
    meets the top eigenvector, the value can be low by up to about that gap (see
    :data:`LANCZOS_TOL`). A Ritz value below :math:`\max_i G_{ii}` (a lower bound on
    :math:`\lambda_{\max}`), or one not converged in :data:`LANCZOS_MAX_STEPS` steps, is
    replaced by LAPACK's (:func:`gram_op_norm` of the dense matrix). On the Lemma-1 probe's
    256-square Gram matrices this is several times faster than forming them and reducing them
    to tridiagonal form; there the norms were at least LAPACK's (less a few units of round-off)
    and within :math:`5 \cdot 10^{-7}` relative above them (tested).

    0 for an empty matrix; ``nan`` for one with a non-finite entry.
    """
    out = [0.0] * len(operators)
    by_size: dict[int, list[int]] = {}
    for i, op in enumerate(operators):
        if op.n:
            by_size.setdefault(op.n, []).append(i)
    for n, idx in by_size.items():
        ops = [operators[i] for i in idx]
        diag = np.stack([op.gram_diagonal() for op in ops])
        finite = np.isfinite(diag.sum(axis=1))  # a screen; LAPACK checks the dense matrices
        tops = np.full(len(idx), np.nan)
        if n <= LANCZOS_MIN_SIZE:
            dense = np.stack([op.gram_dense().detach().cpu().numpy() for op in ops])
            finite &= np.isfinite(dense).all(axis=(1, 2))
            tops[finite] = np.linalg.eigvalsh(dense[finite])[:, -1]
        elif finite.any():
            keep = [int(i) for i in np.flatnonzero(finite)]
            tops[keep] = lanczos_top(_stacked([ops[i] for i in keep]), diag[keep])
        for i, top in zip(idx, tops):
            # not finite (nan), not converged or below the diagonal: LAPACK on the dense matrix
            out[i] = (
                math.sqrt(max(float(top), 0.0))
                if np.isfinite(top)
                else gram_op_norm(operators[i].gram_dense())
            )
    return out


def _stacked(ops: Sequence[GramOperator]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The products of ``ops`` (one size), each group of one type and key in one batch."""
    groups: dict[tuple[type[GramOperator], Hashable], list[int]] = {}
    for i, op in enumerate(ops):
        groups.setdefault((type(op), op.stack_key()), []).append(i)
    maps = [
        (np.array(idx), kind.stacked_matvec([ops[i] for i in idx]))
        for (kind, _), idx in groups.items()
    ]
    group = np.zeros(len(ops), dtype=np.int64)  # each operator's group and place in it
    where = np.zeros(len(ops), dtype=np.int64)
    for g, (idx, _) in enumerate(maps):
        group[idx] = g
        where[idx] = np.arange(len(idx))

    # each group's rows while every operator iterates: a slice where they are contiguous
    spans = [
        (slice(int(idx[0]), int(idx[-1]) + 1) if np.all(np.diff(idx) == 1) else idx, f)
        for idx, f in maps
    ]

    def matvec(V: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if len(rows) == len(ops):
            if len(spans) == 1:
                return spans[0][1](V)
            out = np.empty_like(V)
            for span, f in spans:
                out[span] = f(V[span])
            return out
        W = np.empty_like(V)
        for g, (idx, f) in enumerate(maps):
            here = group[rows] == g
            if not here.any():  # a group whose operators are all done is skipped
                continue
            if here.all() and len(rows) == len(idx):
                W[:] = f(V)
                continue
            full = np.zeros((len(idx), V.shape[1]))
            full[where[rows[here]]] = V[here]
            W[here] = f(full)[where[rows[here]]]
        return W

    return matvec


@functools.cache
def _start_vector(n: int) -> np.ndarray:
    """Lanczos's fixed start vector in dimension ``n``: a seeded Gaussian, normalised."""
    start = np.random.default_rng(0x1A5C205).standard_normal(n)
    out = start / np.linalg.norm(start)
    out.flags.writeable = False
    return out


def lanczos_top(
    matvec: Callable[[np.ndarray, np.ndarray], np.ndarray], diag: np.ndarray
) -> np.ndarray:
    r"""Largest eigenvalue of ``b`` symmetric positive semi-definite matrices by Lanczos.

    ``matvec(V, rows)`` maps ``(len(rows), n)`` vectors to the products of the matrices
    ``rows`` with them; ``diag`` ``(b, n)`` holds the diagonals. All iterate together from one
    fixed start vector (pseudo-random, so that no eigenvector is orthogonal to it but on a set
    of measure zero): each product is orthogonalised against every earlier Lanczos vector by
    classical Gram-Schmidt, twice (Arnoldi's full orthogonalisation, whose coefficients on the
    last two vectors are the recurrence's :math:`\alpha_j`, :math:`\beta_{j-1}`). Every 2 steps
    from the 12th the top Ritz pair of each tridiagonal matrix :math:`T_j` is computed; its
    residual is :math:`\beta_j |s_j|` (:math:`s` the Ritz vector in the Lanczos basis). A
    matrix is done, and leaves the iteration, when its residual is at
    most :data:`LANCZOS_TOL` times the Ritz value, or after ``n`` steps; the iteration stops when
    all are done or after :data:`LANCZOS_MAX_STEPS` steps. At an invariant subspace (a start
    vector in the span of a few eigenvectors, or a matrix of low rank) the Ritz values are exact
    but may miss the top eigenvalue, so the iteration goes on from a new pseudo-random direction
    orthogonal to the Krylov space so far (a zero in :math:`T`'s off-diagonal), and the matrix is
    not done before that.

    Returns ``(b,)`` values :math:`\theta + r`, the accepted Ritz value plus its residual (at
    least the eigenvalue the Ritz value approximates); ``nan`` for a matrix that did not
    converge or whose Ritz value is below its largest diagonal entry (so not its top
    eigenvalue).
    """
    b, n = diag.shape
    steps = min(n, LANCZOS_MAX_STEPS)
    V = np.empty((b, steps + 1, n))
    V[:, 0] = _start_vector(n)
    alpha = np.zeros((b, steps))
    beta = np.zeros((b, steps))
    theta = np.full(b, np.nan)  # the accepted Ritz values
    radius = np.zeros(b)  # and their residuals
    trace = diag.sum(axis=1)  # >= the largest eigenvalue
    rows = np.arange(b)  # the matrices still iterating
    restarted = np.zeros(b, dtype=bool)
    for j in range(steps):
        every = len(rows) == b  # slices, not copies, while no matrix has left
        basis = V[:, : j + 1] if every else V[rows, : j + 1]
        w = matvec(basis[:, j], rows)
        # Gram-Schmidt against every Lanczos vector, twice ("twice is enough"): the coefficients
        # on the last two are the three-term recurrence's, alpha_j and beta_{j-1}, and the others
        # vanish but for rounding, which the projections remove
        c = basis @ w[:, :, None]
        w -= (c.transpose(0, 2, 1) @ basis)[:, 0]
        c2 = basis @ w[:, :, None]
        w -= (c2.transpose(0, 2, 1) @ basis)[:, 0]
        after = np.sqrt(np.einsum("bi,bi->b", w, w))
        alpha[rows, j] = c[:, j, 0] + c2[:, j, 0]
        beta[rows, j] = after
        # an invariant subspace: its Ritz values are exact, but the top eigenvalue may lie outside
        invariant = after <= 1e-14 * trace[rows]
        if j + 1 == steps or (j >= 11 and j % 2 == 1):
            T = np.zeros((len(rows), j + 1, j + 1))
            i = np.arange(j + 1)
            T[:, i, i] = alpha[rows, : j + 1]
            T[:, i[:-1], i[1:]] = beta[rows, :j]
            T[:, i[1:], i[:-1]] = beta[rows, :j]
            ritz, vecs = np.linalg.eigh(T)
            top = ritz[:, -1]
            resid = beta[rows, j] * np.abs(vecs[:, -1, -1])
            # not at a first invariant subspace: it has not yet looked beyond the start's span
            settled = ~invariant | restarted[rows]
            ok = ((resid <= LANCZOS_TOL * np.abs(top)) & settled) | (j + 1 == n)
            theta[rows[ok]], radius[rows[ok]] = top[ok], resid[ok]
            if ok.all():
                break
            rows, w, invariant = rows[~ok], w[~ok], invariant[~ok]
        beta_j = beta[rows, j]
        V[rows, j + 1] = w / np.where(beta_j > 0, beta_j, 1.0)[:, None]
        if invariant.any():  # go on from a new direction orthogonal to the Krylov space so far
            restart = rows[invariant]
            restarted[restart] = True
            beta[restart, j] = 0.0
            fresh = np.random.default_rng((0x1A5C205, j)).standard_normal((len(restart), n))
            basis = V[restart, : j + 1]
            for _ in range(2):
                fresh -= ((basis @ fresh[:, :, None])[:, :, 0][:, None, :] @ basis)[:, 0]
            V[restart, j + 1] = fresh / np.linalg.norm(fresh, axis=1, keepdims=True)
    # an eigenvalue lies within the residual of the Ritz value: theta + r is at least that one
    return np.where(theta >= diag.max(axis=1) * (1.0 - 1e-12), theta + radius, np.nan)


def op_norm(A: torch.Tensor) -> float:
    r"""Spectral norm (largest singular value) of a matrix; 0 for an empty one.

    :func:`gram_op_norm` of :func:`gram` (float64): several times faster than an SVD of the wide
    blocks used here.
    """
    if A.numel() == 0:
        return 0.0
    return gram_op_norm(gram(A))
