r"""Optimal sampling probabilities and centres for a bit budget (K6).

With the sparse or varying-length protocol (K3) the expected cost is affine in
:math:`\sum_{(i,j)\in S} p_{ij}`, so a bit budget :math:`C_{\max}` is a budget :math:`B` on the
expected number of entries sent:

.. math::
    B = \frac{C_{\max} - n\bar r}{\lceil\log_2 d\rceil + r} \ \text{(sparse)}, \qquad
    B = \frac{C_{\max} - n(\bar r + d)}{r} \ \text{(varying-length)}.

:func:`optimal_probabilities` then solves Problem (17) exactly by water-filling
(:func:`~cvfl_theory.waterfill.water_fill`, K6.2), per node for per-node budgets (K6.7), or with
cvxpy (K6.6) for combinations the exact path does not cover; with ``optimize_centres=True`` it
alternates water-filling with the centre step (K6.5) on Problem (15). :func:`mse_bounds` gives the
K6.4 bounds and :func:`low_budget_solution` the K6.3 closed form.

Convention for entries off :math:`S` (:math:`X_i(j) = \mu_i`): the optimum has :math:`p_{ij} = 0`
there, which is what :attr:`OptimalResult.p` holds. :class:`~cvfl_theory.encoders.IndependentEncoder`
needs :math:`p \in (0, 1]`, so :meth:`OptimalResult.encoder` uses :math:`p_{ij} = 1` off :math:`S`:
such an entry always yields :math:`Y_i(j) = \mu_i` exactly, contributes 0 to the MSE (K1.2), and
is never transmitted (K3 counts only :math:`Y_i(j) \ne \mu_i`), so the MSE and the expected bits
are those of the optimum.

References
----------
- [KR]_ J. Konečný, P. Richtárik. Randomized distributed mean estimation: accuracy vs
   communication. Frontiers in Applied Mathematics and Statistics, 2018.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from ._validate import (
    abs_deviations,
    as_float_array,
    check_bool,
    check_int_in_range,
    check_matrix,
    check_real,
    raise_mse_overflow,
)
from .bitpack import FLOAT_DTYPES
from .encoders import CENTRE_NAMES, CentreSpec, IndependentEncoder
from .protocols import index_bits
from .waterfill import Certificate, WaterFillResult, check_budget, water_fill

__all__ = [
    "PROTOCOLS",
    "MSEBounds",
    "LowBudgetSolution",
    "OptimalResult",
    "budget_from_bits",
    "bits_from_budget",
    "mse_bounds",
    "low_budget_solution",
    "centre_step",
    "optimal_probabilities",
]

#: Protocols whose cost is affine in :math:`\sum_S p` (K6).
PROTOCOLS = ("sparse", "varying-length")
_METHODS = ("exact", "cvxpy")


# ----------------------------------------------------------------------------- bits <-> budget
def check_protocol(protocol: str) -> str:
    """``protocol``, refused unless one of :data:`PROTOCOLS` (cost affine in the sum of ``p``)."""
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"protocol must be one of {PROTOCOLS} (the K3 protocols whose cost is affine in the "
            f"sum of p), got {protocol!r}"
        )
    return protocol


def _check_r(r: Any) -> int:
    """Bits per float of the wire (K3): an IEEE width the protocols can send, 16, 32 or 64."""
    if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer)):
        raise TypeError(f"r (bits per float) must be 16, 32 or 64, got {r!r}")
    if int(r) not in FLOAT_DTYPES:
        raise ValueError(
            f"r (bits per float) must be 16, 32 or 64, the float widths the protocols send, got {r!r}"
        )
    return int(r)


def _cost_terms(n: int, d: int, protocol: str, r: int, centre_sent: bool) -> tuple[float, float]:
    """(fixed bits, bits per expected sent entry) of K3."""
    n = check_int_in_range(n, "n", 1, 2**62)
    d = check_int_in_range(d, "d", 1, 2**62)
    r_bar = r if check_bool(centre_sent, "centre_sent") else 0
    if check_protocol(protocol) == "sparse":
        return float(n * r_bar), float(index_bits(d) + r)
    return float(n * (r_bar + d)), float(r)


def budget_from_bits(
    bits: float, n: int, d: int, protocol: str = "sparse", r: int = 32, centre_sent: bool = True
) -> float:
    r"""Entry budget :math:`B` for a bit budget :math:`C_{\max}` (K6).

    .. math::
        B = \frac{C_{\max} - n\bar r}{\lceil\log_2 d\rceil + r}\ \text{(sparse)},\qquad
        B = \frac{C_{\max} - n(\bar r + d)}{r}\ \text{(varying-length)},

    with :math:`\bar r = r` if the centres are sent, else 0.

    Parameters
    ----------
    bits : float
        :math:`C_{\max}`, the expected total bits allowed.
    n, d : int
        Number of nodes and dimension.
    protocol : {"sparse", "varying-length"}
        K3 protocol.
    r : int
        Bits per float.
    centre_sent : bool
        Whether :math:`\mu_i` is transmitted.

    Returns
    -------
    float
        :math:`B > 0`.

    Raises
    ------
    ValueError
        If ``bits`` does not exceed the fixed cost (:math:`B \le 0`); the message gives the
        fixed cost, which any feasible budget must exceed.

    Examples
    --------
    >>> budget_from_bits(1000.0, n=2, d=16, protocol="sparse", r=32)  # (1000 - 64) / (4 + 32)
    26.0
    """
    r = _check_r(r)
    if isinstance(bits, bool):
        raise TypeError(f"bits must be a number, got {bits!r}")
    c = float(bits)
    if not math.isfinite(c):
        raise ValueError(f"bits must be finite, got {c}")
    fixed, per = _cost_terms(n, d, protocol, r, centre_sent)
    if c <= fixed:
        what = "n*r_bar" if protocol == "sparse" else "n*(r_bar + d)"
        raise ValueError(
            f"bits = {c:g} is infeasible for the {protocol} protocol: the fixed cost {what} is "
            f"{fixed:g} bits (n={n}, d={d}, r={r}, r_bar={r if centre_sent else 0}); the minimum "
            f"feasible budget is any bits > {fixed:g} (each expected sent entry costs {per:g} bits)"
        )
    return (c - fixed) / per


def bits_from_budget(
    budget: float, n: int, d: int, protocol: str = "sparse", r: int = 32, centre_sent: bool = True
) -> float:
    r"""Expected bits :math:`C` of K3 when :math:`\sum_S p_{ij} = ` ``budget`` (inverse of K6).

    Parameters
    ----------
    budget : float
        Expected number of entries sent, :math:`\sum_{(i,j) \in S} p_{ij}`.
    n, d : int
        Number of nodes and dimension.
    protocol : {"sparse", "varying-length"}
        K3 protocol.
    r : int
        Bits per float.
    centre_sent : bool
        Whether :math:`\mu_i` is transmitted (:math:`\bar r = r`) or not (:math:`\bar r = 0`).

    Returns
    -------
    float
        :math:`n\bar r + (\lceil\log_2 d\rceil + r)B` (sparse) or :math:`n(\bar r + d) + rB`.

    Examples
    --------
    >>> bits_from_budget(26.0, n=2, d=16, protocol="sparse", r=32)
    1000.0
    """
    fixed, per = _cost_terms(n, d, protocol, _check_r(r), centre_sent)
    return fixed + per * check_real(budget, "budget", 0.0)


# ----------------------------------------------------------------------------- helpers
def _centres(Xn: np.ndarray, mu: CentreSpec) -> np.ndarray:
    """Centres as the encoder computes them (rounded to X's precision)."""
    return IndependentEncoder(1.0, mu)._centres(Xn)


def _deviations(Xn: np.ndarray, centres: np.ndarray) -> np.ndarray:
    r""":math:`a_{ij} = |X_i(j) - \mu_i|` in float64, exactly as K1.2 is evaluated.

    Data whose squared deviations overflow float64 are refused exactly as
    :meth:`~cvfl_theory.encoders.Encoder.mse` refuses them (the same validation function).
    """
    return abs_deviations(Xn, centres)


def budget_terms(
    X: Any, protocol: str = "sparse", r: int = 32, mu: CentreSpec = "mean"
) -> tuple[float, float, int]:
    r"""``(F, c, |S|)``: the bits of a budget :math:`B` of ``X`` are :math:`F + c B` (K3, K6).

    :math:`F` is the fixed cost (:math:`n\bar r` for ``"sparse"``, :math:`n(\bar r + d)` for
    ``"varying-length"``; :math:`\bar r = r` unless ``mu="zero"``), :math:`c` the bits per
    expected sent entry and :math:`|S|` the number of entries off their centre (the most a budget
    can spend), exactly as :func:`optimal_probabilities` counts them.

    Examples
    --------
    >>> import numpy as np
    >>> budget_terms(np.array([[1.0, 0.0, 3.0]]), "sparse", 32, "zero")
    (0.0, 34.0, 2)
    """
    Xn, _ = check_matrix(X)
    n, d = Xn.shape
    spec = IndependentEncoder(1.0, mu).mu
    centre_sent = not (isinstance(spec, str) and spec == "zero")
    fixed, per = _cost_terms(n, d, protocol, _check_r(r), centre_sent)
    support = int(np.count_nonzero(_deviations(Xn, _centres(Xn, spec)) > 0))
    return fixed, per, support


def _objective(a: np.ndarray, p: np.ndarray) -> float:
    on = a > 0
    return float(np.sum((1.0 / p[on] - 1.0) * a[on] ** 2))


# ----------------------------------------------------------------------------- K6.3 / K6.4
@dataclass(frozen=True)
class MSEBounds:
    r"""K6.4 bounds on :math:`\mathrm{MSE}^*(B)`, in the :math:`1/n^2` units of K1.2.

    Attributes
    ----------
    lower : float
        :math:`\max\{0, \frac{1}{n^2}[(\sum_S a)^2/B - \sum_S a^2]\}` (cap :math:`p \le 1` dropped,
        Cauchy–Schwarz); exact when ``low_budget``.
    upper : float
        :math:`\frac{1}{n^2}(|S|/B - 1)\sum_S a^2` (uniform :math:`p = B/|S|` on :math:`S`).
    budget : float
        :math:`B`.
    support_size : int
        :math:`|S|`.
    low_budget : bool
        Whether :math:`B \max a \le \sum a` (K6.3 applies, ``lower`` is the optimum).
    saturated : bool
        :math:`B \ge |S|`: both bounds are 0.
    """

    lower: float
    upper: float
    budget: float
    support_size: int
    low_budget: bool
    saturated: bool


def _bounds_from_a(a: np.ndarray, budget: float, n: int) -> MSEBounds:
    s = int(np.count_nonzero(a))
    if budget >= s:
        return MSEBounds(0.0, 0.0, budget, s, False, True)
    s1 = float(np.sum(a))
    s2 = float(np.sum(a * a))
    lower = max(0.0, (s1 * s1 / budget - s2) / n**2)
    upper = (s / budget - 1.0) * s2 / n**2
    if not (math.isfinite(lower) and math.isfinite(upper)):
        raise_mse_overflow()
    return MSEBounds(lower, upper, budget, s, budget * float(a.max()) <= s1, False)


def mse_bounds(X: Any, budget: float, mu: CentreSpec = "mean") -> MSEBounds:
    r"""Lower and upper bounds on the optimal MSE for entry budget :math:`B` (K6.4).

    .. math::
        \frac{1}{n^2}\Big[\frac{(\sum_S a)^2}{B} - \sum_S a^2\Big] \le \mathrm{MSE}^*(B)
        \le \frac{1}{n^2}\Big(\frac{|S|}{B} - 1\Big)\sum_S a^2, \qquad 0 < B < |S|.

    The lower bound is attained exactly when :math:`B \max a \le \sum a` (K6.3). The lower value
    returned is clipped at 0 (the formula can be negative when :math:`B` is close to :math:`|S|`).

    Parameters
    ----------
    X : array of shape (n, d)
        Data (numpy or torch).
    budget : float
        :math:`B > 0`, expected number of entries sent.
    mu : {"mean", "zero", "min"}, float or array of shape (n,)
        Centres.

    Returns
    -------
    MSEBounds

    Examples
    --------
    >>> b = mse_bounds(np.array([[3.0, 1.0, 0.0]]), budget=1.0, mu="zero")
    >>> b.lower, b.upper, b.low_budget  # (16 - 10), (2 - 1) * 10
    (6.0, 10.0, True)
    """
    Xn, _ = check_matrix(X)
    b = check_budget(budget)
    a = _deviations(Xn, _centres(Xn, mu))
    return _bounds_from_a(a, b, Xn.shape[0])


@dataclass(frozen=True, eq=False)
class LowBudgetSolution:
    r"""K6.3 closed form :math:`p_{ij} = B a_{ij}/\sum a`, valid iff ``applies``.

    Attributes
    ----------
    applies : bool
        :math:`B \max a \le \sum a` (and :math:`B < |S|`): no entry is capped, the formula is the
        optimum.
    p : numpy.ndarray
        The closed-form :math:`p` (shape ``(n, d)``; may exceed 1 when it does not apply).
    mse : float
        :math:`\frac{1}{n^2}[(\sum a)^2/B - \sum a^2]`.
    """

    applies: bool
    p: np.ndarray
    mse: float


def low_budget_solution(X: Any, budget: float, mu: CentreSpec = "mean") -> LowBudgetSolution:
    r"""The K6.3 closed form and whether it applies.

    If :math:`B \max a \le \sum a`, no probability reaches 1 and the optimum of Problem (17) is

    .. math::
        p_{ij} = \frac{B\, a_{ij}}{\sum a}, \qquad
        \mathrm{MSE}^* = \frac{1}{n^2}\Big[\frac{(\sum a)^2}{B} - \sum a^2\Big].

    Parameters
    ----------
    X : array of shape (n, d)
        Data (numpy or torch).
    budget : float
        :math:`B > 0`.
    mu : {"mean", "zero", "min"}, float or array of shape (n,)
        Centres.

    Returns
    -------
    LowBudgetSolution

    Examples
    --------
    >>> sol = low_budget_solution(np.array([[3.0, 1.0, 0.0]]), budget=1.0, mu="zero")
    >>> sol.applies, sol.p, sol.mse
    (True, array([[0.75, 0.25, 0.  ]]), 6.0)
    """
    Xn, _ = check_matrix(X)
    b = check_budget(budget)
    a = _deviations(Xn, _centres(Xn, mu))
    s1 = float(np.sum(a))
    s = int(np.count_nonzero(a))
    if s1 == 0:
        return LowBudgetSolution(False, np.zeros_like(a), 0.0)
    p = b * a / s1
    mse = (s1 * s1 / b - float(np.sum(a * a))) / Xn.shape[0] ** 2
    if not math.isfinite(mse):
        raise_mse_overflow()
    return LowBudgetSolution(bool(b * float(a.max()) <= s1 and b < s), p, mse)


# ----------------------------------------------------------------------------- K6.5
def centre_step(X: Any, p: Any, mu: Any) -> np.ndarray:
    r"""Optimal centres for fixed probabilities (K6.5), never increasing the objective.

    Minimises :math:`\sum_j w_{ij}(X_i(j) - \mu_i)^2`, :math:`w_{ij} = 1/p_{ij} - 1`, node by node:
    :math:`\mu_i = \sum_j w_{ij} X_i(j) / \sum_j w_{ij}`. Two cases keep the current centre:

    - all :math:`w_{ij} = 0` (every entry sent surely): any :math:`\mu_i` is optimal;
    - some :math:`p_{ij} = 0` (an entry with :math:`X_i(j) = \mu_i`, off :math:`S`): its weight is
      :math:`+\infty`, so the only finite objective is at the current :math:`\mu_i`. Moving it would
      put that entry into :math:`S` and make it cost bits the budget does not cover, and the
      formula of K6.5 applied with :math:`p = 1` there can *increase* the objective: for
      :math:`X = (0, 0, 3)`, :math:`\mu = 0`, :math:`B = 1/2` the optimum is 9, the weights
      :math:`(0, 0, 1)` move :math:`\mu` to 3, and the best :math:`p` for that centre gives 54.

    The new centre is rounded to ``X``'s precision (as the encoder does) and kept only if the
    rounded value does not increase node :math:`i`'s objective.

    Parameters
    ----------
    X : array of shape (n, d)
        Data.
    p : array of shape (n, d)
        Probabilities in ``[0, 1]``, 0 exactly off :math:`S`.
    mu : array of shape (n,)
        Current centres.

    Returns
    -------
    numpy.ndarray
        New centres ``(n,)``, float64.

    Examples
    --------
    >>> X = np.array([[0.0, 1.0, 5.0]])
    >>> centre_step(X, np.array([[0.5, 0.5, 1.0]]), np.array([2.0]))  # w = (1, 1, 0)
    array([0.5])
    """
    Xn, _ = check_matrix(X)
    P = as_float_array(p, "p", ndims=(2,))
    mu0 = as_float_array(mu, "mu", ndims=(1,))
    if P.shape != Xn.shape or mu0.shape != (Xn.shape[0],):
        raise ValueError(
            f"p must have shape {Xn.shape} and mu ({Xn.shape[0]},); got {P.shape} and {mu0.shape}"
        )
    if np.any(P < 0) or np.any(P > 1):
        raise ValueError(f"p must lie in [0, 1]; got {P[(P < 0) | (P > 1)][0]}")
    abs_deviations(Xn, mu0)  # the objective's squares must be finite
    return _centre_step(Xn, P, mu0)


def _centre_step(Xn: np.ndarray, P: np.ndarray, mu0: np.ndarray) -> np.ndarray:
    X64 = Xn.astype(np.float64)
    pinned = np.any(P <= 0, axis=1)
    with np.errstate(divide="ignore"):
        W = np.where(P > 0, 1.0 / np.where(P > 0, P, 1.0) - 1.0, 0.0)
    wsum = W.sum(axis=1)
    free = ~pinned & (wsum > 0)
    mu = mu0.copy()
    if free.any():
        cand = (W[free] * X64[free]).sum(axis=1) / wsum[free]
        cand = cand.astype(Xn.dtype).astype(np.float64)  # the precision the encoder sends
        old = np.sum(W[free] * (X64[free] - mu0[free, None]) ** 2, axis=1)
        new = np.sum(W[free] * (X64[free] - cand[:, None]) ** 2, axis=1)
        mu[free] = np.where(new <= old, cand, mu0[free])
    return mu


# ----------------------------------------------------------------------------- result
@dataclass(eq=False)
class OptimalResult:
    r"""Optimal probabilities (and centres) for a budget, from :func:`optimal_probabilities`.

    Attributes
    ----------
    p : numpy.ndarray or torch.Tensor
        ``(n, d)`` probabilities, 0 off :math:`S` (same kind as ``X``).
    mu : numpy.ndarray or torch.Tensor
        ``(n,)`` centres used (rounded to ``X``'s precision).
    mse : float
        K1.2 MSE :math:`\frac{1}{n^2}\sum_S (1/p - 1)a^2`.
    objective : float
        :math:`\sum_S (1/p - 1) a^2` (``mse`` times :math:`n^2`).
    budget : float or None
        Global entry budget :math:`B` (``None`` with per-node budgets only).
    per_node_budget : numpy.ndarray or None
        Per-node budgets :math:`B_i` (K6.7).
    expected_bits : float
        K3 expected total bits of :meth:`encoder` under ``protocol``.
    protocol : str
        ``"sparse"`` or ``"varying-length"``.
    r : int
        Bits per float.
    method : str
        ``"exact"`` or ``"cvxpy"``.
    threshold : float or numpy.ndarray
        Water level :math:`\lambda` (per node with per-node budgets; NaN for cvxpy).
    certificate : Certificate, tuple of Certificate, or None
        KKT certificate(s) of the exact path (``None`` for cvxpy: see ``solver_status``).
    saturated : bool
        The budget covers every entry of :math:`S` (MSE 0 without caps).
    low_budget : bool
        K6.3 regime (no entry capped; global budget, exact path).
    history : list of float
        Objective after each p-step (one entry without centre optimisation); non-increasing.
    iterations : int
        Alternating-minimisation iterations performed.
    converged : bool
        Whether the relative-decrease test stopped the iterations (True without centres).
    seconds : float
        Wall time of the solve.
    solver_status : str
        ``"water-filling"`` or the cvxpy status.
    lower_bound : float
        cvxpy only: a weak-duality lower bound on the optimal ``objective`` computed from the
        solver's multipliers, so ``objective - lower_bound`` bounds the suboptimality of ``p``
        (which is made exactly feasible by clipping and rescaling). NaN for the exact path, whose
        optimality is certified by ``certificate``.
    """

    p: Any
    mu: Any
    mse: float
    objective: float
    budget: float | None
    per_node_budget: np.ndarray | None
    expected_bits: float
    protocol: str
    r: int
    method: str
    threshold: Any
    certificate: Any
    saturated: bool
    low_budget: bool
    history: list[float] = field(default_factory=list)
    iterations: int = 0
    converged: bool = True
    seconds: float = 0.0
    solver_status: str = "water-filling"
    lower_bound: float = math.nan
    _mu_spec: Any = None
    _p_np: Any = None

    def encoder(self) -> IndependentEncoder:
        r"""A ready :class:`~cvfl_theory.encoders.IndependentEncoder` with these :math:`p, \mu`.

        Entries off :math:`S` get :math:`p = 1` (they are :math:`\mu_i`, never transmitted and
        error-free; see the module docstring).
        """
        p = self._p_np
        return IndependentEncoder(np.where(p > 0, p, 1.0), mu=self._mu_spec)

    def certified(self, tol: float = 1e-9) -> bool:
        """Whether every KKT certificate holds (False for cvxpy results, which have none)."""
        if self.certificate is None:
            return False
        certs = self.certificate if isinstance(self.certificate, tuple) else (self.certificate,)
        return all(c.holds(tol) for c in certs)

    def summary(self) -> str:
        """A few lines describing the solution (wrapped at :data:`~cvfl_theory.table.TEXT_WIDTH`)."""
        lines = [
            f"method {self.method} ({self.solver_status}), protocol {self.protocol}, r={self.r}",
            f"budget B = {self.budget if self.budget is not None else 'per node'}; expected bits "
            f"{self.expected_bits:.6g}",
            f"MSE {self.mse:.6g} (objective {self.objective:.6g}); saturated {self.saturated}; "
            f"low-budget (K6.3) {self.low_budget}",
            f"iterations {self.iterations}, converged {self.converged}, history "
            + ", ".join(f"{h:.6g}" for h in self.history[:8])
            + (" ..." if len(self.history) > 8 else ""),
            f"time {self.seconds:.3g} s",
        ]
        if self.method == "cvxpy":
            lines.append(
                f"weak-duality lower bound on the objective {self.lower_bound:.10g} "
                f"(objective - bound = {self.objective - self.lower_bound:.3g}); no KKT "
                "certificate (use method='exact' for one)"
            )
        if isinstance(self.certificate, Certificate):
            lines.append(f"certificate: {self.certificate}")
            lines.append(f"certificate holds: {self.certified()}")
        elif isinstance(self.certificate, tuple):
            worst = max(
                c.stationarity_residual / max(c.threshold, 1e-300) for c in self.certificate
            )
            lines.append(
                f"{len(self.certificate)} per-node certificates, worst relative stationarity "
                f"{worst:.3g}; all hold: {self.certified()}"
            )
        from . import table

        if table.TEXT_WIDTH is None:
            return "\n".join(lines)
        import textwrap

        return "\n".join(
            textwrap.fill(line, table.TEXT_WIDTH, subsequent_indent="  ") for line in lines
        )

    def __str__(self) -> str:
        return self.summary()

    def key_numbers(self) -> dict[str, Any]:
        r"""The solution's key scalars by name, for reprs and machine-readable output.

        ``shape`` of ``p``, ``method``, ``protocol``, ``r``, ``budget`` (:math:`B`, ``None`` with
        per-node budgets), ``expected_bits``, ``mse``, ``objective``, ``threshold``
        (:math:`\lambda`; a list with per-node budgets), ``saturated``, ``low_budget``,
        ``iterations``, ``converged``, ``certified`` and ``seconds``.
        """
        thr = self.threshold
        thr = [float(t) for t in np.ravel(thr)] if np.ndim(thr) else float(thr)
        return {
            "shape": [int(s) for s in np.shape(self._p_np)],
            "method": self.method,
            "protocol": self.protocol,
            "r": self.r,
            "budget": self.budget,
            "expected_bits": self.expected_bits,
            "mse": self.mse,
            "objective": self.objective,
            "threshold": thr,
            "saturated": self.saturated,
            "low_budget": self.low_budget,
            "iterations": self.iterations,
            "converged": self.converged,
            "certified": self.certified(),
            "seconds": self.seconds,
        }

    def __repr__(self) -> str:
        k = self.key_numbers()
        thr = k["threshold"]
        lam = f"per-node ({len(thr)},)" if isinstance(thr, list) else f"{thr:.6g}"
        budget = "per-node" if self.budget is None else f"{self.budget:.6g}"
        return (
            f"OptimalResult(p: {tuple(k['shape'])}, method={self.method!r}, "
            f"protocol={self.protocol!r}, budget={budget}, expected_bits={self.expected_bits:.6g}, "
            f"mse={self.mse:.6g}, threshold={lam}, certified={k['certified']})"
        )

    def _repr_html_(self) -> str:
        from .table import Table

        rows = [
            [name, str(v) if isinstance(v, (list, bool)) or v is None else v]
            for name, v in self.key_numbers().items()
        ]
        return Table(["quantity", "value"], rows, title="OptimalResult (K6)")._repr_html_()

    # ---------------------------------------------------------------- keeping results
    def _fields(self) -> dict[str, Any]:
        certs = self.certificate
        cert: Any = None
        if isinstance(certs, Certificate):
            cert = asdict(certs)
        elif isinstance(certs, tuple):
            cert = [asdict(c) for c in certs]
        return {
            "method": self.method,
            "protocol": self.protocol,
            "r": self.r,
            "budget": self.budget,
            "mse": self.mse,
            "objective": self.objective,
            "expected_bits": self.expected_bits,
            "saturated": self.saturated,
            "low_budget": self.low_budget,
            "history": [float(h) for h in self.history],
            "iterations": self.iterations,
            "converged": self.converged,
            "seconds": self.seconds,
            "solver_status": self.solver_status,
            "lower_bound": self.lower_bound,
            "certificate": cert,
            "mu_spec": self._mu_spec if isinstance(self._mu_spec, str) else None,
        }

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = {
            "p": np.asarray(self._p_np, dtype=np.float64),
            "mu": _numpy(self.mu).astype(np.float64),
            "threshold": np.asarray(self.threshold, dtype=np.float64),
        }
        if self.per_node_budget is not None:
            arrays["per_node_budget"] = np.asarray(self.per_node_budget, dtype=np.float64)
        if not isinstance(self._mu_spec, str) and self._mu_spec is not None:
            arrays["mu_spec"] = np.asarray(self._mu_spec, dtype=np.float64)
        return arrays

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-able values: the fields, and ``p``, ``mu`` as nested lists.

        Non-finite floats are kept as floats (``json.dumps`` needs ``allow_nan``; :meth:`save`
        writes standard JSON).
        """
        out = self._fields()
        out.update({k: v.tolist() for k, v in self._arrays().items()})
        out["certified"] = self.certified()
        return out

    def to_dataframe(self) -> Any:
        """One row per entry ``(i, j)``: ``node``, ``coordinate``, ``p``, and the node's ``mu``.

        Needs pandas (``cvfl[dataframe]``).
        """
        from ._export import dataframe

        p = np.asarray(self._p_np, dtype=np.float64)
        mu = _numpy(self.mu).astype(np.float64)
        n, d = p.shape
        nodes, coords = np.divmod(np.arange(n * d), d)
        rows = zip(nodes.tolist(), coords.tolist(), p.ravel().tolist(), mu[nodes].tolist())
        return dataframe(["node", "coordinate", "p", "mu"], list(rows))

    def save(self, path: Any) -> str:
        """Write the result (JSON with raw arrays, no pickle; ``.json`` appended if missing).

        :meth:`load` reads it back; ``p`` and ``mu`` come back as numpy arrays.
        """
        from .store import write_result

        return write_result(path, "OptimalResult", self._fields(), self._arrays())

    @classmethod
    def load(cls, path: Any) -> OptimalResult:
        """Read a result written by :meth:`save`, every field checked for type and meaning.

        Raises
        ------
        ValueError
            Not such a file, or a field out of range (``p`` outside ``[0, 1]`` or of another
            shape than ``mu`` allows, a protocol or ``r`` this module does not produce, a
            certificate with other fields); the message names the file.
        """
        from .store import checked_field, read_result

        fields, arrays = read_result(path, "OptimalResult")
        where = repr(str(path))
        f = {
            name: checked_field(fields, name, kind, where)
            for name, kind in (
                ("method", str),
                ("protocol", str),
                ("r", int),
                ("mse", (int, float)),
                ("objective", (int, float)),
                ("expected_bits", (int, float)),
                ("saturated", bool),
                ("low_budget", bool),
                ("history", list),
                ("iterations", int),
                ("converged", bool),
                ("seconds", (int, float)),
                ("solver_status", str),
                ("lower_bound", (int, float)),
            )
        }
        budget = fields.get("budget")
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, (int, float))
        ):
            raise ValueError(f"{where}: budget must be a number or null, got {budget!r}")
        if f["method"] not in ("exact", "cvxpy") or f["protocol"] not in PROTOCOLS:
            raise ValueError(f"{where}: method {f['method']!r} / protocol {f['protocol']!r}")
        if f["r"] not in FLOAT_DTYPES:
            raise ValueError(f"{where}: r must be one of {sorted(FLOAT_DTYPES)}, got {f['r']}")
        if f["iterations"] < 0 or not all(
            isinstance(h, (int, float)) and not isinstance(h, bool) for h in f["history"]
        ):
            raise ValueError(f"{where}: iterations must be >= 0 and history numbers")
        missing = {"p", "mu", "threshold"} - set(arrays)
        if missing:
            raise ValueError(f"{where}: missing arrays {sorted(missing)}")
        p, mu = arrays["p"], arrays["mu"]
        if p.dtype != np.float64 or p.ndim != 2 or mu.shape != (p.shape[0],):
            raise ValueError(
                f"{where}: p must be (n, d) float64 and mu (n,), got {p.shape}, {mu.shape}"
            )
        if not (np.isfinite(p).all() and p.min(initial=0.0) >= 0 and p.max(initial=0.0) <= 1):
            raise ValueError(f"{where}: p must hold probabilities in [0, 1]")
        if not np.isfinite(mu).all():
            raise ValueError(f"{where}: mu must be finite")
        threshold: Any = arrays["threshold"]
        threshold = float(threshold) if threshold.ndim == 0 else threshold
        per_node = arrays.get("per_node_budget")
        for name, a in (("threshold", arrays["threshold"]), ("per_node_budget", per_node)):
            if a is not None and a.ndim != 0 and a.shape != mu.shape:
                raise ValueError(f"{where}: {name} must be a scalar or (n,), got {a.shape}")
        cert = _certificates(fields.get("certificate"), where)
        mu_spec: Any = fields.get("mu_spec")
        if mu_spec is None:
            mu_spec = arrays.get("mu_spec", mu)
            if mu_spec.ndim == 0:
                mu_spec = float(mu_spec)
            elif mu_spec.shape != mu.shape:
                raise ValueError(f"{where}: mu_spec must be a number or (n,), got {mu_spec.shape}")
        elif mu_spec not in CENTRE_NAMES:
            raise ValueError(f"{where}: mu_spec must be one of {CENTRE_NAMES} or an array")
        return cls(
            p=p,
            mu=mu,
            mse=float(f["mse"]),
            objective=float(f["objective"]),
            budget=None if budget is None else float(budget),
            per_node_budget=per_node,
            expected_bits=float(f["expected_bits"]),
            protocol=f["protocol"],
            r=f["r"],
            method=f["method"],
            threshold=threshold,
            certificate=cert,
            saturated=f["saturated"],
            low_budget=f["low_budget"],
            history=[float(h) for h in f["history"]],
            iterations=f["iterations"],
            converged=f["converged"],
            seconds=float(f["seconds"]),
            solver_status=f["solver_status"],
            lower_bound=float(f["lower_bound"]),
            _mu_spec=mu_spec,
            _p_np=p,
        )


def _numpy(a: Any) -> np.ndarray:
    return np.asarray(a.detach().cpu().numpy() if hasattr(a, "detach") else a)


def _certificates(v: Any, where: str) -> Any:
    """A stored certificate (a dict, a list of dicts or None) as :class:`Certificate` objects."""
    if v is None:
        return None
    names = {f.name for f in fields(Certificate)}

    def one(d: Any) -> Certificate:
        if (
            not isinstance(d, dict)
            or set(d) != names
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in d.values())
        ):
            raise ValueError(f"{where}: a certificate must have the numbers {sorted(names)}")
        return Certificate(**{k: float(x) for k, x in d.items()})

    if isinstance(v, list):
        return tuple(one(d) for d in v)
    return one(v)


# ----------------------------------------------------------------------------- p-step solvers
@dataclass
class _Step:
    p: np.ndarray
    objective: float
    threshold: Any
    certificate: Any
    saturated: bool
    low_budget: bool
    status: str
    lower_bound: float = math.nan


def _exact_step(a, budget, per_node, caps) -> _Step:
    if per_node is None:
        res: WaterFillResult = water_fill(a, budget, caps)
        status = "water-filling" + (" (saturated)" if res.saturated else "")
        return _Step(
            np.asarray(res.p),
            res.objective,
            res.threshold,
            res.certificate,
            res.saturated,
            res.low_budget,
            status,
        )
    n = a.shape[0]
    p = np.empty_like(a)
    lam = np.empty(n)
    certs = []
    obj = 0.0
    sat = True
    for i in range(n):
        ci = None if caps is None else caps[i]
        res = water_fill(a[i], float(per_node[i]), ci)
        p[i] = res.p
        lam[i] = res.threshold
        certs.append(res.certificate)
        obj += res.objective
        sat = sat and res.saturated
    return _Step(p, obj, lam, tuple(certs), sat, False, "water-filling (per node, K6.7)")


def _dual_bound(w, cap, y_entry, y_budget_term):
    r"""Weak-duality lower bound on :math:`\sum w/p - \sum w` for multipliers ``y >= 0``.

    For each entry, :math:`\min_{0 < p \le c} w/p + y p` is :math:`2\sqrt{wy}` if
    :math:`\sqrt{w/y} \le c`, else :math:`w/c + yc`; subtracting :math:`\sum y B` gives the
    Lagrange dual function, a lower bound on the optimum for any :math:`y \ge 0`.
    """
    y = np.maximum(y_entry, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = np.sqrt(w / y) <= cap
    h = np.where(inner, 2.0 * np.sqrt(w * y), w / cap + y * cap)
    return float(np.sum(h) - y_budget_term - np.sum(w))


def _cvxpy_step(a, budget, per_node, caps, solver, max_size, eps, solver_options, gap_tol) -> _Step:
    import warnings

    import cvxpy as cp

    on = a > 0
    m = int(np.count_nonzero(on))
    if m > max_size:
        raise ValueError(
            f"method='cvxpy' refused: the problem has |S| = {m} variables, above "
            f"max_cvxpy_size = {max_size}; use method='exact' (water-filling, K6.2/K6.7), or raise "
            "max_cvxpy_size"
        )
    p = np.zeros_like(a)
    if m == 0:
        return _Step(p, 0.0, math.nan, None, True, False, "trivial (S empty)", 0.0)
    a_on = a[on]
    rows = np.nonzero(on)[0]
    cap_on = np.ones(m) if caps is None else caps[on]
    lo = min(eps, float(cap_on.min()))
    if budget is not None and lo * m > budget:
        raise ValueError(
            f"the cvxpy lower bound p >= eps = {eps:g} on |S| = {m} entries needs budget >= "
            f"{lo * m:g}, got {budget:g}; lower eps"
        )
    # Conditioning (the optimum does not depend on how the problem is scaled): substitute
    # p = pi * x with pi = B a / sum(a), the uncapped (K6.3) solution, so the optimal x is about 1
    # for every uncapped entry; the objective sum(a^2 / p) becomes sum(a^2/pi * inv_pos(x)), whose
    # coefficients a * sum(a) / B are normalised to sum to 1. Clarabel reports
    # 'optimal_inaccurate' on the raw a^2-weighted model for heavy-tailed data.
    b_total = budget if budget is not None else float(np.sum(per_node))
    s_a = float(np.sum(a_on))
    pi = np.minimum(b_total * a_on / s_a, 1.0)
    coef = a_on**2 / pi
    scale = float(np.sum(coef))
    coef = coef / scale
    x = cp.Variable(m)
    cons = [cp.multiply(pi, x) <= cap_on, cp.multiply(pi, x) >= lo]
    glob = node = None
    if budget is not None:
        glob = pi @ x <= budget
        cons.append(glob)
    if per_node is not None:
        import scipy.sparse as sp

        A = sp.csr_matrix((pi, (rows, np.arange(m))), shape=(a.shape[0], m))
        node = A @ x <= per_node
        cons.append(node)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.multiply(coef, cp.inv_pos(x)))), cons)
    try:
        with warnings.catch_warnings():  # the status is checked below
            warnings.simplefilter("ignore")
            prob.solve(solver=solver, **(solver_options or {}))
    except cp.error.SolverError as exc:
        raise RuntimeError(f"cvxpy solver {solver} failed: {exc}") from exc
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or x.value is None:
        raise RuntimeError(
            f"cvxpy solver {solver} did not reach an optimal solution: status {prob.status!r}"
        )
    # a truly feasible point: clip to [lo, cap], then scale down any budget excess
    xv = np.clip(pi * np.asarray(x.value, dtype=np.float64), lo, cap_on)
    if per_node is not None:
        sums = np.bincount(rows, weights=xv, minlength=a.shape[0])
        xv *= np.minimum(1.0, per_node / np.where(sums > 0, sums, 1.0))[rows]
    if budget is not None and xv.sum() > budget:
        xv *= budget / xv.sum()
    p[on] = xv
    objective = _objective(a, p)
    # weak-duality lower bound from the solver's multipliers. In the scaled model the budget
    # multiplier y' relates to the original one by y = scale * y' (the constraint rows carry pi).
    y_entry = np.zeros(m)
    y_term = 0.0
    if glob is not None:
        yg = max(float(np.asarray(glob.dual_value).ravel()[0]), 0.0) * scale
        y_entry += yg
        y_term += yg * budget
    if node is not None:
        yn = np.maximum(np.asarray(node.dual_value, dtype=np.float64).ravel(), 0.0) * scale
        y_entry += yn[rows]
        y_term += float(yn @ per_node)
    lower = _dual_bound(a_on**2, cap_on, y_entry, y_term)
    # relative to the solver's own objective sum(a^2/p) = objective + sum(a^2)
    gap = (objective - lower) / max(objective + float(np.sum(a_on**2)), 1e-300)
    status = f"cvxpy {solver}: {prob.status}, certified gap {gap:.2g} relative to sum(a^2/p)"
    if prob.status != cp.OPTIMAL and not gap <= gap_tol:
        raise RuntimeError(
            f"cvxpy solver {solver} did not reach an optimal solution: status {prob.status!r}, "
            f"duality gap {gap:.3g} > gap_tol = {gap_tol:g}"
        )
    return _Step(p, objective, math.nan, None, False, False, status, lower)


# ----------------------------------------------------------------------------- main entry point
def _as_vector(v: Any, n: int, name: str) -> np.ndarray:
    arr = as_float_array(v, name, ndims=(0, 1), finite=False)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{name} must have one entry per node, shape ({n},); got {arr.shape}")
    if not np.isfinite(arr).all() or np.any(arr <= 0):
        raise ValueError(f"{name} entries must be finite and > 0; got {arr[~(arr > 0)][:3]}")
    return arr


def optimal_probabilities(
    X: Any,
    budget: float | None = None,
    *,
    bits: float | None = None,
    protocol: str = "sparse",
    mu: CentreSpec = "mean",
    per_node_budget: Any = None,
    caps: Any = None,
    method: str = "exact",
    optimize_centres: bool = False,
    r: int = 32,
    solver: str = "CLARABEL",
    max_cvxpy_size: int = 100_000,
    eps: float = 1e-9,
    rtol: float = 1e-6,
    max_iter: int = 50,
    solver_options: dict[str, Any] | None = None,
    gap_tol: float = 1e-6,
) -> OptimalResult:
    r"""Optimal sampling probabilities (and optionally centres) for a budget (K6).

    Solves Problem (17) of [KR] (fixed :math:`\mu`; Problem (15) with ``optimize_centres``):

    .. math::
        \min_p \frac{1}{n^2}\sum_{(i,j) \in S}\Big(\frac{1}{p_{ij}} - 1\Big)(X_i(j) - \mu_i)^2
        \quad\text{s.t.}\quad \sum_{(i,j)\in S} p_{ij} \le B,\ 0 < p_{ij} \le c_{ij}.

    Parameters
    ----------
    X : array of shape (n, d)
        Data (numpy or torch).
    budget : float, optional
        :math:`B`, expected number of entries sent. Give ``budget`` or ``bits`` (or only
        ``per_node_budget``).
    bits : float, optional
        Bit budget :math:`C_{\max}`, converted to :math:`B` for ``protocol`` (K6). Infeasible budgets
        (at most the fixed cost) are refused with the fixed cost in the message.
    protocol : {"sparse", "varying-length"}
        K3 protocol used for the conversion and ``expected_bits``.
    mu : {"mean", "zero", "min"}, float or array of shape (n,)
        Centres (the starting centres with ``optimize_centres``).
    per_node_budget : float or array of shape (n,), optional
        :math:`\sum_j p_{ij} \le B_i` (K6.7): ``n`` water-fillings. Combined with a global budget,
        requires ``method="cvxpy"``.
    caps : float or array of shape (n, d), optional
        Per-entry caps :math:`c_{ij} \in (0, 1]` (water-filled exactly: :math:`\min(c, a/\lambda)`).
    method : {"exact", "cvxpy"}
        Water-filling (K6.2, certified) or the cvxpy model of K6.6 (restricted to the variables of
        :math:`S`; entries off :math:`S` have zero weight).
    optimize_centres : bool
        Alternate water-filling and the centre step (K6.5) until the relative decrease of the
        objective is at most ``rtol`` or ``max_iter`` iterations.
    r : int
        Bits per float value.
    solver : str
        cvxpy solver name (default Clarabel).
    max_cvxpy_size : int
        Refuse ``method="cvxpy"`` when :math:`|S|` exceeds this.
    eps : float
        Lower bound :math:`p \ge \varepsilon` of the cvxpy model.
    rtol, max_iter : float, int
        Stopping rule of the alternating minimisation.
    solver_options : dict, optional
        Passed to ``cvxpy.Problem.solve``.
    gap_tol : float
        A cvxpy status ``optimal_inaccurate`` is accepted only if the certified gap
        ``objective - lower_bound`` (weak duality from the solver's multipliers), relative to the
        solver's objective :math:`\sum_S a^2/p`, is at most ``gap_tol``.

    Returns
    -------
    OptimalResult
        ``p``, ``mu``, ``mse``, ``expected_bits``, certificate, history, timing and ``encoder()``.

    Raises
    ------
    ValueError
        Bad data, budgets, protocol, method or shapes; infeasible ``bits``; cvxpy problem too large.
    RuntimeError
        The cvxpy solver failed (the message names solver and status).

    Examples
    --------
    >>> X = np.array([[0.0, 0.0, 3.0, 1.0]])
    >>> res = optimal_probabilities(X, budget=1.0, mu="zero")
    >>> res.p, res.mse  # K6.3: p = B a / sum(a); MSE = (sum a)^2/B - sum a^2 = 16 - 10
    (array([[0.  , 0.  , 0.75, 0.25]]), 6.0)
    >>> res.certified()
    True
    """
    t0 = time.perf_counter()
    Xn, kind = check_matrix(X)
    n, d = Xn.shape
    protocol = check_protocol(protocol)
    r = _check_r(r)
    if not isinstance(method, str) or method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    optimize_centres = check_bool(optimize_centres, "optimize_centres")
    max_cvxpy_size = check_int_in_range(max_cvxpy_size, "max_cvxpy_size", 1, 2**62)
    eps = check_real(eps, "eps", 0.0, 1.0, low_open=True)
    gap_tol = check_real(gap_tol, "gap_tol", 0.0)
    if not isinstance(solver, str):
        raise TypeError(f"solver must be a cvxpy solver name (str), got {solver!r}")
    if solver_options is not None and not isinstance(solver_options, dict):
        raise TypeError(
            f"solver_options must be a dict or None, got {type(solver_options).__name__}"
        )
    if budget is not None and bits is not None:
        raise ValueError("give either budget (entries) or bits, not both")
    mu_spec = IndependentEncoder(1.0, mu).mu  # validates the spec
    centre_sent = bool(optimize_centres) or not (isinstance(mu_spec, str) and mu_spec == "zero")
    B: float | None = None
    if bits is not None:
        B = budget_from_bits(bits, n, d, protocol, r, centre_sent)
    elif budget is not None:
        B = check_budget(budget)
    per_node = (
        None if per_node_budget is None else _as_vector(per_node_budget, n, "per_node_budget")
    )
    if B is None and per_node is None:
        raise ValueError("give a budget: budget=, bits= or per_node_budget=")
    if B is not None and per_node is not None and method == "exact":
        raise ValueError(
            "a global budget together with per-node budgets is not covered by the exact "
            "water-filling; use method='cvxpy'"
        )
    cap_arr = None
    if caps is not None:
        from .waterfill import check_caps

        cap_arr = np.ascontiguousarray(check_caps(caps, (n, d)))
    max_iter = check_int_in_range(max_iter, "max_iter", 1, 10**6)
    rtol = check_real(rtol, "rtol", 0.0)

    def step(a: np.ndarray) -> _Step:
        if method == "exact":
            return _exact_step(a, B, per_node, cap_arr)
        return _cvxpy_step(
            a, B, per_node, cap_arr, solver, max_cvxpy_size, eps, solver_options, gap_tol
        )

    centres = _centres(Xn, mu_spec)
    a = _deviations(Xn, centres)
    cur = step(a)
    history = [cur.objective]
    iterations = 0
    converged = True
    if optimize_centres:
        converged = False
        for _ in range(max_iter):
            iterations += 1
            new_centres = _centre_step(Xn, cur.p, centres)
            if np.array_equal(new_centres, centres):
                converged = True
                break
            a_new = _deviations(Xn, new_centres)
            nxt = step(a_new)
            if not nxt.objective <= cur.objective:  # round-off / solver noise: keep the best
                converged = True
                break
            decrease = cur.objective - nxt.objective
            cur, centres, a = nxt, new_centres, a_new
            history.append(cur.objective)
            if decrease <= rtol * history[-2]:
                converged = True
                break
        mu_spec = centres
    if not math.isfinite(cur.objective):  # each a^2 is finite (checked); their sum overflowed
        raise_mse_overflow()
    total_p = float(np.sum(cur.p[a > 0]))
    bits_used = bits_from_budget(total_p, n, d, protocol, r, centre_sent)
    return OptimalResult(
        p=kind.wrap(cur.p),
        mu=kind.wrap(centres.copy()),
        mse=cur.objective / n**2,
        objective=cur.objective,
        budget=B,
        per_node_budget=per_node,
        expected_bits=bits_used,
        protocol=protocol,
        r=r,
        method=method,
        threshold=cur.threshold,
        certificate=cur.certificate,
        saturated=cur.saturated,
        low_budget=cur.low_budget,
        history=history,
        iterations=iterations,
        converged=converged,
        seconds=time.perf_counter() - t0,
        solver_status=cur.status,
        lower_bound=cur.lower_bound,
        _mu_spec=mu_spec,
        _p_np=cur.p,
    )
