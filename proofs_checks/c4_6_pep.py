"""C4.6 (ours, not the paper's): the PEP of the Theorem 4.2 skeleton reproduces gradient descent.

With no error (``eps = 0``) and ``Q = 1`` the skeleton of ``cvfl_theory.pep`` is gradient descent
with step ``h/L`` on L-smooth, possibly non-convex functions. Its exact worst case of the average
squared gradient over ``x_0 .. x_{R-1}`` under ``f(x_0) - f(x_R) <= Delta`` is

    W_0 = 2 L Delta / (R h (2 - h)),  0 < h < 2:

the descent lemma (Nesterov, Lectures on Convex Optimization, 2018, Sec. 1.2.3) bounds each
step's decrease by ``h (2 - h) / (2L) ||grad f(x_k)||^2`` and ``f = (L/2) x^2`` decreases by
exactly that much every step, so the sum is attained.

Symbolic (sympy): for ``f = (L/2) x^2`` the decrease of one step ``s = h/L`` equals
``s (2 - L s)/2 f'(x)^2`` identically (the equality case of the descent lemma).

Numeric: ``worst_case_skeleton(L=2, eta=1/4, Q=1, R=10, eps=0, delta=3)`` (``h = 1/2``)
against ``W_0``. Further pairs: the ``min`` metric at ``h = 1`` against ``4 L Delta / (3R)``
(Taylor 2017, PhD thesis, p. 190; Abbaszadehpeivasti, de Klerk, Zamani, Optim. Lett. 2022;
the stated value of PEPit's example ``wc_gradient_descent``), and ``Q = 3`` at ``eps = 0``
against ``W_0`` with step ``eta Q`` (a round of stale steps is one step of length ``eta Q``).

Tolerance: 1e-3 relative. The solver is Clarabel with its default tolerances (1e-8 on the
conic problem); the PEP values it returns differ from these closed forms by at most ~4e-5
relative on R <= 30 (the Gram SDP is badly conditioned), so 1e-3 leaves a margin of 25 and is
500 times smaller than a factor-2 error in the closed form.
"""

from __future__ import annotations

import sympy as sp

from .result import CheckResult, Comparison

REL_TOL = 1e-3


def _quadratic_attains_descent_lemma() -> bool:
    L, s, x = sp.symbols("L s x", real=True)
    f = L * x**2 / 2
    g = sp.diff(f, x)
    decrease = f - f.subs(x, x - s * g)
    return bool(sp.simplify(decrease - s * (2 - L * s) / 2 * g**2) == 0)


def check() -> CheckResult:
    from cvfl_theory.pep import worst_case_skeleton

    L, delta, h, R = 2.0, 3.0, 0.5, 10
    main = worst_case_skeleton(L=L, eta=h / L, Q=1, R=R, eps=0.0, delta=delta)
    theory = 2 * L * delta / (R * h * (2 - h))

    R_min = 6
    wmin = worst_case_skeleton(L=L, eta=1 / L, Q=1, R=R_min, eps=0.0, delta=delta, metric="min")
    theory_min = 4 * L * delta / (3 * R_min)

    Q, R_q, eta_q = 3, 4, 0.1
    wq = worst_case_skeleton(L=L, eta=eta_q, Q=Q, R=R_q, eps=0.0, delta=delta)
    hq = eta_q * Q * L
    theory_q = 2 * L * delta / (R_q * hq * (2 - hq))

    comparisons = (
        Comparison(
            f"min_(k<={R_min}) ||grad f(x_k)||^2, h = 1: 4 L Delta/(3 R) (Taylor 2017; ADZ 2022)",
            wmin.value,
            theory_min,
            REL_TOL * theory_min,
        ),
        Comparison(
            f"Q = {Q}, eta = {eta_q}: mean = 2 Delta/(eta T (2 - eta Q L))",
            wq.value,
            theory_q,
            REL_TOL * theory_q,
        ),
    )
    return CheckResult(
        label="C4.6",
        claim="PEP of the C4.2 skeleton at eps = 0, Q = 1 (gradient descent, step h/L, L-smooth "
        "non-convex): worst mean ||grad f||^2 = 2 L Delta/(R h (2 - h))",
        method="PEPit SDP (SmoothFunction interpolation, Clarabel) via "
        "cvfl_theory.pep.worst_case_skeleton; sympy: f = L x^2/2 attains the descent lemma",
        symbolic=_quadratic_attains_descent_lemma(),
        empirical=main.value,
        theoretical=theory,
        tolerance=REL_TOL * theory,
        relation="==",
        note=f"L = {L}, Delta = {delta}, h = {h}, R = {R}: status {main.status}, "
        f"duality gap {main.gap:.2g}; tolerance {REL_TOL:g} relative (solver accuracy)",
        comparisons=comparisons,
    )
