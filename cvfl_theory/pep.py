r"""Worst case of the Theorem 4.2 skeleton by performance estimation (C4.6, ours).

A one-block skeleton of C-VFL's fixed-step method (C4.2, **as recovered**): ``R`` rounds of ``Q``
local steps, ``T = R Q``; round ``r`` starts at :math:`x_{t_0}`, :math:`t_0 = rQ`, and for
:math:`t = t_0, \dots, t_0 + Q - 1`

.. math::
    x_{t+1} = x_t - \eta\,\bigl(\nabla f(x_{t_0}) + e_t\bigr), \qquad \|e_t\| \le \varepsilon,

i.e. the gradient at the round's start (staleness) plus an additive error of norm at most
:math:`\varepsilon` (compression). :func:`worst_case_skeleton` computes, with PEPit (the
performance-estimation toolbox of Goujaud, Moucer, Glineur, Hendrickx, Taylor and Dieuleveut),
the exact worst case

.. math::
    W = \sup\Bigl\{\tfrac1R \textstyle\sum_{r=0}^{R-1} \|\nabla f(x_{rQ})\|^2 \;:\;
    f \in \mathcal F_L,\ f(x_0) - f(x_T) \le \Delta,\ \|e_t\| \le \varepsilon\Bigr\}

over every dimension, every :math:`L`-smooth (possibly non-convex) :math:`f`
(:math:`\|\nabla f(x) - \nabla f(y)\| \le L\|x - y\|`), every start :math:`x_0` and every
admissible error sequence (chosen adversarially, knowing :math:`f`). The left side is that of
Theorem 4.2; the gap :math:`f(x_0) - f(x_T)` is the theorem's own :math:`F(\Theta^0) -
F(\Theta^T)`. Since :math:`f_\star \le f(x_T)`, the worst case under
:math:`f(x_0) - f_\star \le \Delta` is at most :math:`W`, so every comparison "bound
:math:`\ge W`" made here also holds for that convention.

How it is computed: only :math:`\nabla f(x_{rQ})`, :math:`f(x_0)` and :math:`f(x_T)` are queried,
and PEPit replaces "there is an :math:`L`-smooth :math:`f` with these values" by the necessary
and sufficient interpolation conditions of Taylor, Hendrickx and Glineur (2017) (class
``SmoothFunction``, curvature in :math:`[-L, L]`), written on the Gram matrix of
:math:`x_0`, the gradients and the errors: one semidefinite program, solved here by Clarabel
through cvxpy. Within a round the iterate moves by :math:`-\eta Q(\nabla f(x_{t_0}) +
\bar e_r)` with :math:`\bar e_r = \frac1Q\sum_t e_t`, :math:`\|\bar e_r\| \le \varepsilon`, and
every such :math:`\bar e_r` arises (take :math:`e_t = \bar e_r`), so one error per round gives
the same worst case as ``T`` errors (``per_step_errors=True`` builds the ``T`` errors).

Closed form without error (:func:`worst_case_without_error`): the skeleton is then gradient
descent with step :math:`s = \eta Q`; the descent lemma gives :math:`f(x_{rQ}) - f(x_{(r+1)Q}) \ge
\frac{s(2 - Ls)}2 \|\nabla f(x_{rQ})\|^2`, summed :math:`W \le 2\Delta/(\eta T (2 - \eta Q L))`,
and :math:`f = \frac L2\|x\|^2` attains it, for :math:`0 < \eta Q L < 2`; for :math:`\eta Q L \ge
2` the same quadratic does not decrease and :math:`W = \infty`.

:func:`recovered_bound_skeleton` gives the recovered bound's terms for the same skeleton. Term 3
uses Lemma 1 (C4.1) only as an upper bound on the squared gradient perturbation
:math:`\mathbb E\|\nabla_m F_B(\Phi) - \nabla_m F_B(\hat\Phi)\|^2`; in the one-block skeleton
that perturbation is :math:`e_t`, so :math:`\sum_m H_m^2 G_m^2 \sum_{j \ne m} E_j^{t_0}` is
identified with :math:`\varepsilon^2` every round and term 3 is :math:`92\,Q^2\varepsilon^2`.
A deterministic error with :math:`\|e_t\| \le \varepsilon` is a special case of a random one with
:math:`\mathbb E\|e_t\|^2 \le \varepsilon^2`, so under this identification "bound :math:`\ge W`"
is necessary for the recovered theorem, not sufficient. Term 2 (variance) is zero: a
deterministic error cannot stand for a zero-mean mini-batch noise.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from dataclasses import dataclass
from typing import Any

from ._validate import check_bool, check_choice, check_int_in_range, check_real
from .bounds import BoundTerms, theorem_4_2

__all__ = [
    "MAX_ITERATIONS",
    "PEPResult",
    "recovered_bound_skeleton",
    "worst_case_skeleton",
    "worst_case_without_error",
]

MAX_ITERATIONS = 30
"""Largest ``T = R Q`` accepted (the SDP has ``O(R^2)`` constraints; ``R = 30`` takes ~25 s)."""

_SOLVERS = ("CLARABEL", "SCS")
_METRICS = ("mean", "min")


@dataclass(frozen=True)
class PEPResult:
    r"""The worst case of the skeleton found by PEPit, with the solver's report.

    Attributes
    ----------
    value : float
        The worst case: PEPit's dual value (the bound certified by the reconstructed proof);
        ``inf`` when the solver reports the problem unbounded.
    primal : float
        The value of the worst-case example the solver found (a lower bound on the worst case up
        to the solver's feasibility tolerance); ``inf`` when unbounded.
    status : str
        The cvxpy status (``"optimal"``, ``"optimal_inaccurate"``, ``"unbounded"``, ...). Where
        :math:`\eta Q L \ge 2` the worst case is infinite in closed form
        (:func:`worst_case_without_error`) and the solver may fail instead of reporting it
        unbounded: then ``value`` is ``inf`` and the status says so.
    gap : float or None
        ``value - primal`` (PEPit's duality gap); ``None`` when unbounded.
    L, eta, Q, R, eps, delta : float or int
        The arguments.
    metric : str
        ``"mean"`` or ``"min"`` (see :func:`worst_case_skeleton`).
    solver : str
        The SDP solver used.
    """

    value: float
    primal: float
    status: str
    gap: float | None
    L: float
    eta: float
    Q: int
    R: int
    eps: float
    delta: float
    metric: str
    solver: str

    @property
    def T(self) -> int:
        """Total local iterations ``R Q``."""
        return self.R * self.Q

    @property
    def bounded(self) -> bool:
        """Whether the worst case is finite."""
        return math.isfinite(self.value)


def _check_common(
    L: object, eta: object, Q: object, R: object, eps: object, delta: object
) -> tuple[float, float, int, int, float, float]:
    Lf = check_real(L, "L", 0.0, low_open=True)
    etaf = check_real(eta, "eta", 0.0, low_open=True)
    Qi = check_int_in_range(Q, "Q", 1, MAX_ITERATIONS)
    Ri = check_int_in_range(R, "R", 1, MAX_ITERATIONS)
    if Qi * Ri > MAX_ITERATIONS:
        raise ValueError(f"T = R * Q must be in [1, {MAX_ITERATIONS}], got R * Q = {Ri * Qi}")
    epsf = check_real(eps, "eps", 0.0)
    deltaf = check_real(delta, "delta", 0.0, low_open=True)
    return Lf, etaf, Qi, Ri, epsf, deltaf


def worst_case_skeleton(
    L: float,
    eta: float,
    Q: int,
    R: int,
    eps: float,
    delta: float = 1.0,
    *,
    metric: str = "mean",
    per_step_errors: bool = False,
    solver: str = "CLARABEL",
) -> PEPResult:
    r"""Exact worst case of the one-block Theorem 4.2 skeleton (PEPit).

    Parameters
    ----------
    L : float
        Smoothness constant, ``> 0``.
    eta : float
        Step size, ``> 0`` (any size: above :math:`2/(QL)` the worst case is infinite).
    Q : int
        Local steps per round, in ``[1, 30]``.
    R : int
        Rounds, in ``[1, 30]``, with ``T = R Q <= 30``.
    eps : float
        Bound on every error's norm, :math:`\|e_t\| \le \varepsilon`, ``>= 0``.
    delta : float
        :math:`\Delta \ge f(x_0) - f(x_T)`, ``> 0``.
    metric : {"mean", "min"}
        ``"mean"``: :math:`\frac1R\sum_{r<R}\|\nabla f(x_{rQ})\|^2` (Theorem 4.2's left side).
        ``"min"``: :math:`\min_{r \le R}\|\nabla f(x_{rQ})\|^2` over the ``R + 1`` points
        including the last, the convention of the literature on gradient descent (for ``Q = 1``,
        ``eps = 0`` and :math:`\eta L = h \le 1` it is :math:`4L\Delta/(R h (4 - h))`, e.g.
        :math:`4L\Delta/(3R)` at :math:`h = 1`, the value of PEPit's example
        ``wc_gradient_descent``).
    per_step_errors : bool
        Build one error per local step (``T`` errors) instead of one per round (``R``); the worst
        case is the same (see the module docstring), the SDP larger.
    solver : {"CLARABEL", "SCS"}
        The cvxpy SDP solver.

    Returns
    -------
    PEPResult

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong kind or out of range (the message names it and the range).
    ImportError
        PEPit is not installed.

    Notes
    -----
    PEPit keeps class-level counters: do not call this from several threads at once.

    Examples
    --------
    >>> r = worst_case_skeleton(L=1.0, eta=0.25, Q=1, R=2, eps=0.0)
    >>> round(r.value, 4), round(worst_case_without_error(1.0, 0.25, 1, 2), 4)
    (2.2857, 2.2857)
    """
    Lf, etaf, Qi, Ri, epsf, deltaf = _check_common(L, eta, Q, R, eps, delta)
    metric = check_choice(metric, "metric", _METRICS)
    per_step = check_bool(per_step_errors, "per_step_errors")
    solver = check_choice(solver, "solver", _SOLVERS)
    try:
        from PEPit import PEP, Point
        from PEPit.functions import SmoothFunction
    except ImportError as exc:
        raise ImportError(
            "worst_case_skeleton needs PEPit: pip install pepit (tested with pepit==0.5.1)"
        ) from exc

    problem = PEP()
    f = problem.declare_function(SmoothFunction, L=Lf)
    x0 = problem.set_initial_point()
    f0 = f(x0)
    x = x0
    grads: list[Any] = []

    def error() -> Any:
        e = Point()
        problem.add_constraint(e**2 <= epsf**2)
        return e

    for _ in range(Ri):
        g = f.gradient(x)
        grads.append(g)
        if epsf == 0.0:  # the errors are 0: leave them out of the Gram matrix
            x = x - (etaf * Qi) * g
        elif per_step:
            for _ in range(Qi):
                x = x - etaf * (g + error())
        else:
            x = x - (etaf * Qi) * (g + error())
    g_last, f_last = f.oracle(x)
    problem.add_constraint(f0 - f_last <= deltaf)
    if metric == "mean":
        problem.set_performance_metric(sum(g**2 for g in grads) / Ri)
    else:
        for g in [*grads, g_last]:
            problem.set_performance_metric(g**2)

    from cvxpy.error import SolverError

    try:
        # cvxpy warns on an inaccurate solution and PEPit prints a large duality gap even at
        # verbose=0; the status and the gap returned below say so
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.filterwarnings("ignore", message="Solution may be inaccurate")
            dual = problem.solve(wrapper="cvxpy", solver=solver, verbose=0)
        status = str(problem.wrapper.prob.status)
    except SolverError:
        if etaf * Qi * Lf < 2.0:
            raise
        # eta Q L >= 2: W = inf in closed form (f = L/2 ||x||^2, e = 0); the solver may fail there
        dual, status = None, "unbounded (solver failed; eta Q L >= 2)"
    if dual is None:
        value, primal, gap = math.inf, math.inf, None
    else:
        value = float(dual)
        primal = float(problem.wrapper.objective.value)
        gap = value - primal
    return PEPResult(
        value=value,
        primal=primal,
        status=status,
        gap=gap,
        L=Lf,
        eta=etaf,
        Q=Qi,
        R=Ri,
        eps=epsf,
        delta=deltaf,
        metric=metric,
        solver=solver,
    )


def worst_case_without_error(L: float, eta: float, Q: int, R: int, delta: float = 1.0) -> float:
    r"""Closed form of the ``"mean"`` worst case at :math:`\varepsilon = 0`.

    .. math::
        W_0 = \frac{2\Delta}{\eta T (2 - \eta Q L)} \quad (0 < \eta Q L < 2), \qquad
        W_0 = \infty \quad (\eta Q L \ge 2),

    gradient descent with step :math:`\eta Q`: the descent lemma bounds each round's decrease,
    :math:`f = \frac L2 \|x\|^2` attains the bound (see the module docstring).

    Parameters
    ----------
    L, eta, Q, R, delta
        As in :func:`worst_case_skeleton`.

    Returns
    -------
    float

    Examples
    --------
    >>> worst_case_without_error(L=1.0, eta=1.0, Q=1, R=5)  # 2 / (5 * 1 * 1)
    0.4
    """
    Lf, etaf, Qi, Ri, _, deltaf = _check_common(L, eta, Q, R, 0.0, delta)
    h = etaf * Qi * Lf
    if h >= 2.0:
        return math.inf
    return 2.0 * deltaf / (etaf * Ri * Qi * (2.0 - h))


def recovered_bound_skeleton(
    L: float, eta: float, Q: int, R: int, eps: float, delta: float = 1.0
) -> BoundTerms:
    r"""Theorem 4.2's recovered bound (C4.2) for the skeleton, term by term.

    .. math::
        \underbrace{\frac{4\Delta}{\eta T}}_{\text{term 1}}
        + \underbrace{0}_{\text{term 2}}
        + \underbrace{92\,Q^2\varepsilon^2}_{\text{term 3}},

    by :func:`cvfl_theory.bounds.theorem_4_2` with :math:`\sigma^2 = 0` and the Lemma-1 bound
    (``lemma1=``) equal to :math:`\varepsilon^2` every round: the one-block identification of
    :math:`\sum_m H_m^2 G_m^2 \sum_{j\ne m} E_j^{t_0}` with the squared gradient error. The
    constants 4, 6, 92 are recovered, not confirmed. ``step_ok`` says whether
    :math:`\eta \le 1/(16 Q L)`.

    Parameters
    ----------
    L, eta, Q, R, eps, delta
        As in :func:`worst_case_skeleton`.

    Returns
    -------
    BoundTerms

    Examples
    --------
    >>> b = recovered_bound_skeleton(L=1.0, eta=1 / 32, Q=2, R=3, eps=0.1)
    >>> round(b.optimization, 6), round(b.compression, 6), b.step_ok  # 4/(T eta), 92*4*0.01
    (21.333333, 3.68, True)
    """
    Lf, etaf, Qi, Ri, epsf, deltaf = _check_common(L, eta, Q, R, eps, delta)
    return theorem_4_2(
        F_gap=deltaf,
        eta=etaf,
        T=Ri * Qi,
        Q=Qi,
        L=Lf,
        sigma2=[0.0],
        B=1,
        lemma1=[epsf**2],
    )
