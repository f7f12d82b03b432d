r"""Exact water-filling for Problem (17) of [KR] (K6.2), with a KKT certificate.

For fixed centres, Problem (17) is

.. math::
    \min_{p}\ \sum_{(i,j) \in S} \Big(\frac{1}{p_{ij}} - 1\Big) a_{ij}^2
    \quad \text{s.t.} \quad \sum_{(i,j) \in S} p_{ij} \le B, \qquad 0 < p_{ij} \le c_{ij},

with :math:`a_{ij} = |X_i(j) - \mu_i|`, :math:`S = \{a_{ij} > 0\}` and caps :math:`c_{ij} = 1`
unless given. The objective is strictly convex in :math:`p` on :math:`S`; with multiplier
:math:`\lambda^2` for the budget and :math:`\nu_{ij} \ge 0` for the caps, stationarity reads
:math:`a_{ij}^2 / p_{ij}^2 = \lambda^2 + \nu_{ij}`, hence (K6.2)

.. math::
    p_{ij} = \min\Big(c_{ij}, \frac{a_{ij}}{\lambda}\Big) \ \text{on } S, \qquad
    \sum_{(i,j) \in S} p_{ij} = B,

and :math:`\lambda > 0` is unique because :math:`f(\lambda) = \sum_S \min(c, a/\lambda)` is
continuous and strictly decreasing wherever some entry is uncapped. Since the problem is convex, the
KKT conditions are sufficient: the :class:`Certificate` (primal feasibility, :math:`\sum p = B`,
:math:`a/p = \lambda` on uncapped entries, :math:`a/c \ge \lambda` on capped ones) proves optimality
of the returned :math:`p` up to its reported residuals.

:math:`\lambda` is found by selection, not sorting: a small random sample brackets
:math:`\lambda` between two pivots, one pass over the remaining candidates classifies everything
outside the bracket as capped or uncapped, and the few entries inside are sorted — :math:`O(N)`
expected time and :math:`O(N)` bytes of masks besides the output.

References
----------
- [KR]_ J. Konečný, P. Richtárik. Randomized distributed mean estimation: accuracy vs
   communication. Frontiers in Applied Mathematics and Statistics, 2018.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._backend import to_numpy

__all__ = ["Certificate", "WaterFillResult", "water_fill"]

_F64_MAX = float(np.finfo(np.float64).max)
#: Candidate sets at most this large are solved by sorting.
_SMALL = 8192
#: Size of the random sample used to bracket the threshold.
_SAMPLE = 16384
#: Elements per chunk when computing the certificate (bounds temporary memory).
_CHUNK = 1 << 18


@dataclass(frozen=True)
class Certificate:
    r"""KKT certificate of a water-filling solution (K6.2), every condition with its residual.

    Attributes
    ----------
    feasibility_residual : float
        :math:`\max(0, \max(-p), \max(p - c))`: violation of :math:`0 \le p \le c`.
    min_p_on_support : float
        :math:`\min_S p` (must be :math:`> 0`; ``inf`` if :math:`S` is empty).
    off_support_max : float
        :math:`\max_{\notin S} p` (0 for the returned solution).
    budget_residual : float
        :math:`|\sum_S p - \min(B, \sum_S c)|` (the budget is active unless saturated).
    stationarity_residual : float
        :math:`\max |a/p - \lambda|` over uncapped entries of :math:`S` (0 if none).
    cap_residual : float
        :math:`\min (a/c - \lambda)` over capped entries (must be :math:`\ge 0`; ``inf`` if none).
    threshold : float
        :math:`\lambda` (0 when saturated: the budget constraint is then inactive).
    budget : float
        :math:`B`.
    """

    feasibility_residual: float
    min_p_on_support: float
    off_support_max: float
    budget_residual: float
    stationarity_residual: float
    cap_residual: float
    threshold: float
    budget: float

    def holds(self, tol: float = 1e-9) -> bool:
        r"""Whether every KKT condition holds to relative tolerance ``tol``.

        Budget is compared relative to :math:`\max(1, B)`, stationarity and caps relative to
        :math:`\lambda`; feasibility is absolute (probabilities are :math:`O(1)`).
        """
        lam = self.threshold
        scale_b = max(1.0, self.budget)
        ok = (
            self.feasibility_residual <= tol
            and self.min_p_on_support > 0
            and self.off_support_max == 0
            and self.budget_residual <= tol * scale_b
        )
        if lam > 0:
            ok = ok and self.stationarity_residual <= tol * lam
            ok = ok and self.cap_residual >= -tol * lam
        else:
            ok = ok and self.stationarity_residual == 0
        return bool(ok)

    def __str__(self) -> str:
        return (
            f"feasibility {self.feasibility_residual:.3g}, min p on S {self.min_p_on_support:.3g}, "
            f"|sum p - B| {self.budget_residual:.3g}, stationarity max|a/p - lambda| "
            f"{self.stationarity_residual:.3g}, caps min(a/c - lambda) {self.cap_residual:.3g} "
            f"(lambda {self.threshold:.6g})"
        )


@dataclass(frozen=True, eq=False)
class WaterFillResult:
    r"""Solution of K6.2 returned by :func:`water_fill`.

    Attributes
    ----------
    p : numpy.ndarray or torch.Tensor
        Optimal probabilities, same shape and array kind as ``a``, float64; 0 off :math:`S`.
    threshold : float
        The water level :math:`\lambda` (0 when saturated).
    objective : float
        :math:`\sum_S (1/p - 1) a^2` (multiply by :math:`1/n^2` for the K1.2 MSE).
    budget : float
        :math:`B`.
    support_size : int
        :math:`|S|`.
    n_capped : int
        Entries of :math:`S` with :math:`p = c`.
    saturated : bool
        True if :math:`B \ge \sum_S c` (:math:`|S|` without caps): then :math:`p = c` on
        :math:`S` and, without caps, the MSE is 0 (K6.1).
    low_budget : bool
        True if no entry is capped (the K6.3 regime when there are no caps).
    certificate : Certificate
        KKT residuals.
    """

    p: Any
    threshold: float
    objective: float
    budget: float
    support_size: int
    n_capped: int
    saturated: bool
    low_budget: bool
    certificate: Certificate

    @property
    def status(self) -> str:
        """One line saying which case applies."""
        if self.saturated:
            return (
                f"saturated: budget {self.budget:g} >= what S can use (|S| = {self.support_size}); "
                "every entry of S is sent with its cap (p = 1 without caps), objective "
                f"{self.objective:g}"
            )
        regime = (
            "low-budget regime (K6.3, nothing capped)"
            if self.low_budget
            else (f"{self.n_capped} entries capped")
        )
        return f"optimal: lambda = {self.threshold:.6g}, {regime}"


def check_budget(budget: Any, name: str = "budget") -> float:
    """``budget`` as a float, refused (naming ``name``) unless a finite positive number."""
    if isinstance(budget, bool):
        raise TypeError(f"{name} must be a positive number, got {budget!r}")
    try:
        b = float(budget)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a positive number, got {budget!r}") from None
    if not math.isfinite(b) or b <= 0:
        raise ValueError(f"{name} must be a finite number > 0 (expected entries sent), got {b}")
    return b


def _as_float_array(a: Any, name: str) -> tuple[np.ndarray, Any]:
    arr, kind = to_numpy(a, name)
    if arr.dtype == bool or arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    arr = np.asarray(arr, dtype=np.float64)
    return arr, kind


def _check_weights(a: np.ndarray, name: str = "a") -> None:
    if not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))[0]
        raise ValueError(f"{name} must be finite; found {a[tuple(bad)]} at index {tuple(bad)}")
    mn = a.min()
    top = float(a.max())
    if not math.isfinite(top * top):
        bad = np.argwhere(a == top)[0]
        raise ValueError(
            f"{name} is too large: a^2 overflows float64 for a = {top:g} at index "
            f"{tuple(int(b) for b in bad)}; the objective needs a <= {math.sqrt(_F64_MAX):.4g}: "
            "rescale"
        )
    if mn < 0:
        bad = np.argwhere(a < 0)[0]
        raise ValueError(
            f"{name} must be non-negative (a = |X - mu|); found {mn} at index "
            f"{tuple(int(b) for b in bad)}"
        )


def check_caps(caps: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``caps`` broadcast to ``shape`` as float64, refused unless every cap is in ``(0, 1]``."""
    c, _ = _as_float_array(caps, "caps")
    try:
        c = np.broadcast_to(c, shape)
    except ValueError:
        raise ValueError(
            f"caps of shape {c.shape} does not broadcast to a's shape {shape}"
        ) from None
    if not np.isfinite(c).all() or np.any(c <= 0) or np.any(c > 1):
        bad = c[~(np.isfinite(c) & (c > 0) & (c <= 1))].ravel()[0]
        raise ValueError(f"caps must lie in (0, 1] (an entry of S needs p > 0); got {bad}")
    return c


# ------------------------------------------------------------------------------ the threshold
def _solve_sorted(q, a, c, budget, k0, s0, scale=1.0):
    r"""Water level for a small candidate set, by sorting (also used on samples with ``scale``).

    Returns ``(lam, k)``: the threshold assuming ``k0`` capped weight and ``s0`` uncapped mass
    outside the candidates, and the number of candidates capped.
    """
    order = np.argsort(-q, kind="stable")
    qs = q[order]
    as_ = a[order]
    cs = np.ones_like(qs) if c is None else c[order]
    m = qs.shape[0]
    # capped weight of the top k and uncapped mass of the rest, k = 1..m
    cum_c = np.cumsum(cs) * scale
    suffix = np.cumsum(as_[::-1])[::-1]  # accumulated from the small end: no cancellation
    rest_a = np.append(suffix[1:], 0.0) * scale  # sum of a strictly after position k
    with np.errstate(divide="ignore", invalid="ignore"):
        f = k0 + cum_c + (s0 + rest_a) / qs  # f(q_(k)) with the top k capped
    f = np.where(qs > 0, f, np.inf)
    k = int(np.searchsorted(f, budget, side="right"))  # f is non-decreasing in k
    while k > 0 and not f[k - 1] <= budget:  # guard against round-off non-monotonicity
        k -= 1
    capped = float(cum_c[k - 1]) if k > 0 else 0.0
    rest = float(np.sum(as_[k:])) * scale if k < m else 0.0
    lam = (s0 + rest) / (budget - k0 - capped)
    return lam, k, qs


def _threshold(q: np.ndarray, a: np.ndarray, c: np.ndarray | None, budget: float) -> float:
    r"""The unique :math:`\lambda > 0` with :math:`\sum \min(c, a/\lambda) = B`.

    ``q = a / c`` (``a`` itself without caps) is the level above which an entry is capped. Requires
    :math:`B < \sum_{a > 0} c`.
    """
    k0 = 0.0  # cap weight of entries known to be capped
    s0 = 0.0  # mass sum(a) of entries known to be uncapped
    gen = np.random.default_rng(0x5EED)  # fixed: the search is deterministic
    Cq, Ca, Cc = q, a, c
    while Cq.shape[0] > _SMALL:
        m = Cq.shape[0]
        ns = min(_SAMPLE, m // 8)
        idx = gen.integers(0, m, size=ns)
        sq, sa = Cq[idx], Ca[idx]
        sc = None if Cc is None else Cc[idx]
        _, khat, sorted_q = _solve_sorted(sq, sa, sc, budget, k0, s0, scale=m / ns)
        delta = int(3 * math.sqrt(ns))  # ~3 standard deviations of the sample rank
        t_hi = float(sorted_q[max(khat - delta, 0)])
        t_lo = float(sorted_q[min(khat + delta, ns - 1)])
        if khat - delta < 0:
            t_hi = math.inf
        if t_lo <= 0:
            t_lo = 0.0
        # every mass is summed directly (never as a difference of totals: cancellation)
        hi = Cq >= t_hi
        lo = Cq <= t_lo
        hi_c = float(np.count_nonzero(hi) if Cc is None else np.sum(Cc, where=hi))
        below_hi_a = float(np.sum(Ca, where=~hi))
        above_lo_c = float(m - np.count_nonzero(lo) if Cc is None else np.sum(Cc, where=~lo))
        lo_a = float(np.sum(Ca, where=lo))
        # f(t) = k0 + (cap weight with q >= t) + (s0 + mass with q < t) / t; entries with q = t
        # contribute c = a/t on either side
        f_hi = k0 + hi_c + (s0 + below_hi_a) / t_hi if t_hi < math.inf else -math.inf
        f_lo = k0 + above_lo_c + (s0 + lo_a) / t_lo if t_lo > 0 else math.inf
        if f_hi > budget:  # lambda > t_hi strictly: everything with q <= t_hi is uncapped
            keep = Cq > t_hi  # drops the pivot itself, so every round makes progress
            s0 += float(np.sum(Ca, where=~keep))
        elif f_lo < budget:  # lambda < t_lo strictly: everything with q >= t_lo is capped
            keep = Cq < t_lo
            k0 += float(m - np.count_nonzero(keep) if Cc is None else np.sum(Cc, where=~keep))
        else:  # t_lo <= lambda <= t_hi
            keep = ~(hi | lo)
            k0 += hi_c
            s0 += lo_a
        del hi, lo
        same = Ca is Cq  # no caps: the keys are the weights, compress once
        Cq = Cq[keep]
        Ca = Cq if same else Ca[keep]
        Cc = None if Cc is None else Cc[keep]
        del keep
    lam, _, _ = _solve_sorted(Cq, Ca, Cc, budget, k0, s0)
    return float(lam)


# ------------------------------------------------------------------------------ certificate
def _certify(a, p, c, lam, budget, cap_total):
    """KKT residuals, the objective and the number of capped entries, in bounded-memory chunks."""
    feas = 0.0
    min_on = math.inf
    off_max = 0.0
    total = 0.0
    stat = 0.0
    cap_min_ratio = math.inf  # min a/p over capped entries (= a/c there, since p = c)
    obj = 0.0
    n_capped = 0
    N = a.shape[0]
    for s in range(0, N, _CHUNK):
        ac = a[s : s + _CHUNK]
        pc = p[s : s + _CHUNK]
        if c is None:
            feas = max(feas, -float(pc.min()), float(pc.max()) - 1.0)
        else:
            feas = max(feas, -float(pc.min()), float(np.max(pc - c[s : s + _CHUNK])))
        on = ac > 0
        all_on = bool(on.all())
        if all_on:
            aon, pon = ac, pc
            con: Any = 1.0 if c is None else c[s : s + _CHUNK]
        else:
            if not on.any():
                off_max = max(off_max, float(pc.max()))
                continue
            off_max = max(off_max, float(np.max(pc, where=~on, initial=0.0)))
            aon, pon = ac[on], pc[on]
            con = 1.0 if c is None else c[s : s + _CHUNK][on]
        min_on = min(min_on, float(pon.min()))
        total += float(np.sum(pon))
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            ratio = aon / pon  # a/p: lambda on uncapped entries, never overflows there
            capped = pon >= con
            n_cap = int(np.count_nonzero(capped))
            n_capped += n_cap
            if n_cap:
                cap_min_ratio = min(cap_min_ratio, float(np.where(capped, ratio, np.inf).min()))
            # objective sum (1/p - 1) a^2 = sum a (a/p - a): per-entry, exactly 0 where p = 1
            tmp = np.subtract(ratio, aon)
            obj += float(np.dot(aon, tmp))
            if n_cap < aon.shape[0]:
                # (a/p - lambda) on uncapped entries, 0 on capped ones (arithmetic masking is
                # several times faster than masked reductions)
                np.subtract(ratio, lam, out=tmp)
                np.multiply(tmp, ~capped, out=tmp)
                stat = max(stat, float(tmp.max()), -float(tmp.min()))
    cert = Certificate(
        feasibility_residual=max(feas, 0.0),
        min_p_on_support=min_on,
        off_support_max=off_max,
        budget_residual=abs(total - min(budget, cap_total)),
        stationarity_residual=stat,
        cap_residual=cap_min_ratio - lam,
        threshold=lam,
        budget=budget,
    )
    return cert, obj, n_capped


def water_fill(a: Any, budget: float, caps: Any = None) -> WaterFillResult:
    r"""Exact optimal sampling probabilities for fixed centres (K6.2), with a certificate.

    Solves Problem (17) of [KR]:

    .. math::
        \min_p \sum_{a_{ij} > 0} \Big(\frac{1}{p_{ij}} - 1\Big) a_{ij}^2 \quad
        \text{s.t.} \sum p_{ij} \le B,\ 0 < p_{ij} \le c_{ij},

    whose solution is :math:`p_{ij} = \min(c_{ij}, a_{ij}/\lambda)` on :math:`S = \{a > 0\}`
    and 0 off :math:`S`, with :math:`\lambda` the unique level giving :math:`\sum p = B`. If
    :math:`B \ge \sum_S c_{ij}` (:math:`|S|` without caps) the budget is not binding: :math:`p = c`
    on :math:`S` (MSE 0 without caps, K6.1) and ``saturated`` is set.

    Parameters
    ----------
    a : array_like or torch.Tensor, any shape
        Non-negative finite weights :math:`a_{ij} = |X_i(j) - \mu_i|`.
    budget : float
        :math:`B > 0`, the expected number of entries sent.
    caps : float or array broadcastable to ``a``, optional
        Per-entry caps :math:`c_{ij} \in (0, 1]` (default 1).

    Returns
    -------
    WaterFillResult
        ``p`` (same shape and kind as ``a``), the threshold :math:`\lambda`, the objective
        :math:`\sum_S (1/p - 1) a^2`, flags, and the KKT :class:`Certificate`.

    Raises
    ------
    ValueError
        NaN/inf or negative ``a``, ``budget <= 0`` or not finite, caps outside ``(0, 1]``.

    Notes
    -----
    Expected :math:`O(N)` time (selection with a sampled bracket, then sorting of the
    :math:`O(\sqrt N)`-sized bracket); memory: the output plus two boolean masks.

    References
    ----------
    - [KR]_ Konečný & Richtárik (2018), Problem (17); K6.2.

    Examples
    --------
    >>> res = water_fill(np.array([4.0, 1.0, 1.0, 0.0]), budget=2.0)
    >>> res.p  # lambda = 2: the large entry is capped at 1, the small ones get a/lambda
    array([1. , 0.5, 0.5, 0. ])
    >>> res = water_fill(np.array([3.0, 1.0, 0.0]), budget=1.0)
    >>> float(res.threshold), res.p
    (4.0, array([0.75, 0.25, 0.  ]))
    >>> res.certificate.holds()
    True
    """
    arr, kind = _as_float_array(a, "a")
    b = check_budget(budget)
    _check_weights(arr)
    flat = arr.reshape(-1)
    c = None if caps is None else check_caps(caps, arr.shape)
    cflat = None if c is None else np.ascontiguousarray(c).reshape(-1)
    n_support = int(np.count_nonzero(flat))
    cap_total = float(n_support) if cflat is None else float(np.sum(cflat, where=flat > 0))
    if b >= cap_total:  # saturated (includes the all-zero case, |S| = 0)
        lam = 0.0
        p = np.zeros_like(flat)
        on = flat > 0
        p[on] = 1.0 if cflat is None else cflat[on]
        low = False
    else:
        q = flat if cflat is None else flat / cflat
        total = float(np.sum(flat))
        if b * float(q.max()) <= total:  # K6.3: nothing capped, lambda = sum(a) / B
            lam = total / b
            low = True
        else:
            lam = _threshold(q, flat, cflat, b)
            low = False
        del q
        with np.errstate(over="ignore"):  # a/lam = inf only where the cap applies anyway
            p = np.divide(flat, lam)
        np.minimum(p, 1.0 if cflat is None else cflat, out=p)
    cert, obj, n_capped = _certify(flat, p, cflat, lam, b, cap_total)
    if cert.min_p_on_support == 0:
        small = float(np.min(flat, where=(flat > 0) & (p == 0), initial=math.inf))
        raise ValueError(
            f"the dynamic range of a is too large for float64: p = a/lambda underflows to 0 for "
            f"a = {small:g} (lambda = {lam:g}); such entries carry no usable information — set "
            "them to exactly 0 (X = mu) before optimising"
        )
    if not math.isfinite(obj):
        raise ValueError(
            "a is too large: the objective sum (1/p - 1) a^2 overflows float64; rescale a"
        )
    return WaterFillResult(
        p=kind.wrap(p.reshape(arr.shape)),
        threshold=float(lam),
        objective=obj,
        budget=b,
        support_size=n_support,
        n_capped=n_capped if lam > 0 else n_support,
        saturated=lam == 0.0,
        low_budget=low or (lam > 0 and n_capped == 0),
        certificate=cert,
    )
