r"""A tight, data-dependent bound on Lemma 1's left side (C4.5 -- ours, not the paper's).

Lemma 1 of C-VFL (C4.1, as recovered) bounds the compression perturbation of block ``m``'s
gradient,

.. math:: \mathbb{E}\,\|\nabla_m F_B(\Phi_m) - \nabla_m F_B(\hat\Phi_m)\|^2
          \le H_m^2 G_m^2 \sum_{j \ne m} E_j ,

by sup constants; measured on real runs it is loose by :math:`10^3`-:math:`10^6` (issue 9).
This module computes **our** bound (C4.5, proved in ``docs/tight_term.rst``), which uses the
batch's own per-sample Jacobians and curvatures:

.. math:: \mathbb{E}\,\|\nabla_m F_B(\Phi_m) - \nabla_m F_B(\hat\Phi_m)\|^2
          \le \Bigl(\sqrt{\mathcal{F}_m} + \sqrt{\mathcal{R}_m}\Bigr)^2,

.. math:: \mathcal{F}_m = \frac{1}{B^2}\sum_{i=1}^{B}\sum_{j \ne m,\, j \ge 1}
          s_{j,i}^2\, \|J_{m,i}^\top A_{mj,i}\|_F^2
          + \frac{s_0^2}{B^2}\Bigl\|\sum_{i=1}^{B} J_{m,i}^\top A_{m0,i}\Bigr\|_F^2 ,

with :math:`J_{m,i} = \partial h_{m,i}/\partial\theta_m` (the identity for the server,
``m = 0``), :math:`A_{mj,i} = \nabla^2_{h_m, h_j}\ell_i` (:math:`h_0 = \theta_0`),
:math:`s_{j,i}^2` the per-component error variance of party ``j``'s compressor on row ``i`` and
:math:`s_0^2` the server model's. :math:`\mathcal{F}_m` is the **exact** second moment of the
first-order (linear) part of the perturbation when the errors are zero-mean, uncorrelated
across samples and components with isotropic covariance (dithered scalar, C5.1, and hexagonal
lattice, C5.2, quantizers); the server-model error :math:`\varepsilon_0` is common to all
samples, so its part has no :math:`1/B` gain. :math:`\mathcal{R}_m` bounds the second moment
of the Taylor remainder with an analytic third-derivative bound of softmax cross entropy
(:data:`CE_THIRD`) for a linear server head, expanded with the exact second and fourth moments
of the dither errors (:data:`SUBGAUSSIAN_FOURTH`) and with local softmax constants on the
ball the logits can reach on the dither's (bounded) support.

For biased compressors (top-k, C5.4) the errors are deterministic functions of the data, not
zero-mean and not independent across samples: :func:`realised_lemma1_bound` gives the
deterministic bound from the realised errors (no :math:`1/B` gain).

Both bounds are evaluated at a round start (local step 0, :math:`\Phi_m = \Phi^{t_0}`, the
fresh embeddings of the given parameters), conditionally on the batch and the parameters; the
expectation is over the dither only. Given the round's start (``stale``, ``theta0``) they are
evaluated at a later local step, each block at its own point of Lemma 1; the dithered one is then
an estimate (the point depends on the round's dither), the realised one still a bound.

References
----------
1. Castiglia et al., Compressed-VFL, ICML 2022, Lemma 1 (C4.1).
2. ``docs/tight_term.rst`` (the proof), ``proofs_checks/c4_5_tight_term.py`` (the whole bound)
   and ``proofs_checks/c4_5_tight_points.py`` (each step where it is tight): the checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

from cvfl_theory.table import Table

from ._autodiff import (
    check_lemma1_models,
    flat_params,
    linear_head_second_derivatives,
    linear_softmax_head,
    plain_linear,
    with_block,
)
from ._jacobians import EmbeddingJacobian, embedding_jacobians
from .analytic_constants import softmax_parts

__all__ = [
    "CE_THIRD",
    "draws_dither",
    "SOFTMAX_LIPSCHITZ",
    "SUBGAUSSIAN_FOURTH",
    "TightLemma1",
    "tight_lemma1_bound",
    "tight_lemma1_bound_for",
    "realised_lemma1_bound",
    "error_variances",
    "error_kind",
    "fourth_moment_bound",
    "norm4_bound",
    "local_softmax_constants",
    "off_top_probability",
    "max_error_sq",
    "minkowski_bound",
]

#: :math:`c_3 = 1/\sqrt2`: for softmax :math:`p` and all :math:`u, v`,
#: :math:`\|\nabla^2 p(u)[v, v]\| \le c_3 \|v\|^2` (third derivative of log-sum-exp; proof in
#: ``docs/tight_term.rst``, numerical check in ``proofs_checks/c4_5_tight_term.py``).
CE_THIRD = 1.0 / math.sqrt(2.0)
#: :math:`\|\nabla p(u)\|_{op} = \lambda_{\max}(\mathrm{diag}(p) - pp^\top) \le 1/2`.
SOFTMAX_LIPSCHITZ = 0.5
#: Fourth moment of one dither unit over that of a Gaussian unit of the same covariance (sympy,
#: ``proofs_checks/c4_5_tight_term.py``): scalar, :math:`E u^4 = \tfrac95 s^4` vs :math:`3 s^4`;
#: hexagon pair, :math:`E\|u\|^4 = \tfrac{672}{125} s^4` vs :math:`8 s^4` (and, with its
#: isotropic fourth-moment tensor, :math:`E(u^\top M u)^2 = \tfrac{84}{125}
#: E_{\mathrm{Gauss}}(u^\top M u)^2` for every symmetric ``M``). Both are ``<= 1``, which makes
#: :math:`\mathbb{E}\|\zeta\|^4 \le (\operatorname{tr} C)^2 + 2\operatorname{tr}(C^2)` for every
#: linear image :math:`\zeta` of independent units with covariance ``C``.
SUBGAUSSIAN_FOURTH = {"scalar": 3.0 / 5.0, "hex": 84.0 / 125.0}
_KINDS = ("scalar", "hex", "dithered")


# ---------------------------------------------------------------------------------------------
# the result
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TightLemma1:
    r"""Per-block bounds on :math:`\mathbb{E}\|\nabla_m F_B(\Phi_m) - \nabla_m F_B(\hat\Phi_m)\|^2`.

    Arrays have one entry per block ``m = 0..M`` (``0`` is the server).

    Attributes
    ----------
    first_order : numpy.ndarray
        :math:`\mathcal{F}_m`: exact second moment of the linear part (dithered), or the squared
        norm of the realised linear part (:func:`realised_lemma1_bound`).
    remainder : numpy.ndarray
        :math:`\mathcal{R}_m`: bound on the second moment (or realised square) of the Taylor
        remainder; zeros when it was not computed (then ``rigorous`` is ``False``).
    bound : numpy.ndarray
        :math:`(\sqrt{\mathcal{F}_m} + \sqrt{\mathcal{R}_m})^2` (Minkowski).
    sup_form : numpy.ndarray
        The sup-constant corollary of :math:`\mathcal{F}_m`, for the record (``nan`` where it
        was not asked for, or for realised errors):
        :math:`\frac1B G^2 H^2 \sum_{j\ne m, j\ge1} P_j \max_i s_{j,i}^2 + G^2 H^2
        \min(P_m, |\theta_0|)\, s_0^2` with :math:`G = \max_i\|J_{m,i}\|`, :math:`H = \max_{i,j}
        \|A_{mj,i}\|` (operator norms); ``nan`` for realised errors.
    batch_size : int
        ``B``.
    method : str
        ``"dithered"`` (expectation over the dither) or ``"realised"`` (deterministic).
    kinds : tuple of str
        Error law of each block's compressor, server first.
    rigorous : bool
        Whether ``bound`` is a proved upper bound (the remainder was bounded).
    """

    first_order: np.ndarray
    remainder: np.ndarray
    bound: np.ndarray
    sup_form: np.ndarray
    batch_size: int
    method: str
    kinds: tuple[str, ...]
    rigorous: bool

    def table(self) -> Table:
        """One row per block: first order, remainder, bound, sup form (C4.5, ours)."""
        rows = [
            [m, float(f), float(r), float(b), float(s)]
            for m, (f, r, b, s) in enumerate(
                zip(self.first_order, self.remainder, self.bound, self.sup_form)
            )
        ]
        what = "proved bound" if self.rigorous else "first order only, NOT a bound"
        return Table(
            ["block m", "first order", "remainder", "bound", "sup form"],
            rows,
            title=(
                f"Lemma 1 left side, tight term C4.5 (ours, not the paper's): {self.method} "
                f"errors, B = {self.batch_size}, {what}"
            ),
        )

    def __str__(self) -> str:
        return str(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


# ---------------------------------------------------------------------------------------------
# compressors -> error laws
# ---------------------------------------------------------------------------------------------
def error_kind(compressor: Any) -> str:
    """Error law of a package compressor: ``"scalar"`` or ``"hex"`` (dithered), ``"none"``.

    Raises
    ------
    ValueError
        For a compressor whose error is not zero-mean and data-independent (top-k, or a
        quantizer without dither): use :func:`realised_lemma1_bound`.
    """
    from cvfl_theory.compressors import Identity, ScalarQuantizer

    if compressor is None or isinstance(compressor, Identity):
        return "none"
    if draws_dither(compressor):
        return "scalar" if isinstance(compressor, ScalarQuantizer) else "hex"
    raise ValueError(
        f"compressor must be a dithered ScalarQuantizer or HexLatticeQuantizer (zero-mean, "
        f"data-independent errors), or Identity; got {compressor!r}: use realised_lemma1_bound"
    )


def draws_dither(compressor: Any) -> bool:
    """Whether a package compressor's error is random: a dithered scalar or lattice quantizer."""
    from cvfl_theory.compressors import HexLatticeQuantizer, ScalarQuantizer

    return isinstance(compressor, (ScalarQuantizer, HexLatticeQuantizer)) and bool(
        compressor.dither
    )


def error_variances(compressor: Any, x: Any) -> np.ndarray:
    r"""Per-row, per-component error variance :math:`s_i^2` of a compressor on ``x`` (B, P).

    :math:`s_i^2 = \mathbb{E}\|C(x_i) - x_i\|^2 / P` from the compressor's own exact
    ``expected_error`` (C5.1: :math:`\Delta_i^2/12`; C5.2: :math:`5V_i/(36\sqrt3)`): row by row for
    ``range="minmax-row"`` (one step per row), and one shared step for a fixed range or
    ``"minmax-tensor"`` (one range for the whole matrix). Identity gives zeros (float32 rounding ignored).

    Raises
    ------
    ValueError
        A biased compressor (see :func:`error_kind`), or a fixed-range quantizer that would clip
        ``x`` (the error is then not zero-mean: the "no overload" assumption fails).
    """
    kind = error_kind(compressor)
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    if kind == "none":
        return np.zeros(a.shape[0])
    if not isinstance(compressor.range, str):
        lo, hi = compressor.range
        if np.any(a < lo) or np.any(a > hi):
            raise ValueError(
                f"x has entries outside the compressor's fixed range {compressor.range}: the "
                "quantizer would clip (overload), so its error is not zero-mean"
            )
    if compressor.range == "minmax-row":  # one step per row
        return compressor.expected_row_errors(a) / a.shape[1]
    # a fixed range or one min-max range for the whole tensor: one step shared by every row
    return np.full(a.shape[0], compressor.expected_error(a) / a.size)


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
def _variances(error_var: Any, M: int, B: int) -> np.ndarray:
    if not isinstance(error_var, Sequence) and not isinstance(error_var, np.ndarray):
        raise TypeError("error_var must be a sequence of M per-party variances")
    if len(error_var) != M:
        raise ValueError(f"error_var must have one entry per party (M = {M}), got {len(error_var)}")
    out = np.empty((M, B))
    for k, v in enumerate(error_var):
        a = np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v, dtype=np.float64)
        if a.ndim > 1 or (a.ndim == 1 and a.size != B):
            raise ValueError(
                f"error_var[{k}] must be a scalar or have B = {B} entries (one per row)"
            )
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"error_var[{k}] must be finite and >= 0, got {a.tolist()}")
        out[k] = a
    return out


def _kinds(kind: Any, M: int) -> tuple[str, ...]:
    ks = (kind,) * (M + 1) if isinstance(kind, str) else tuple(kind)
    if len(ks) != M + 1 or any(k not in (*_KINDS, "none") for k in ks):
        raise ValueError(
            f"kind must be one of {_KINDS} or a sequence of M + 1 = {M + 1} of them (server "
            f"first), got {kind!r}"
        )
    return ks


# ---------------------------------------------------------------------------------------------
# per-sample derivatives of the head at each block's point (closed forms for a linear head,
# torch.func otherwise); the parties' Jacobians are cvfl_sim.bounds._jacobians operators
# ---------------------------------------------------------------------------------------------
@dataclass
class _Point:
    """The head's per-sample derivatives at one evaluation point ``(θ_0, z)`` (numpy, float64)."""

    z: np.ndarray  # (B, P) concatenated embeddings
    Hzz: np.ndarray  # (B, P, P) per-sample Hessian of the loss in the embeddings
    A0: np.ndarray  # (B, N0, P) per-sample d(grad_theta0 loss)/dz
    W: np.ndarray | None  # a linear head's weight and bias at theta_0 (else None)
    bias: np.ndarray | None

    @property
    def zeta(self) -> np.ndarray:
        r""":math:`\sqrt{\|z_i\|^2 + 1}` per sample."""
        return np.sqrt(np.sum(self.z**2, axis=1) + 1.0)


@dataclass
class _Derivatives:
    sizes: list[int]  # P_1..P_M
    J: list[EmbeddingJacobian]  # per party: per-sample Jacobians of h_m in theta_m
    n0: int
    at: list[_Point]  # block m's evaluation point, m = 0..M (one object where they coincide)


def _derivatives(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: Any,
    loss: Any = None,
    jacobians: Sequence[EmbeddingJacobian] | None = None,
    embeddings: Sequence[torch.Tensor] | None = None,
    round_start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> _Derivatives:
    r"""Per-sample derivatives at every block's evaluation point.

    Without ``round_start`` every block is evaluated at the round start: the server's
    parameters and the parties' fresh embeddings. With ``round_start = (stale, theta0)``, at a
    later local step of the round: the server block at (its current parameters, the stale
    embeddings :math:`H^{t_0}`), party ``m`` at (:math:`\theta_0^{t_0}`, :math:`H^{t_0}` with its
    own block replaced by its fresh embedding) -- the points of Lemma 1 (C2).
    """
    from ..vfl.models import LinearHead

    if embeddings is None:
        with torch.no_grad():
            H = [p(x) for p, x in zip(parties, inputs)]
    else:
        H = list(embeddings)
    sizes = [int(h.shape[1]) for h in H]
    B = int(H[0].shape[0])
    J = list(jacobians) if jacobians is not None else embedding_jacobians(parties, inputs)
    if [(j.B, j.P, j.N) for j in J] != [
        (B, Pm, sum(q.numel() for q in net.parameters())) for net, Pm in zip(parties, sizes)
    ]:
        raise ValueError(
            "jacobians must be one EmbeddingJacobian of (B, P_m, |θ_m|) per party, got "
            f"{[(j.B, j.P, j.N) for j in J]}"
        )
    fresh = torch.cat([h.detach() for h in H], dim=1)
    now = flat_params(server).to(fresh.dtype)
    if round_start is None:
        points = [(now, fresh)]
        which = [0] * (len(H) + 1)
    else:  # checked by the callers (_check_round_start)
        stale, theta0 = (t.detach().to(fresh.dtype) for t in round_start)
        points = [(now, stale)] + [
            (theta0.reshape(-1), with_block(stale, h.detach(), sizes, m))
            for m, h in enumerate(H, start=1)
        ]
        which = list(range(len(H) + 1))
    head = linear_softmax_head(server)  # its weight and bias are all of θ_0, in that order

    def weights(t: torch.Tensor) -> tuple[np.ndarray | None, np.ndarray | None]:
        if head is None:
            return None, None
        w = head.weight.numel()
        return _np(t[:w].reshape(head.weight.shape)), _np(t[w:])

    lin = plain_linear(server, LinearHead) if loss is None else None
    if lin is not None:  # closed forms (the same values as the torch.func path below)
        theta_cols, zz = linear_head_second_derivatives(
            lin,
            torch.stack([t for t, _ in points]),
            torch.stack([z for _, z in points]),
            y,
            mean=False,
        )
        at = [
            _Point(_np(z), _np(zz[k]), _np(theta_cols[k].transpose(1, 2)), *weights(t))
            for k, (t, z) in enumerate(points)
        ]
    else:
        at = [_point_by_autograd(server, t, z, y, loss, *weights(t)) for t, z in points]
    return _Derivatives(sizes, J, int(at[0].A0.shape[1]), [at[k] for k in which])


def _point_by_autograd(
    server: nn.Module,
    theta0: torch.Tensor,
    z: torch.Tensor,
    y: Any,
    loss: Any,
    W: np.ndarray | None,
    bias: np.ndarray | None,
) -> _Point:
    """A head without closed forms: :mod:`torch.func` per-sample derivatives at ``(θ_0, z)``."""
    B, P = z.shape
    sp, off = {}, 0
    for k, v in server.named_parameters():
        sp[k] = theta0[off : off + v.numel()].reshape(v.shape).detach()
        off += v.numel()

    def ell(params: dict[str, torch.Tensor], zi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = functional_call(server, params, (zi.unsqueeze(0),))
        if loss is None:
            return nn.functional.cross_entropy(logits, yi.unsqueeze(0))
        return loss(logits, yi.unsqueeze(0))

    Hzz = vmap(jacrev(jacrev(ell, argnums=1), argnums=1), in_dims=(None, 0, 0))(sp, z, y)
    A0d = vmap(jacrev(jacrev(ell, argnums=0), argnums=1), in_dims=(None, 0, 0))(sp, z, y)
    A0 = torch.cat([A0d[k].reshape(B, -1, P) for k in sp], dim=1)
    return _Point(_np(z), _np(Hzz.detach()), _np(A0.detach()), W, bias)


def _blocks(sizes: Sequence[int]) -> list[slice]:
    off = np.concatenate([[0], np.cumsum(sizes)])
    return [slice(int(off[k]), int(off[k + 1])) for k in range(len(sizes))]


def _party_part(K: np.ndarray | None, A: np.ndarray, s2: np.ndarray) -> float:
    r""":math:`\frac1{B^2}\sum_i \sum_c s_{i,c}^2 \|J_i^\top A_{i,c}\|^2`, :math:`K_i = J_i J_i^\top`.

    ``K=None`` means :math:`J_i = I` (the server block). ``A`` is ``(B, P_m, C)``, its columns
    :math:`A_{i,c}` the embedding entries of the other parties; ``s2`` is ``(B, C)``, the error
    variance of each sample's entry (0 for columns that do not count).
    """
    B = A.shape[0]
    fro = np.sum(A**2, axis=1) if K is None else np.einsum("bpq,bpc,bqc->bc", K, A, A)
    return float(np.sum(s2 * fro)) / B**2


def _server_part(J: EmbeddingJacobian, A_m0: np.ndarray, s0: float) -> float:
    r""":math:`\frac{s_0^2}{B^2}\|\sum_i J_i^\top A_{m0,i}\|_F^2`: one error for every sample.

    ``A_m0`` is ``(B, N_0, P_m)`` (:math:`A_{m0,i}^\top`): column ``c`` of the sum is
    :math:`\sum_i J_i^\top (A_{m0,i}^\top)_{c}`; only the squared norm of all the columns is
    needed (:meth:`EmbeddingJacobian.rmatmat_sq_norm`).
    """
    return s0 * J.rmatmat_sq_norm(A_m0.transpose(1, 0, 2)) / J.B**2


def _op_norm_wj(Wm: np.ndarray, K: np.ndarray) -> np.ndarray:
    r"""Per-sample :math:`\|W_m J_{m,i}\|_{op}` from :math:`K_i = J_{m,i} J_{m,i}^\top`."""
    return np.sqrt(_top_eigenvalues([_wkw(Wm, K)])[0])


def _wkw(Wm: np.ndarray, K: np.ndarray) -> np.ndarray:
    r""":math:`W_m K_i W_m^\top` per sample: the Gram of :math:`W_m J_{m,i}`."""
    return np.einsum("kp,bpq,lq->bkl", Wm, K, Wm)


def _top_eigenvalues(stacks: Sequence[np.ndarray]) -> list[np.ndarray]:
    r"""The largest eigenvalue of every symmetric matrix of each stack ``(B, k, k)``, clipped at 0.

    Stacks of one shape go to LAPACK in one call.
    """
    out: list[np.ndarray] = [np.zeros(0)] * len(stacks)
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for k, S in enumerate(stacks):
        by_shape.setdefault(S.shape, []).append(k)
    for ks in by_shape.values():
        tops = np.linalg.eigvalsh(np.stack([stacks[k] for k in ks]))[..., -1].clip(min=0.0)
        for k, top in zip(ks, tops):
            out[k] = top
    return out


def _max_op_norms(stacks: Sequence[np.ndarray]) -> list[float]:
    r""":math:`\max_i \|A_i\|_{op}` of each stack ``(B, n, p)``, from the smaller Gram of each.

    The Gram matrices of one size, from every stack, go to LAPACK in one call.
    """
    grams = [
        A.transpose(0, 2, 1) @ A if A.shape[2] <= A.shape[1] else A @ A.transpose(0, 2, 1)
        for A in stacks
    ]
    out = [0.0] * len(grams)
    by_size: dict[int, list[int]] = {}
    for k, G in enumerate(grams):
        if G.shape[1] and G.shape[0]:
            by_size.setdefault(int(G.shape[1]), []).append(k)
    for ks in by_size.values():
        tops = np.linalg.eigvalsh(np.concatenate([grams[k] for k in ks]))[:, -1]
        ends = np.cumsum([len(grams[k]) for k in ks])
        for k, part in zip(ks, np.split(tops, ends[:-1])):
            out[k] = math.sqrt(max(float(part.max()), 0.0))
    return out


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


# ---------------------------------------------------------------------------------------------
# the remainder (linear head)
# ---------------------------------------------------------------------------------------------
def _fourth_moment(C: np.ndarray) -> np.ndarray:
    r""":math:`(\operatorname{tr} C)^2 + 2\operatorname{tr}(C^2)` for a stack of covariances ``C``.

    An upper bound on :math:`\mathbb{E}\|\zeta\|^4` for a linear image :math:`\zeta` of
    independent dither units with covariance ``C`` (equality for Gaussian units; the uniform
    scalar and hexagon units have smaller fourth moments, :data:`SUBGAUSSIAN_FOURTH`).
    """
    tr = np.trace(C, axis1=-2, axis2=-1)
    return tr**2 + 2.0 * np.sum(C * np.swapaxes(C, -1, -2), axis=(-2, -1))


def _norm4_bound(mean2: np.ndarray, sum_s4: np.ndarray) -> np.ndarray:
    r""":math:`\mathbb{E}\|\varepsilon\|^4 \le (\sum P s^2)^2 + 2\sum P s^4` (identity map)."""
    return mean2**2 + 2.0 * sum_s4


@dataclass
class _Softmax:
    r"""Per-sample softmax quantities at the batch's logits (linear head)."""

    lam0: np.ndarray  # exact ||J_p(u_i)||
    delta: np.ndarray  # 1 - max_k p_k(u_i)


def off_top_probability(logits: Any) -> np.ndarray:
    r""":math:`\delta = 1 - \max_k p_k(u)` per row of ``logits``, without cancellation.

    Computed as :math:`\rho/(1 + \rho)` with :math:`\rho = \sum_{k \ne k^\star}
    e^{u_k - u_{k^\star}}` (:math:`k^\star` the top class), so it stays positive and accurate
    where :math:`1 - \max_k p_k` rounds to 0 (a logit gap above about 37 in float64); a tie for
    the top gives :math:`\rho \ge 1`.

    Examples
    --------
    >>> float(off_top_probability([[0.0, -50.0]])[0])  # e^-50 / (1 + e^-50), not 0
    1.9287498479639178e-22
    """
    u = np.asarray(logits, dtype=np.float64)
    if u.ndim != 2 or u.shape[1] < 1 or not np.all(np.isfinite(u)):
        raise ValueError(f"logits must be a finite (n, K) array, got shape {u.shape}")
    top = u.argmax(axis=1)
    e = np.exp(u - u[np.arange(len(u)), top][:, None])
    e[np.arange(len(u)), top] = 0.0
    rho = e.sum(axis=1)
    return rho / (1.0 + rho)


def _softmax_at(W: np.ndarray, b: np.ndarray, z: np.ndarray) -> _Softmax:
    # the labels do not enter p or its Jacobian diag(p) - pp^T
    u = z @ W.T + b
    _, _, _, lam0 = softmax_parts(u, np.zeros(len(z), dtype=np.int64))
    # an upper bound on delta: a term exp(u_k - u_top) that underflowed to 0 was below the
    # smallest subnormal, so delta = 0 (a logit gap above ~745) is replaced by (K - 1) times it
    # (0 * exp(sqrt(2) r) would otherwise read 0, or nan where the exponential overflows)
    floor = (u.shape[1] - 1) * np.finfo(np.float64).smallest_subnormal
    return _Softmax(lam0, off_top_probability(u) + floor)


def _local_constants(sm: _Softmax, radius: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Softmax constants valid on the ball of ``radius`` around each sample's logits.

    With :math:`\delta = 1 - \max_k p_k(u)` and
    :math:`\delta_r = \min(1, \delta e^{\sqrt2 r}/(1 - \delta))` (the probability off the top
    class anywhere in the ball): :math:`\|J_p\| \le \lambda_r = \min(1/2, 2\delta_r)` and
    :math:`\|\nabla^2 p[v, v]\| \le \kappa_r\|v\|^2`, :math:`\kappa_r = \min(c_3,
    4\sqrt2\,\delta_r)` (docs/tight_term.rst, Step 3).
    """
    with np.errstate(over="ignore"):
        dr = np.minimum(1.0, sm.delta * np.exp(np.sqrt(2.0) * radius) / (1.0 - sm.delta))
    return np.minimum(SOFTMAX_LIPSCHITZ, 2.0 * dr), np.minimum(CE_THIRD, 4.0 * np.sqrt(2.0) * dr)


#: Largest squared error per component over the dither's support, in units of :math:`s^2`:
#: scalar :math:`(\Delta/2)^2 = 3 s^2`; hexagon: the circumradius squared of a cell of area
#: :math:`V` is :math:`2V/(3\sqrt3) = \tfrac{24}{5} s^2` per pair, and a lone component (odd
#: ``P``) can take all of it, so :math:`\tfrac{24}{5} s^2` per component is used.
_MAX_SQ = {"scalar": 3.0, "hex": 24.0 / 5.0, "dithered": 24.0 / 5.0, "none": 0.0}


def _dithered_remainder(
    m: int,
    W: np.ndarray,
    sizes: Sequence[int],
    zeta: np.ndarray,
    s2: np.ndarray,
    s0: float,
    G: np.ndarray,
    GW: np.ndarray,
    sm: _Softmax,
    kinds: Sequence[str],
) -> float:
    r"""Bound on :math:`\sqrt{\mathbb{E}\|\frac1B\sum_i J_{m,i}^\top r_i\|^2}` (linear head).

    ``s2`` is ``(M, B)``, ``G`` the per-sample :math:`\|J_{m,i}\|`, ``GW`` the per-sample
    :math:`\|W_m J_{m,i}\|` (unused for ``m = 0``), ``kinds`` the error laws (server first).
    See ``docs/tight_term.rst``, Steps 4-6.
    """
    blk = _blocks(sizes)
    K = W.shape[0]
    B = s2.shape[1]
    # the other parties' errors: block m's own (m >= 1) do not enter
    P_o = np.array([0 if j == m - 1 else sizes[j] for j in range(len(sizes))], dtype=np.float64)
    entries = np.repeat(s2.T, sizes, axis=1)  # (B, sum P_j): each entry's variance
    if m:
        entries[:, blk[m - 1]] = 0.0
    # covariance of the linear part of the logit perturbation, per sample (K x K)
    C = np.einsum("kp,bp,lp->bkl", W, entries, W)
    mean_eps = P_o @ s2
    e4_eps = _norm4_bound(mean_eps, P_o @ s2**2)
    x_max = np.sqrt((P_o * [_MAX_SQ[k] for k in kinds[1:]]) @ s2)
    if m == 0:
        e4_d = _fourth_moment(C)
        lam, kap = _local_constants(sm, float(np.linalg.norm(W, 2)) * x_max)
        y = (kap / 2) * zeta * np.sqrt(e4_d) + lam * (e4_d * e4_eps) ** 0.25
        return float(np.sum(y) / B)
    n0 = W.size + W.shape[0]
    a_max = float(np.sqrt(_MAX_SQ[kinds[0]] * n0 * s0))
    Wo = np.concatenate([W[:, : blk[m - 1].start], W[:, blk[m - 1].stop :]], axis=1)
    w_o = math.sqrt(max(float(np.linalg.eigvalsh(Wo @ Wo.T)[-1]), 0.0))  # ||W_o||_2
    # the logits move by at most r_max anywhere on the dither's support
    lam, kap = _local_constants(sm, a_max * zeta + w_o * x_max + a_max * x_max)
    C += (s0 * zeta**2)[:, None, None] * np.eye(K)[None]
    l4_d = _fourth_moment(C) ** 0.25 + ((K**2 + 2 * K) * s0**2 * e4_eps) ** 0.25
    e2_eeps = K * s0 * mean_eps
    KP = K * sizes[m - 1]
    e4_em = KP**2 * s0**2 + 2 * KP * s0**2
    y = GW * ((kap / 2) * l4_d**2 + sm.lam0 * np.sqrt(e2_eeps)) + G * lam * e4_em**0.25 * l4_d
    return float(np.sum(y) / B)


def _realised_remainder(
    m: int,
    W: np.ndarray,
    sizes: Sequence[int],
    z: np.ndarray,
    eps: Sequence[np.ndarray],
    E: np.ndarray,
    e: np.ndarray,
    G: np.ndarray,
    GW: np.ndarray,
    sm: _Softmax,
) -> float:
    r"""Realised bound on :math:`\|\frac1B\sum_i J_{m,i}^\top r_i\|` (linear head)."""
    blk = _blocks(sizes)
    B = z.shape[0]
    full = np.concatenate(
        [np.zeros_like(eps[j]) if j == m - 1 else eps[j] for j in range(len(sizes))], axis=1
    )
    x = np.linalg.norm(full, axis=1)
    zeta = np.sqrt(np.sum(z**2, axis=1) + 1.0)
    if m == 0:
        d = np.linalg.norm(full @ W.T, axis=1)
        lam, kap = _local_constants(sm, d)
        y = (kap / 2) * zeta * d**2 + lam * d * x
        return float(np.sum(y) / B)
    d = np.linalg.norm((z + full) @ (W + E).T + e - z @ W.T, axis=1)
    lam, kap = _local_constants(sm, d)
    eeps = np.linalg.norm(full @ E.T, axis=1)
    em = float(np.linalg.norm(E[:, blk[m - 1]]))
    y = GW * ((kap / 2) * d**2 + sm.lam0 * eeps) + G * lam * em * d
    return float(np.sum(y) / B)


def _squared(x: float) -> float:
    """``x * x`` as a Python float: ``inf`` where it overflows (a valid, if useless, bound)."""
    return x * x


def _minkowski(first: np.ndarray, rem: np.ndarray) -> np.ndarray:
    r""":math:`(\sqrt{\mathcal F} + \sqrt{\mathcal R})^2`: Minkowski in :math:`L^2` (Step 2)."""
    return (np.sqrt(first) + np.sqrt(rem)) ** 2


# ---------------------------------------------------------------------------------------------
# the proof's inequalities, one function each (what the proofs checks evaluate where tight)
# ---------------------------------------------------------------------------------------------
def fourth_moment_bound(C: Any) -> np.ndarray:
    r"""The Lemma of Step 5: :math:`\mathbb{E}\|\zeta\|^4 \le (\operatorname{tr} C)^2 + 2\operatorname{tr}(C^2)`.

    For :math:`\zeta` a linear image of independent dither units (A1) with covariance ``C``
    (a ``(K, K)`` matrix or a stack ``(..., K, K)``); equality for Gaussian units, nearly so for
    many units along one direction. The function the remainder bound uses.
    """
    return _fourth_moment(np.asarray(C, dtype=np.float64))


def norm4_bound(mean2: Any, sum_s4: Any) -> np.ndarray:
    r""":math:`\mathbb{E}\|\varepsilon\|^4 \le (\sum_j P_j s_j^2)^2 + 2\sum_j P_j s_j^4` (identity map).

    ``mean2`` is :math:`\sum_j P_j s_j^2`, ``sum_s4`` is :math:`\sum_j P_j s_j^4`; the function the
    remainder bound uses.
    """
    return _norm4_bound(np.asarray(mean2, dtype=np.float64), np.asarray(sum_s4, dtype=np.float64))


def local_softmax_constants(delta: Any, radius: Any) -> tuple[np.ndarray, np.ndarray]:
    r"""Step 3's local constants :math:`(\lambda_r, \kappa_r)` on the ball of ``radius``.

    ``delta`` is :math:`1 - \max_k p_k(u)` at the centre :math:`u`. For every :math:`\|w\| \le r`:
    :math:`\|J_p(u + w)\| \le \lambda_r` and :math:`\|\nabla^2 p(u + w)[v, v]\| \le
    \kappa_r\|v\|^2` (``docs/tight_term.rst``, Step 3). The function the remainder bound uses.
    """
    d = np.atleast_1d(np.asarray(delta, dtype=np.float64))
    return _local_constants(_Softmax(np.zeros_like(d), d), np.asarray(radius, dtype=np.float64))


def max_error_sq(kind: str) -> float:
    r"""Largest squared error per component on the dither's support, in units of :math:`s^2`.

    ``kind`` is ``"scalar"`` (:math:`(\Delta/2)^2 = 3s^2`), ``"hex"`` or ``"dithered"``
    (the hexagon's circumradius squared, :math:`\tfrac{24}{5}s^2`) or ``"none"``; the values the
    remainder bound's support radius uses.
    """
    return float(_MAX_SQ[kind])


def minkowski_bound(first: Any, remainder: Any) -> np.ndarray:
    r"""Step 2: :math:`\sqrt{\mathbb{E}\|a + R\|^2} \le \sqrt{\mathbb{E}\|a\|^2} + \sqrt{\mathbb{E}\|R\|^2}`, squared.

    The combination of :math:`\mathcal F_m` and :math:`\mathcal R_m` into ``bound`` (equality when
    :math:`a` and :math:`R` are aligned).
    """
    return _minkowski(np.asarray(first, dtype=np.float64), np.asarray(remainder, dtype=np.float64))


# ---------------------------------------------------------------------------------------------
# the bounds
# ---------------------------------------------------------------------------------------------
def tight_lemma1_bound(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    error_var: Sequence[Any],
    *,
    server_error_var: float = 0.0,
    kind: str | Sequence[str] = "dithered",
    remainder: bool = True,
    loss: Any = None,
    jacobians: Sequence[EmbeddingJacobian] | None = None,
    sup_form: bool = True,
) -> TightLemma1:
    r"""Tight bound on Lemma 1's left side for dithered quantizers (C4.5, ours, not the paper's).

    For every block ``m = 0..M`` bounds
    :math:`\mathbb{E}\|\nabla_m F_B(\Phi_m) - \nabla_m F_B(\hat\Phi_m)\|^2` (expectation over
    the dither, batch and parameters fixed, at a round start) by
    :math:`(\sqrt{\mathcal{F}_m} + \sqrt{\mathcal{R}_m})^2` with

    .. math:: \mathcal{F}_m = \frac{1}{B^2}\sum_i \sum_{j\ne m, j\ge 1} s_{j,i}^2
              \|J_{m,i}^\top A_{mj,i}\|_F^2 + \frac{s_0^2}{B^2}
              \Bigl\|\sum_i J_{m,i}^\top A_{m0,i}\Bigr\|_F^2

    (:math:`J_{0,i} = I`; for ``m = 0`` only the parties' errors enter) and
    :math:`\mathcal{R}_m` the remainder bound of ``docs/tight_term.rst`` (linear head).

    Assumptions: the errors are zero-mean, independent of the data given the parameters,
    independent across parties, samples and (scalar) components or (hex) component pairs, with
    covariance :math:`s^2 I` per row (dithered quantizers without overload, C5.1, C5.2); the
    server's error is independent of the parties'; the loss is softmax cross entropy of the
    server's logits.

    Parameters
    ----------
    parties : sequence of torch.nn.Module
        The ``M`` party models :math:`h_m(\theta_m; x_m)`.
    server : torch.nn.Module
        The server head (loss: cross entropy of ``server(cat(embeddings))``).
    inputs : sequence of torch.Tensor
        The batch's per-party features, ``B`` rows each.
    y : torch.Tensor
        ``(B,)`` labels.
    error_var : sequence
        ``error_var[k]`` is :math:`s^2` of party ``k + 1`` (block ``m = k + 1``): a scalar or
        one per row (``(B,)``, e.g. min-max quantizers); see :func:`error_variances`.
    server_error_var : float
        :math:`s_0^2` per component of the compressed server model :math:`C_0(\theta_0)`.
    kind : {"dithered", "scalar", "hex"} or sequence
        The error law (fourth moments of the remainder): ``"scalar"`` (uniform), ``"hex"``
        (uniform on the hexagon) or ``"dithered"`` (the larger of the two, valid for both);
        a sequence gives one per block, server first.
    loss : callable, optional
        Per-sample loss ``loss(logits, y)`` of ``(1, K)`` logits and ``(1,)`` labels in place
        of cross entropy (first-order term only: needs ``remainder=False``).
    remainder : bool
        Bound the Taylor remainder (needs a linear head: exactly an ``nn.Linear`` with bias, or
        the toolkit's ``LinearHead``, without hooks). ``False`` returns the first-order term
        only (``rigorous=False``).
    jacobians : sequence of EmbeddingJacobian, optional
        The parties' per-sample embedding Jacobians :math:`J_{m,i}` on the batch
        (:func:`~cvfl_sim.bounds._jacobians.embedding_jacobians`), where the caller has them
        already (the Lemma-1 probe); computed here otherwise.
    sup_form : bool
        Also compute :attr:`TightLemma1.sup_form` (per-sample operator norms of every block:
        ``nan`` without it).

    Returns
    -------
    TightLemma1

    Raises
    ------
    ValueError
        Bad shapes or variances, or ``remainder=True`` with a non-linear head.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> parties = [torch.nn.Linear(3, 2).double(), torch.nn.Linear(2, 2).double()]
    >>> server = torch.nn.Linear(4, 3).double()
    >>> xs = [torch.randn(16, 3, dtype=torch.float64), torch.randn(16, 2, dtype=torch.float64)]
    >>> y = torch.randint(0, 3, (16,))
    >>> r = tight_lemma1_bound(parties, server, xs, y, [1e-4, 1e-4], server_error_var=1e-6)
    >>> bool((r.bound >= r.first_order).all()), r.bound.shape
    (True, (3,))
    """
    M, B = check_lemma1_models(parties, server, inputs, y)
    return _tight_bound(
        parties,
        server,
        inputs,
        y,
        _variances(error_var, M, B),  # (M, B)
        float(_variances([server_error_var], 1, 1)[0, 0]),
        _kinds(kind, M),
        remainder,
        loss,
        jacobians,
        sup_form,
        None,
    )


def _tight_bound(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    s2: np.ndarray,
    s0: float,
    kinds: tuple[str, ...],
    remainder: bool,
    loss: Any,
    jacobians: Sequence[EmbeddingJacobian] | None,
    sup_form: bool,
    embeddings: Sequence[torch.Tensor] | None,
    round_start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> TightLemma1:
    """:func:`tight_lemma1_bound` once its models and variances are checked.

    ``embeddings``: the parties' fresh embeddings, where the caller has them; ``round_start``:
    as in :func:`_derivatives`.
    """
    M, B = s2.shape
    if remainder not in (True, False):
        raise TypeError(f"remainder must be True or False, got {remainder!r}")
    head = linear_softmax_head(server)
    if remainder and loss is not None:
        raise ValueError("remainder=True is proved for cross entropy only: pass loss=None")
    if remainder and head is None:
        raise ValueError(
            "remainder=True needs a linear server head (an nn.Linear with bias, or the toolkit's "
            f"LinearHead, without hooks); got {type(server).__name__}: pass remainder=False for the first-order "
            "term only (not a bound)"
        )
    d = _derivatives(parties, server, inputs, y, loss, jacobians, embeddings, round_start)
    blk = _blocks(d.sizes)
    J = d.J
    first = np.zeros(M + 1)
    rem = np.zeros(M + 1)
    # the sup form, sum over (block, stack, factor) of factor * max_i ||stack_i||^2
    sup_terms: list[tuple[int, np.ndarray, float]] = []
    # m = 0: J = I, only the parties' errors
    at = d.at[0]
    # each embedding entry's error variance, (B, sum P_m): party j's for the entries of its block
    s2_entries = np.repeat(s2.T, d.sizes, axis=1)
    first[0] += _party_part(None, at.A0, s2_entries)
    for j in range(M if sup_form else 0):
        sup_terms.append((0, at.A0[:, :, blk[j]], d.sizes[j] * float(np.max(s2[j])) / B))
    soft = {}  # the softmax quantities of each distinct point
    if remainder:
        assert at.W is not None and at.bias is not None
        soft[id(at)] = _softmax_at(at.W, at.bias, at.z)
        one = np.ones(B)
        rem[0] = _squared(
            _dithered_remainder(0, at.W, d.sizes, at.zeta, s2, s0, one, one, soft[id(at)], kinds)
        )
    grams = [Jm.sample_grams() for Jm in J]  # (B, P_m, P_m): J_i J_i^T
    G2s = _top_eigenvalues(grams)  # per-sample ||J_{m,i}||^2
    if remainder:  # per-sample ||W_m J_{m,i}||
        WKW = []
        for m in range(1, M + 1):
            W = d.at[m].W
            assert W is not None  # a linear head
            WKW.append(_wkw(W[:, blk[m - 1]], grams[m - 1]))
        GWs = [np.sqrt(top) for top in _top_eigenvalues(WKW)]
    for m in range(1, M + 1):
        at = d.at[m]
        Jm = J[m - 1]
        K, G2 = grams[m - 1], G2s[m - 1]
        others = s2_entries.copy()
        others[:, blk[m - 1]] = 0.0  # its own block's errors are not in Phi_m
        first[m] += _party_part(K, at.Hzz[:, blk[m - 1], :], others)
        if sup_form:
            for j in range(M):
                if j == m - 1:
                    continue
                factor = float(np.max(G2)) * d.sizes[j] * float(np.max(s2[j])) / B
                sup_terms.append((m, at.Hzz[:, blk[m - 1], blk[j]], factor))
        if s0 > 0:
            A_m0 = at.A0[:, :, blk[m - 1]]  # (B, N0, P_m)
            first[m] += _server_part(Jm, A_m0, s0)
            if sup_form:
                factor = float(np.max(G2)) * min(d.sizes[m - 1], d.n0) * s0
                sup_terms.append((m, A_m0, factor))
        if remainder:
            assert at.W is not None and at.bias is not None
            if id(at) not in soft:
                soft[id(at)] = _softmax_at(at.W, at.bias, at.z)
            rem[m] = _squared(
                _dithered_remainder(
                    m, at.W, d.sizes, at.zeta, s2, s0, np.sqrt(G2), GWs[m - 1], soft[id(at)], kinds
                )
            )
    sup = np.zeros(M + 1) if sup_form else np.full(M + 1, np.nan)
    if sup_form:
        for (m, _, factor), H in zip(sup_terms, _max_op_norms([A for _, A, _ in sup_terms])):
            sup[m] += factor * H**2
    bound = _minkowski(first, rem)
    return TightLemma1(first, rem, bound, sup, B, "dithered", kinds, bool(remainder))


def tight_lemma1_bound_for(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    compressors: Any,
    server_compressor: Any = None,
    *,
    remainder: bool = True,
    jacobians: Sequence[EmbeddingJacobian] | None = None,
    sup_form: bool = True,
    stale: torch.Tensor | None = None,
    theta0: torch.Tensor | None = None,
    embeddings: Sequence[torch.Tensor] | None = None,
) -> TightLemma1:
    r""":func:`tight_lemma1_bound` with the error laws read from the package's compressors.

    Parameters
    ----------
    parties, server, inputs, y
        As in :func:`tight_lemma1_bound`.
    compressors : Compressor or sequence of Compressor
        :math:`C_m` of the parties (one for all, or one per party): dithered
        :class:`~cvfl_theory.compressors.ScalarQuantizer`,
        :class:`~cvfl_theory.compressors.HexLatticeQuantizer` or
        :class:`~cvfl_theory.compressors.Identity`.
    server_compressor : Compressor, optional
        :math:`C_0` of the flattened server model (``None``: no server compression).
    remainder, jacobians, sup_form
        As in :func:`tight_lemma1_bound`.
    stale, theta0 : torch.Tensor, optional
        The round's start, for a later local step of the round (both or neither): the stale
        embeddings :math:`H^{t_0}`, ``(B, ΣP_m)``, the compressors' inputs, and the flat server
        parameters :math:`\theta_0^{t_0}`, the server compressor's input. Block ``m`` is then
        evaluated at its own point of Lemma 1 (C2): party ``m``'s current model for its block
        (``parties``), :math:`H^{t_0}` for the others and :math:`\theta_0^{t_0}` for the head;
        the server block at ``server``'s current parameters on :math:`H^{t_0}`. The error laws
        are read at the round start. At a later step the point depends on the dither the round
        drew, so the value is an *estimate* of the expectation there, not a bound. Without
        them: the round start itself (``parties`` and ``server`` hold the round-start models).
    embeddings : sequence of torch.Tensor, optional
        The parties' outputs :math:`h_m(\theta_m; x_m)` on ``inputs``, ``(B, P_m)`` each, where
        the caller has them already (the Lemma-1 probe); computed here otherwise. Checked for
        their count, dimensions and rows only: they must be these models' outputs, in their
        dtype.

    Returns
    -------
    TightLemma1
    """
    M, B = check_lemma1_models(parties, server, inputs, y)
    comps = list(compressors) if isinstance(compressors, Sequence) else [compressors] * M
    if len(comps) != M:
        raise ValueError(f"compressors must be one compressor or M = {M}, got {len(comps)}")
    if embeddings is None:
        with torch.no_grad():
            H = [p(x) for p, x in zip(parties, inputs)]
    else:
        H = list(embeddings)
        if len(H) != M or any(h.ndim != 2 or h.shape[0] != B for h in H):
            raise ValueError(
                f"embeddings must be M = {M} tensors of B = {B} rows, got shapes "
                f"{[tuple(h.shape) for h in H]}"
            )
    start = _check_round_start(H, server, stale, theta0)
    inputs_c = H if stale is None else list(stale.detach().split([h.shape[1] for h in H], 1))
    s2 = [error_variances(c, h) for c, h in zip(comps, inputs_c)]
    s0 = float(error_variances(server_compressor, start.reshape(1, -1))[0])
    kinds = [error_kind(server_compressor)] + [error_kind(c) for c in comps]
    return _tight_bound(
        parties,
        server,
        inputs,
        y,
        _variances(s2, M, B),
        float(_variances([s0], 1, 1)[0, 0]),
        _kinds(kinds, M),
        remainder,
        None,
        jacobians,
        sup_form,
        H,
        None if stale is None else (stale, start),
    )


def _check_round_start(
    H: Sequence[torch.Tensor],
    server: nn.Module,
    stale: torch.Tensor | None,
    theta0: torch.Tensor | None,
) -> torch.Tensor:
    """The round start's flat server parameters (the server's own without ``stale``), checked."""
    if (stale is None) != (theta0 is None):
        raise ValueError("stale and theta0 describe the round's start: pass both or neither")
    now = flat_params(server)
    if stale is None or theta0 is None:
        return now
    shape = (int(H[0].shape[0]), sum(int(h.shape[1]) for h in H))
    if tuple(stale.shape) != shape or theta0.numel() != now.numel():
        raise ValueError(
            f"stale must be the (B, ΣP_m) = {shape} round-start embeddings and theta0 the "
            f"{now.numel()} round-start server parameters, got {tuple(stale.shape)} and "
            f"{theta0.numel()} entries"
        )
    return theta0.detach().reshape(-1)


def realised_lemma1_bound(
    parties: Sequence[nn.Module],
    server: nn.Module,
    inputs: Sequence[torch.Tensor],
    y: torch.Tensor,
    errors: Sequence[Any],
    server_error: Any = None,
    *,
    jacobians: Sequence[EmbeddingJacobian] | None = None,
    stale: torch.Tensor | None = None,
    theta0: torch.Tensor | None = None,
) -> TightLemma1:
    r"""Deterministic bound from realised errors, for biased compressors such as top-k (C4.5).

    With realised errors :math:`\varepsilon_{j,i}` (not zero-mean, not independent) no cross
    term vanishes and there is no :math:`1/B` gain. The bound is

    .. math:: \|\nabla_m F_B(\Phi_m) - \nabla_m F_B(\hat\Phi_m)\|^2 \le \Bigl(\Bigl\|
              \frac1B\sum_i J_{m,i}^\top\sum_{j\ne m} A_{mj,i}\varepsilon_{j,i}\Bigr\| +
              \frac1B\sum_i \|J_{m,i}\| \sum_{\alpha\beta}\kappa_{\alpha\beta,i}
              \|\varepsilon_0\|^\alpha\|\varepsilon_{-m,i}\|^\beta\Bigr)^2

    (first-order part exact, remainder bounded as in :func:`tight_lemma1_bound`; linear head).
    For a deterministic compressor the left side has no randomness, so this bounds Lemma 1's
    left side itself.

    Parameters
    ----------
    parties, server, inputs, y
        As in :func:`tight_lemma1_bound`.
    errors : sequence of tensor
        Realised :math:`\varepsilon_j = C_j(h_j) - h_j`, ``(B, P_j)`` per party.
    server_error : tensor, optional
        Realised :math:`C_0(\theta_0) - \theta_0`, flattened in ``server.parameters()`` order.
    jacobians, stale, theta0
        As in :func:`tight_lemma1_bound_for`. The errors are the round's, realised at its start;
        at a later local step (``stale``, ``theta0``) each block is evaluated at its own point,
        and since nothing here is random the value still bounds that step's left side.

    Returns
    -------
    TightLemma1
        ``method="realised"``; ``first_order`` is the squared norm of the realised linear part.
    """
    M, B = check_lemma1_models(parties, server, inputs, y)
    head = linear_softmax_head(server)
    if head is None:
        raise ValueError(
            "realised_lemma1_bound needs a linear server head (an nn.Linear with bias, or the "
            f"toolkit's LinearHead, without hooks); got {type(server).__name__}"
        )
    with torch.no_grad():
        H = [p(x) for p, x in zip(parties, inputs)]
    start = _check_round_start(H, server, stale, theta0)
    sizes, n0 = [int(h.shape[1]) for h in H], int(start.numel())
    if not isinstance(errors, Sequence) or len(errors) != M:
        raise ValueError(f"errors must hold one (B, P_j) error matrix per party (M = {M})")
    eps = []
    for k, e in enumerate(errors):
        a = np.asarray(e.detach().cpu() if isinstance(e, torch.Tensor) else e, dtype=np.float64)
        if a.shape != (B, sizes[k]) or not np.all(np.isfinite(a)):
            raise ValueError(f"errors[{k}] must be finite with shape (B, P) = {(B, sizes[k])}")
        eps.append(a)
    if server_error is None:
        e0 = np.zeros(n0)
    else:
        e0 = np.asarray(
            server_error.detach().cpu() if isinstance(server_error, torch.Tensor) else server_error,
            dtype=np.float64,
        ).reshape(-1)
        if e0.size != n0 or not np.all(np.isfinite(e0)):
            raise ValueError(f"server_error must be finite with |theta_0| = {n0} entries")
    d = _derivatives(
        parties,
        server,
        inputs,
        y,
        jacobians=jacobians,
        embeddings=H,
        round_start=None if stale is None else (stale, start),
    )
    blk = _blocks(d.sizes)
    J = d.J
    E = e0[: head.weight.numel()].reshape(head.weight.shape)  # weight (row-major), then bias
    e = e0[head.weight.numel() :]
    first = np.zeros(M + 1)
    rem = np.zeros(M + 1)
    at = d.at[0]
    lin0 = sum(np.einsum("bnp,bp->n", at.A0[:, :, blk[j]], eps[j]) for j in range(M)) / B
    first[0] = float(np.sum(np.asarray(lin0) ** 2))
    one = np.ones(B)
    assert at.W is not None and at.bias is not None
    soft = {id(at): _softmax_at(at.W, at.bias, at.z)}
    rem[0] = _squared(
        _realised_remainder(0, at.W, d.sizes, at.z, eps, E, e, one, one, soft[id(at)])
    )
    for m in range(1, M + 1):
        at = d.at[m]
        assert at.W is not None and at.bias is not None
        if id(at) not in soft:
            soft[id(at)] = _softmax_at(at.W, at.bias, at.z)
        others = [j for j in range(M) if j != m - 1]
        Jm = J[m - 1]
        g = sum(np.einsum("bpq,bq->bp", at.Hzz[:, blk[m - 1], blk[j]], eps[j]) for j in others)
        g = g + np.einsum("bnp,n->bp", at.A0[:, :, blk[m - 1]], e0)
        lin = Jm.rmatmat(g[None])[0] / B
        first[m] = float(np.sum(lin**2))
        K = Jm.sample_grams()  # (B, P_m, P_m): J_i J_i^T
        G = np.sqrt(np.linalg.eigvalsh(K)[:, -1].clip(min=0.0))
        GW = _op_norm_wj(at.W[:, blk[m - 1]], K)
        rem[m] = _squared(
            _realised_remainder(m, at.W, d.sizes, at.z, eps, E, e, G, GW, soft[id(at)])
        )
    bound = _minkowski(first, rem)
    nan = np.full(M + 1, np.nan)
    return TightLemma1(first, rem, bound, nan, B, "realised", ("realised",) * (M + 1), True)
