r"""Convergence-bound calculators of C-VFL (C4) and the C5 parameter choices.

All constants of Theorems 4.2 and 4.4 are explicit keyword arguments. Their defaults are the
values **as recovered** in C4 (the paper's full text was not available; the *form* of each
term is reliable, the *constants* are not), so treat every total as "the recovered bound".

Notation (C0-C4): ``M`` parties plus the server (index 0), so per-party arrays have
length ``M + 1``; ``Q`` local steps per round; ``R = T/Q`` rounds; ``E`` is the ``(R, M + 1)``
array of compression errors :math:`E_m^{t_0} = \mathbb{E}\|\varepsilon_m^{t_0}\|_F^2` (C2).

Examples
--------
>>> r = theorem_4_2(F_gap=1.0, eta=0.01, T=100, Q=1, L=1.0, sigma2=[1.0, 1.0], B=10,
...                 H=[1.0, 1.0], G=[1.0, 1.0], E=[0.0, 0.0])
>>> r.optimization, round(r.variance, 6), r.compression
(4.0, 0.012, 0.0)
>>> max_step_size(Q=2, L=1.0, L_m=[4.0, 2.0])
0.0078125
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._validate import check_int_in_range, check_real
from .lattice import SQRT3, A2BoxCodebook

__all__ = [
    "BoundTerms",
    "theorem_4_2",
    "theorem_4_4",
    "max_step_size",
    "compression_term",
    "compression_weights",
    "C5Parameters",
    "c5_parameters",
    "scalar_round_error",
    "hex_round_error",
    "step_sizes",
    "BitsSchedule",
    "bits_schedule",
]

# Constants of C4.2 as recovered (C4): 4 [F(0) - F(T)]/(eta T), 6 eta Q L sum sigma^2/B,
# (92 Q^2/R) sum sum H^2 G^2 sum_{j != m} E_j.
C_OPT = 4.0
C_VAR = 6.0
C_COMP = 92.0
STEP_FACTOR = 16.0


def _vector(value: Any, name: str, length: int | None = None) -> np.ndarray:
    v = np.atleast_1d(np.asarray(value, dtype=np.float64))
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence (one per party m = 0..M)")
    if length is not None and v.size != length:
        raise ValueError(f"{name} must have M + 1 = {length} entries, got {v.size}")
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise ValueError(f"{name} must be finite and >= 0, got {v.tolist()}")
    return v


def _steps(etas: Any) -> np.ndarray:
    r"""Per-round steps :math:`\eta^{t_0}`: a non-empty 1-D sequence, each finite and ``> 0``."""
    eta = _vector(etas, "etas")
    if np.any(eta <= 0):
        raise ValueError("etas must be > 0")
    return eta


def _per_round(value: Any, name: str, R: int, parties: int) -> np.ndarray:
    """``(R, M + 1)`` finite non-negative per-round, per-block values (``(M + 1,)``: every round)."""
    v = np.asarray(value, dtype=np.float64)
    if v.ndim == 1:
        v = np.broadcast_to(v, (R, v.size))
    if v.ndim != 2 or v.shape != (R, parties):
        raise ValueError(
            f"{name} must have shape (R, M + 1) = ({R}, {parties}) or (M + 1,), "
            f"got {np.shape(value)}"
        )
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise ValueError(f"{name} must be finite and >= 0")
    return v


def max_step_size(Q: int, L: float, L_m: float | Sequence[float] | None = None) -> float:
    r"""Largest step allowed by Theorem 4.2 (C4.2, as recovered): :math:`1/(16 Q \max(L, \max_m L_m))`.

    Parameters
    ----------
    Q : int
        Local steps per round, ``>= 1``.
    L : float
        Smoothness constant of :math:`F`.
    L_m : float or sequence of float, optional
        Block smoothness constants :math:`L_m`.

    Returns
    -------
    float
    """
    Q = check_int_in_range(Q, "Q", 1, 2**62)
    Lmax = check_real(L, "L", 0.0, low_open=True)
    if L_m is not None:
        Lmax = max(Lmax, float(np.max(_vector(L_m, "L_m"))))
    return 1.0 / (STEP_FACTOR * Q * Lmax)


def compression_term(E: np.ndarray, H: np.ndarray, G: np.ndarray) -> np.ndarray:
    r"""Per round :math:`A^{t_0} = \sum_m H_m^2 G_m^2 \sum_{j \ne m} E_j^{t_0}` (C4.1, C4.2).

    Parameters
    ----------
    E : numpy.ndarray
        ``(R, M + 1)`` compression errors.
    H, G : numpy.ndarray
        ``(M + 1,)`` Hessian and embedding-gradient bounds (C3.4, C3.5).

    Returns
    -------
    numpy.ndarray
        ``(R,)``.
    """
    w = H**2 * G**2
    total = E.sum(axis=1, keepdims=True)
    return np.sum(w * (total - E), axis=1)


def compression_weights(Q: int, etas: Any, fixed_step: bool, c_comp: float = C_COMP) -> np.ndarray:
    r"""The weights :math:`a_{t_0}` of term 3 on the per-round :math:`A^{t_0}`, ``(R,)``.

    Term 3 of :func:`theorem_4_2` is :math:`\frac{c_3 Q^2}{R} \sum_{t_0} A^{t_0}` and of
    :func:`theorem_4_4` :math:`c_3 Q^3 \sum_{t_0} \eta^{t_0} A^{t_0} / (Q \sum_{t_0}
    \eta^{t_0})`: both are :math:`\sum_{t_0} a_{t_0} A^{t_0}`, with :math:`a_{t_0} = c_3
    Q^2 / R` and :math:`a_{t_0} = c_3 Q^2 \eta^{t_0} / \sum_t \eta^t`. The standard error of a
    term 3 that sums realised values is taken with them (``cvfl_sim.bounds.theorems``).

    Parameters
    ----------
    Q : int
        Local steps per round.
    etas : sequence of float
        The ``R`` rounds' steps.
    fixed_step : bool
        Theorem 4.2 (``True``) or 4.4.
    c_comp : float
        :math:`c_3` (92 as recovered).

    Examples
    --------
    >>> A = np.array([1.0, 2.0, 4.0])
    >>> w = compression_weights(2, [0.1, 0.05, 0.02], fixed_step=False)
    >>> t = theorem_4_4(F_gap=1.0, etas=[0.1, 0.05, 0.02], Q=2, L=1.0, sigma2=[0.0], B=1,
    ...                 lemma1=A[:, None])
    >>> bool(np.isclose(w @ A, t.compression, rtol=1e-14))
    True
    """
    Q = check_int_in_range(Q, "Q", 1, 2**62)
    eta = _steps(etas)
    if fixed_step:
        return np.full(eta.size, c_comp * Q**2 / eta.size)
    return c_comp * Q**2 * eta / float(np.sum(eta))


def _shared_terms(
    F_gap: float,
    L: float,
    sigma2: Any,
    H: Any,
    G: Any,
    E: Any,
    R: int,
    lemma1: Any = None,
) -> tuple[float, float, np.ndarray, np.ndarray, str]:
    r"""Validate the arguments theorems 4.2 and 4.4 share (in this order).

    Returns ``F_gap``, ``L``, :math:`\sigma^2` (``(M + 1,)``), the per-round compression
    terms ``A`` (``(R,)``) and the form used: ``"recovered"`` (:func:`compression_term`, from
    ``H``, ``G``, ``E``) or ``"supplied"`` (:math:`A^{t_0} = \sum_m` ``lemma1[t0, m]``). Exactly one
    of the two forms must be given.
    """
    F_gap = check_real(F_gap, "F_gap", 0.0)
    Lf = check_real(L, "L", 0.0, low_open=True)
    s2 = _vector(sigma2, "sigma2")
    parties = s2.size
    given = [name for name, v in (("H", H), ("G", G), ("E", E)) if v is not None]
    if lemma1 is not None:
        if given:
            raise ValueError(
                f"give either lemma1 or (H, G, E), not both; got lemma1 and {', '.join(given)}"
            )
        A = np.sum(_per_round(lemma1, "lemma1", R, parties), axis=1)
        return F_gap, Lf, s2, A, "supplied"
    if len(given) != 3:
        missing = sorted({"H", "G", "E"} - set(given))
        raise ValueError(f"give either lemma1 or all of H, G and E; missing {', '.join(missing)}")
    Hv, Gv = _vector(H, "H", parties), _vector(G, "G", parties)
    A = compression_term(_per_round(E, "E", R, parties), Hv, Gv)
    return F_gap, Lf, s2, A, "recovered"


@dataclass(frozen=True)
class BoundTerms:
    r"""The three terms of a C4 bound and their sum.

    Attributes
    ----------
    optimization : float
        Term 1 (initial gap over the step budget).
    variance : float
        Term 2 (mini-batch variance).
    compression : float
        Term 3 (compression error).
    step_ok : bool or None
        Whether the step satisfies the theorem's condition (``None`` if not checkable).
    theorem : str
        ``"4.2"`` or ``"4.4"``.
    constants : dict
        The constants used (defaults are "as recovered").
    compression_form : str
        Which upper bound on :math:`\mathbb{E}\|\nabla_m F_B(\Phi_m) -
        \nabla_m F_B(\hat\Phi_m)\|^2` term 3 uses: ``"recovered"`` -- Lemma 1's right side
        :math:`H_m^2 G_m^2 \sum_{j\ne m} E_j^{t_0}` (C4.1, as recovered); ``"supplied"`` -- the
        per-round, per-block bounds passed as ``lemma1`` (e.g. the tight bound of C4.5, ours,
        :func:`cvfl_sim.bounds.tight_term.tight_lemma1_bound`, or a measured left side).
    """

    optimization: float
    variance: float
    compression: float
    step_ok: bool | None
    theorem: str
    constants: dict[str, float] = field(default_factory=dict)
    compression_form: str = "recovered"

    @property
    def total(self) -> float:
        """Sum of the three terms."""
        return self.optimization + self.variance + self.compression

    def __str__(self) -> str:
        cond = {True: "satisfied", False: "VIOLATED", None: "not checked"}[self.step_ok]
        return (
            f"Theorem {self.theorem} bound (constants as recovered: {self.constants})\n"
            f"  optimization {self.optimization:.6g}\n  variance     {self.variance:.6g}\n"
            f"  compression  {self.compression:.6g} ({self.compression_form} form)\n"
            f"  total        {self.total:.6g}\n"
            f"  step-size condition {cond}"
        )


def theorem_4_2(
    *,
    F_gap: float,
    eta: float,
    T: int,
    Q: int,
    L: float,
    sigma2: Sequence[float],
    B: int,
    H: Sequence[float] | None = None,
    G: Sequence[float] | None = None,
    E: Any = None,
    L_m: Sequence[float] | None = None,
    c_opt: float = C_OPT,
    c_var: float = C_VAR,
    c_comp: float = C_COMP,
    lemma1: Any = None,
) -> BoundTerms:
    r"""Theorem 4.2 (fixed step), C4.2 **as recovered** -- every constant is a parameter.

    .. math::
        \frac1R\sum_{t_0}\mathbb{E}\|\nabla F(\Theta^{t_0})\|^2 \le
        \frac{c_1 [F(\Theta^0) - \mathbb{E}F(\Theta^T)]}{\eta T}
        + c_2\, \eta Q L \sum_{m=0}^M \frac{\sigma_m^2}{B}
        + \frac{c_3 Q^2}{R} \sum_{t_0}\sum_{m=0}^M H_m^2 G_m^2 \sum_{j\ne m} E_j^{t_0}

    with :math:`(c_1, c_2, c_3) = (4, 6, 92)` as recovered, valid for
    :math:`\eta \le 1/(16 Q \max\{L, \max_m L_m\})`.

    Parameters
    ----------
    F_gap : float
        :math:`F(\Theta^0) - \mathbb{E} F(\Theta^T)` (``>= 0``).
    eta : float
        Step size.
    T : int
        Total local iterations; must be a multiple of ``Q`` (``R = T/Q`` rounds).
    Q : int
        Local steps per round.
    L : float
        Smoothness constant (C3.1).
    sigma2 : sequence of float
        :math:`\sigma_m^2`, ``m = 0..M`` (C3.3).
    B : int
        Mini-batch size.
    H, G : sequence of float, optional
        :math:`H_m`, :math:`G_m` (C3.4, C3.5), length ``M + 1``. Required unless ``lemma1``.
    E : array_like, optional
        ``(R, M + 1)`` errors :math:`E_m^{t_0}`, or ``(M + 1,)`` for the same error every round.
        Required unless ``lemma1``.
    L_m : sequence of float, optional
        Block smoothness constants, for the step condition.
    c_opt, c_var, c_comp : float
        The constants :math:`c_1, c_2, c_3`.
    lemma1 : array_like, optional
        ``(R, M + 1)`` (or ``(M + 1,)``, the same every round) upper bounds
        :math:`U_m^{t_0} \ge \mathbb{E}\|\nabla_m F_B(\Phi_m^{t}) -
        \nabla_m F_B(\hat\Phi_m^{t})\|^2`. When given, term 3 is
        :math:`(c_3 Q^2/R) \sum_{t_0} \sum_m U_m^{t_0}` in place of Lemma 1's right side
        (the alternative form of C4.5, ours, not the paper's: the theorem uses Lemma 1 only as an
        upper bound on that expectation, so any valid upper bound may replace it). Give either
        ``lemma1`` or all of ``H``, ``G``, ``E``, not both.

    Returns
    -------
    BoundTerms
        ``compression_form`` is ``"recovered"`` (H, G, E) or ``"supplied"`` (``lemma1``).

    Examples
    --------
    >>> r = theorem_4_2(F_gap=1.0, eta=0.01, T=4, Q=2, L=1.0, sigma2=[1.0, 1.0], B=10,
    ...                 lemma1=[[0.5, 0.25], [0.0, 0.25]])
    >>> r.compression, r.compression_form  # 92 * 2**2 / 2 * (0.75 + 0.25)
    (184.0, 'supplied')
    """
    Q = check_int_in_range(Q, "Q", 1, 2**62)
    T = check_int_in_range(T, "T", 1, 2**62)
    if T % Q:
        raise ValueError(f"T must be a multiple of Q (R = T/Q rounds); got T={T}, Q={Q}")
    R = T // Q
    B = check_int_in_range(B, "B", 1, 2**62)
    eta = check_real(eta, "eta", 0.0, low_open=True)
    F_gap, Lf, s2, A, form = _shared_terms(F_gap, L, sigma2, H, G, E, R, lemma1)
    step_ok = eta <= max_step_size(Q, Lf, L_m) * (1 + 1e-12)
    return BoundTerms(
        optimization=c_opt * F_gap / (eta * T),
        variance=c_var * eta * Q * Lf * float(np.sum(s2)) / B,
        compression=c_comp * Q**2 / R * float(np.sum(A)),
        step_ok=bool(step_ok),
        theorem="4.2",
        constants={"c_opt": c_opt, "c_var": c_var, "c_comp": c_comp},
        compression_form=form,
    )


def theorem_4_4(
    *,
    F_gap: float,
    etas: Sequence[float] | np.ndarray,
    Q: int,
    L: float,
    sigma2: Sequence[float],
    B: int,
    H: Sequence[float] | None = None,
    G: Sequence[float] | None = None,
    E: Any = None,
    L_m: Sequence[float] | None = None,
    c_opt: float = C_OPT,
    c_var: float = C_VAR,
    c_comp: float = C_COMP,
    lemma1: Any = None,
) -> BoundTerms:
    r"""Theorem 4.4 (diminishing step), C4.4 **as recovered**: a bound on :math:`\min_t \mathbb{E}\|\nabla F\|^2`.

    C4.4 fixes only the structure (term 1 over :math:`\sum_t \eta^{t_0}`, term 2 weighted
    by :math:`\sum (\eta^{t_0})^2`, term 3 by :math:`\sum \eta^{t_0} \sum_m E_m^{t_0}`). This
    calculator uses the form that reduces **exactly** to :func:`theorem_4_2` for a constant step
    (multiply C4.2 by :math:`\eta T` and let :math:`\eta` vary per round):

    .. math::
        \min_t \mathbb{E}\|\nabla F\|^2 \le \frac{c_1 [F(\Theta^0) - F^\star]
        + c_2 Q L \sum_m \frac{\sigma_m^2}{B} \sum_t (\eta^{t_0})^2
        + c_3 Q^3 \sum_{t_0} \eta^{t_0} A^{t_0}}{\sum_t \eta^{t_0}},
        \qquad A^{t_0} = \sum_m H_m^2 G_m^2 \sum_{j\ne m} E_j^{t_0},

    where :math:`\sum_t` runs over all :math:`T = RQ` iterations (each round's step repeated
    ``Q`` times). The paper's own constants may differ.

    Parameters
    ----------
    F_gap : float
        :math:`F(\Theta^0) - F^\star`.
    etas : sequence of float or numpy.ndarray
        Step :math:`\eta^{t_0}` of each of the ``R`` rounds.
    Q, L, sigma2, B, H, G, E, L_m, c_opt, c_var, c_comp
        As in :func:`theorem_4_2`; ``E`` has shape ``(R, M + 1)`` or ``(M + 1,)``.
    lemma1 : array_like, optional
        As in :func:`theorem_4_2`: per-round, per-block upper bounds :math:`U_m^{t_0}` on the
        Lemma-1 left side; term 3 becomes :math:`c_3 Q^3 \sum_{t_0} \eta^{t_0} \sum_m
        U_m^{t_0} / \sum_t \eta^{t_0}` (alternative form, C4.5, ours). Give either ``lemma1`` or
        all of ``H``, ``G``, ``E``.

    Returns
    -------
    BoundTerms
        ``step_ok`` says whether every step satisfies the C4.2 condition; ``compression_form``
        which term-3 form was used.
    """
    Q = check_int_in_range(Q, "Q", 1, 2**62)
    eta = _steps(etas)
    R = eta.size
    B = check_int_in_range(B, "B", 1, 2**62)
    F_gap, Lf, s2, A, form = _shared_terms(F_gap, L, sigma2, H, G, E, R, lemma1)
    denom = Q * float(np.sum(eta))
    step_ok = bool(np.all(eta <= max_step_size(Q, Lf, L_m) * (1 + 1e-12)))
    return BoundTerms(
        optimization=c_opt * F_gap / denom,
        variance=c_var * Q * Lf * float(np.sum(s2)) / B * Q * float(np.sum(eta**2)) / denom,
        compression=c_comp * Q**3 * float(np.sum(eta * A)) / denom,
        step_ok=step_ok,
        theorem="4.4",
        constants={"c_opt": c_opt, "c_var": c_var, "c_comp": c_comp},
        compression_form=form,
    )


# ---- C5 parameter choices --------------------------------------------------------------------
def scalar_round_error(bits: int, B: int, P: int, span: float) -> float:
    r"""Exact dithered scalar error per round, :math:`B P s^2 / (12 (2^q - 1)^2)` (C5.1)."""
    bits = check_int_in_range(bits, "bits", 1, 16)
    B, P = check_int_in_range(B, "B", 1, 2**62), check_int_in_range(P, "P", 1, 2**62)
    span = check_real(span, "span", 0.0, low_open=True)
    return B * P * span**2 / (12.0 * ((1 << bits) - 1) ** 2)


def hex_round_error(bits: int, B: int, P: int, span: float) -> float:
    r"""Exact dithered hexagonal error per round, :math:`B P \cdot 5 V / (36\sqrt3)` (C5.2, C5.3).

    :math:`V` is the cell area of :class:`~cvfl_theory.compressors.HexLatticeQuantizer` at
    ``bits`` for a range of width ``span``.
    """
    bits = check_int_in_range(bits, "bits", 2, 8)
    B, P = check_int_in_range(B, "B", 1, 2**62), check_int_in_range(P, "P", 1, 2**62)
    span = check_real(span, "span", 0.0, low_open=True)
    V = A2BoxCodebook.for_bits(bits).cell_area * span**2
    return B * P * 5.0 * V / (36.0 * SQRT3)


@dataclass(frozen=True)
class C5Parameters:
    r"""The C5-table parameter choices for :math:`O(1/\sqrt T)` (with constant ``c``).

    Attributes
    ----------
    q : int
        Scalar bits :math:`\lceil \log_2(c B P s^2 \sqrt T) \rceil` (at least 1), the table's
        formula taken literally: it makes the per-round error :math:`O(1/T)`, more than the
        :math:`O(1/\sqrt T)` the corollary needs (the :math:`\Omega` hides a factor 1/2).
    q_min : int
        Fewest bits whose **exact** per-round error :math:`B P s^2 / (12 (2^q - 1)^2)` is at
        most :math:`c/\sqrt T`: :math:`\lceil \log_2(1 + \sqrt{B P s^2 \sqrt T / (12 c)})
        \rceil` -- the same per-round target as the ``V`` and ``k`` rows.
    V : float
        Cell area :math:`c / (B P \sqrt T)`.
    k : int
        Top-k :math:`\lceil P - P/(c B (\|h\|^2)_{\max} \sqrt T) \rceil`, clipped to ``[1, P]``.
    scalar_published, scalar_exact : float
        Per-round scalar error at ``q``: published :math:`B P s^2 2^{-2q}/12` and exact.
    hex_published, hex_exact : float
        Per-round lattice error at ``V``: published :math:`VBP/24` and exact
        :math:`5VBP/(36\sqrt3)`.
    topk_published : float
        :math:`B (1 - k/P) (\|h\|^2)_{\max}`.
    """

    q: int
    q_min: int
    V: float
    k: int
    scalar_published: float
    scalar_exact: float
    hex_published: float
    hex_exact: float
    topk_published: float


def c5_parameters(
    T: int, B: int, P: int, *, span: float = 1.0, h_norm2_max: float = 1.0, c: float = 1.0
) -> C5Parameters:
    r"""Parameter choices of the C5 table for given ``T``, ``B``, ``P`` (big-O constant ``c``).

    Parameters
    ----------
    T : int
        Total iterations.
    B : int
        Mini-batch size.
    P : int
        Embedding width :math:`P_m`.
    span : float
        :math:`h_{\max} - h_{\min}` of the scalar quantizer's range.
    h_norm2_max : float
        :math:`(\|h\|^2)_{\max}`, the largest squared embedding-row norm.
    c : float
        The constant hidden in :math:`\Omega(\cdot)` / :math:`O(\cdot)` (default 1).

    Returns
    -------
    C5Parameters

    Examples
    --------
    >>> p = c5_parameters(T=10_000, B=10, P=16)
    >>> p.q, p.k
    (14, 16)
    """
    T = check_int_in_range(T, "T", 1, 2**62)
    B = check_int_in_range(B, "B", 1, 2**62)
    P = check_int_in_range(P, "P", 1, 2**62)
    span = check_real(span, "span", 0.0, low_open=True)
    h2 = check_real(h_norm2_max, "h_norm2_max", 0.0, low_open=True)
    c = check_real(c, "c", 0.0, low_open=True)
    rt = math.sqrt(T)
    q = max(1, math.ceil(math.log2(c * B * P * span**2 * rt)))
    q_min = max(1, math.ceil(math.log2(1.0 + math.sqrt(B * P * span**2 * rt / (12.0 * c)))))
    while q_min > 1 and B * P * span**2 / (12.0 * (2.0 ** (q_min - 1) - 1) ** 2) <= c / rt:
        q_min -= 1  # guard against round-off in the logarithm
    V = c / (B * P * rt)
    k = min(P, max(1, math.ceil(P - P / (c * B * h2 * rt))))
    return C5Parameters(
        q=q,
        q_min=q_min,
        V=V,
        k=k,
        scalar_published=B * P * span**2 * 2.0 ** (-2 * q) / 12.0,
        scalar_exact=B * P * span**2 / (12.0 * (2.0**q - 1) ** 2),
        hex_published=V * B * P / 24.0,
        hex_exact=5.0 * V * B * P / (36.0 * SQRT3),
        topk_published=B * (1.0 - k / P) * h2,
    )


# ---- schedules ----------------------------------------------------------------------------------
def step_sizes(R: int, eta0: float, power: float = 0.0) -> np.ndarray:
    r"""Per-round steps :math:`\eta^{t_0} = \eta_0 / (t_0 + 1)^{p}` for ``t0 = 0..R-1``.

    ``power = 0`` is a constant step; ``1/2 < power <= 1`` satisfies :math:`\sum\eta = \infty`,
    :math:`\sum \eta^2 < \infty` (C4.4).
    """
    R = check_int_in_range(R, "R", 1, 2**40)
    eta0 = check_real(eta0, "eta0", 0.0, low_open=True)
    power = check_real(power, "power", 0.0)
    return eta0 / np.arange(1, R + 1, dtype=np.float64) ** power


@dataclass(frozen=True)
class BitsSchedule:
    r"""A per-round bits schedule and the series :math:`\sum_{t_0} \eta^{t_0} E^{t_0}` (C4.4).

    Attributes
    ----------
    bits : numpy.ndarray
        Bits per component in each round.
    errors : numpy.ndarray
        Exact per-round error :math:`E^{t_0}` at those bits.
    products : numpy.ndarray
        :math:`\eta^{t_0} E^{t_0}`.
    partial_sums : numpy.ndarray
        Cumulative sums of ``products``.
    targets : numpy.ndarray
        The summable envelope :math:`\tau_{t_0} = c (t_0 + 1)^{-p}` each product is kept under.
    feasible : numpy.ndarray of bool
        Whether ``max_bits`` sufficed in that round (if not, ``max_bits`` is used and the round
        exceeds its target).
    envelope_sum : float
        :math:`c\,\zeta(p)`, the limit of :math:`\sum_{t_0} \tau_{t_0}`: when every round is
        feasible, ``partial_sums`` stays below it forever.
    """

    bits: np.ndarray
    errors: np.ndarray
    products: np.ndarray
    partial_sums: np.ndarray
    targets: np.ndarray
    feasible: np.ndarray
    envelope_sum: float

    @property
    def all_feasible(self) -> bool:
        """Every round met its target."""
        return bool(np.all(self.feasible))


def bits_schedule(
    etas: Sequence[float] | np.ndarray,
    *,
    compressor: str | Callable[[int], float] = "scalar",
    B: int = 1,
    P: int = 1,
    span: float = 1.0,
    c: float = 1.0,
    power: float = 2.0,
    min_bits: int | None = None,
    max_bits: int | None = None,
) -> BitsSchedule:
    r"""Fewest bits per round keeping :math:`\eta^{t_0} E^{t_0} \le c (t_0 + 1)^{-p}` (C4.4).

    With :math:`p > 1` the envelope is summable, so :math:`\sum_{t_0} \eta^{t_0} E^{t_0} \le c
    \zeta(p) < \infty` -- the condition of Theorem 4.4 -- whenever every round is feasible.

    Parameters
    ----------
    etas : sequence of float or numpy.ndarray
        Step of each round (e.g. from :func:`step_sizes`).
    compressor : {"scalar", "hex"} or callable
        ``"scalar"``: :func:`scalar_round_error` (bits 1..16); ``"hex"``: :func:`hex_round_error`
        (bits 2..8); or a function ``bits -> E`` (then give ``min_bits``/``max_bits``).
    B, P : int
        Batch size and embedding width (per round error is for one ``(B, P)`` embedding).
    span : float
        Quantizer range width.
    c : float
        Scale of the envelope.
    power : float
        Exponent :math:`p > 1` of the envelope.
    min_bits, max_bits : int, optional
        Search range (defaults: the compressor's full range).

    Returns
    -------
    BitsSchedule

    Examples
    --------
    >>> s = bits_schedule(step_sizes(4, 0.1, 0.5), B=8, P=16, c=1e-3)
    >>> s.bits.tolist(), bool(s.partial_sums[-1] <= s.envelope_sum)
    ([6, 6, 7, 7], True)
    """
    eta = _steps(etas)
    power = check_real(power, "power", 0.0, low_open=True)
    if power <= 1:
        raise ValueError(f"power must be > 1 for a summable envelope, got {power}")
    c = check_real(c, "c", 0.0, low_open=True)
    B = check_int_in_range(B, "B", 1, 2**62)
    P = check_int_in_range(P, "P", 1, 2**62)
    span = check_real(span, "span", 0.0, low_open=True)
    if compressor == "scalar":
        lo_b, hi_b = 1, 16
        err_fn: Callable[[int], float] = lambda b: scalar_round_error(b, B, P, span)  # noqa: E731
    elif compressor == "hex":
        lo_b, hi_b = 2, 8
        err_fn = lambda b: hex_round_error(b, B, P, span)  # noqa: E731
    elif callable(compressor):
        if min_bits is None or max_bits is None:
            raise ValueError("with a callable compressor give min_bits and max_bits")
        lo_b, hi_b = min_bits, max_bits
        err_fn = compressor
    else:
        raise ValueError(f"compressor must be 'scalar', 'hex' or a callable, got {compressor!r}")
    lo_b = lo_b if min_bits is None else check_int_in_range(min_bits, "min_bits", lo_b, hi_b)
    hi_b = hi_b if max_bits is None else check_int_in_range(max_bits, "max_bits", lo_b, hi_b)
    table = np.array([err_fn(b) for b in range(lo_b, hi_b + 1)], dtype=np.float64)
    R = eta.size
    targets = c / np.arange(1, R + 1, dtype=np.float64) ** power
    ok = eta[:, None] * table[None, :] <= targets[:, None]
    feasible = np.asarray(ok.any(axis=1), dtype=bool)
    first = np.where(feasible, ok.argmax(axis=1), table.size - 1)
    bits = lo_b + first
    errors = table[first]
    products = eta * errors
    from scipy.special import zeta

    return BitsSchedule(
        bits=bits.astype(np.int64),
        errors=errors,
        products=products,
        partial_sums=np.cumsum(products),
        targets=targets,
        feasible=feasible,
        envelope_sum=float(c * zeta(power)),
    )
