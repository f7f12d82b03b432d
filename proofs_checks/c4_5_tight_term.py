"""C4.5 (ours, not the paper's): the tight bound on Lemma 1's left side for dithered quantizers.

Symbolic (sympy):
- the expectation of the squared norm of a linear form in independent zero-mean errors: cross
  terms vanish and each unit gives ``s^2 ||L||_F^2``; a shared (server) error gives
  ``s0^2 ||sum_i L_i||_F^2`` (no 1/B gain) -- small symbolic sizes;
- the dither moments: uniform ``E u^2 = D^2/12``, ``E u^4 = D^4/80``; the hexagon's second
  moment ``5V/(18 sqrt 3)`` per pair, ``E||u||^4 = (168/125)(E||u||^2)^2``, isotropic fourth
  moments (``E u1^4 = 3/8 E||u||^4``, ``E u1^2 u2^2 = 1/8 E||u||^4``), the circumradius
  ``R^2 = (24/5) s^2``; both laws' fourth moments are below the Gaussian's (the Lemma of Step 5).

Numeric:
- the softmax constants of Step 3 (``||J_p|| <= 1/2``, ``||d^2 p[v, v]|| <= ||v||^2/sqrt 2``, and
  the local versions) by autograd at random points, never exceeded;
- Monte Carlo (float64) of the true ``E||grad_m F_B(Phi) - grad_m F_B(Phi^)||^2`` with the
  package's own compressors (scalar and hexagonal at b = 2 and 4 on everything, and a 6-bit
  scalar on the server model only, whose error is shared by all samples; 400 draws), against the
  bound: passes iff ``bound >= MC mean - 5 SE`` for every block and, by the reverse Minkowski
  inequality, ``(sqrt F - sqrt R)^2 <= MC mean + 5 SE`` (the first-order term is not too large
  either); the median of bound / measured is reported (target <= 10).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy as sp
import torch
from torch import nn
from torch.func import functional_call

from cvfl_sim.bounds.tight_term import (
    CE_THIRD,
    SOFTMAX_LIPSCHITZ,
    SUBGAUSSIAN_FOURTH,
    local_softmax_constants,
    tight_lemma1_bound_for,
)
from cvfl_theory.compressors import HexLatticeQuantizer, Identity, ScalarQuantizer

from ._common import Z_SE
from .result import CheckResult, Comparison

DRAWS = 400


# ------------------------------------------------------------------------------- symbolic
def _expect(expr: sp.Expr, units: list[list[sp.Symbol]], s2: list[sp.Expr]) -> sp.Expr:
    """E of a polynomial of degree <= 2 in independent zero-mean units with covariance s^2 I."""
    poly = sp.Poly(sp.expand(expr), *[x for u in units for x in u])
    out = sp.Integer(0)
    for monom, coeff in poly.terms():
        term = coeff
        pos = 0
        for u, s in zip(units, s2):
            powers = monom[pos : pos + len(u)]
            pos += len(u)
            deg = sum(powers)
            if deg == 0:
                continue
            if deg == 2 and max(powers) == 2:
                term *= s  # E x_k^2 = s^2; E x_k x_l = 0 (k != l); E x = 0
            else:
                term = 0
        out += term
    return sp.expand(out)


def _quadratic_form_identities() -> bool:
    """Step 1: E||sum_u L_u e_u||^2 = sum_u s_u^2 ||L_u||_F^2; a shared error adds coherently."""
    ok = True
    # two samples, one other party (P_j = 2 components), a shared server error (2 components),
    # an output of dimension 2; all matrix entries symbolic.
    L = [sp.Matrix(2, 2, lambda r, c, i=i: sp.Symbol(f"L{i}_{r}{c}")) for i in range(2)]
    A0 = [sp.Matrix(2, 2, lambda r, c, i=i: sp.Symbol(f"S{i}_{r}{c}")) for i in range(2)]
    e = [[sp.Symbol(f"e{i}_{k}") for k in range(2)] for i in range(2)]
    e0 = [sp.Symbol(f"z_{k}") for k in range(2)]
    s, s0, B = sp.symbols("s s0 B", positive=True)
    a = sum(
        ((L[i] * sp.Matrix(e[i]) + A0[i] * sp.Matrix(e0)) / B for i in range(2)), sp.zeros(2, 1)
    )
    lhs = _expect((a.T * a)[0, 0], [e[0], e[1], e0], [s**2, s**2, s0**2])
    fro = lambda M: sum(x**2 for x in M)  # noqa: E731
    rhs = (s**2 * (fro(L[0]) + fro(L[1])) + s0**2 * fro(A0[0] + A0[1])) / B**2
    ok &= sp.simplify(lhs - rhs) == 0
    # the mutation "server error per sample" (incoherent) is a different expression
    wrong = (s**2 * (fro(L[0]) + fro(L[1])) + s0**2 * (fro(A0[0]) + fro(A0[1]))) / B**2
    ok &= sp.simplify(lhs - wrong) != 0
    return bool(ok)


def _dither_moments() -> dict[str, Any]:
    """Moments of the uniform scalar error and of the uniform hexagon (symbolic integration)."""
    u, D = sp.symbols("u Delta", positive=True)
    m2 = sp.integrate(u**2, (u, -D / 2, D / 2)) / D
    m4 = sp.integrate(u**4, (u, -D / 2, D / 2)) / D
    x, y, r = sp.symbols("x y r", real=True)
    s3 = sp.sqrt(3)

    # regular hexagon of inradius r: |y| <= r, sqrt3 |x| + |y| <= 2r (upper and lower halves)
    def integ(f: sp.Expr) -> sp.Expr:
        upper = sp.integrate(f, (x, -(2 * r - y) / s3, (2 * r - y) / s3), (y, 0, r))
        lower = sp.integrate(f, (x, -(2 * r + y) / s3, (2 * r + y) / s3), (y, -r, 0))
        return sp.expand(upper + lower)

    V = sp.simplify(integ(1))
    h2 = sp.simplify(integ(x**2 + y**2) / V)
    h4 = sp.simplify(integ((x**2 + y**2) ** 2) / V)
    hx2, hy2 = sp.simplify(integ(x**2) / V), sp.simplify(integ(y**2) / V)
    hxy = sp.simplify(integ(x * y) / V)
    hx4, hy4 = sp.simplify(integ(x**4) / V), sp.simplify(integ(y**4) / V)
    hx2y2 = sp.simplify(integ(x**2 * y**2) / V)
    sh = h2 / 2  # per-component variance s^2
    circum2 = (2 * r / s3) ** 2  # vertex (2r/sqrt3, 0)
    # isotropic 4th-moment tensor: E(u^T M u)^2 = (E||u||^4/8)((tr M)^2 + 2 tr M^2)
    a, b, c = sp.symbols("a b c", real=True)
    quad = a * x**2 + 2 * b * x * y + c * y**2
    iso = sp.simplify(integ(quad**2) / V - h4 / 8 * ((a + c) ** 2 + 2 * (a**2 + 2 * b**2 + c**2)))
    gauss_ratio_hex = sp.simplify(h4 / (8 * sh**2))  # Gaussian 2-D: E||g||^4 = 8 s^4
    checks = {
        "scalar E u^2 = D^2/12": sp.simplify(m2 - D**2 / 12) == 0,
        "scalar E u^4 = D^4/80": sp.simplify(m4 - D**4 / 80) == 0,
        "scalar E u^4 / (3 s^4) = 3/5": sp.simplify(m4 / (3 * m2**2) - SUBGAUSSIAN_FOURTH_S) == 0,
        "hex E||u||^2 = 5V/(18 sqrt3)": sp.simplify(h2 - 5 * V / (18 * s3)) == 0,
        "hex E u u^T = s^2 I": sp.simplify(hx2 - hy2) == 0 and hxy == 0,
        "hex E||u||^4 = (168/125)(E||u||^2)^2": sp.simplify(h4 / h2**2 - sp.Rational(168, 125))
        == 0,
        "hex E u1^4 = E u2^4 = 3/8 E||u||^4": sp.simplify(hx4 - hy4) == 0
        and sp.simplify(hx4 - 3 * h4 / 8) == 0,
        "hex E u1^2 u2^2 = 1/8 E||u||^4": sp.simplify(hx2y2 - h4 / 8) == 0,
        "hex isotropic E(u^T M u)^2": iso == 0,
        "hex E||u||^4 / Gaussian = 84/125": sp.simplify(gauss_ratio_hex - SUBGAUSSIAN_FOURTH_H)
        == 0,
        "hex circumradius^2 = (24/5) s^2": sp.simplify(circum2 - sp.Rational(24, 5) * sh) == 0,
    }
    return checks


SUBGAUSSIAN_FOURTH_S = sp.Rational(3, 5)
SUBGAUSSIAN_FOURTH_H = sp.Rational(84, 125)


# ------------------------------------------------------------------------------- softmax constants
def _second_directional(u: torch.Tensor, v: torch.Tensor, h: float = 1e-4) -> torch.Tensor:
    """Central second difference of softmax along ``v`` at ``u`` (float64, error O(h^2))."""
    return (torch.softmax(u + h * v, 0) - 2 * torch.softmax(u, 0) + torch.softmax(u - h * v, 0)) / (
        h * h
    )


def _softmax_constants(seed: int = 0) -> tuple[float, float, float]:
    """Worst ratios found (<= 1 means the constant holds): global J_p, global d^2 p, local."""
    gen = torch.Generator().manual_seed(seed)
    worst_j = worst_c = worst_local = 0.0
    for K in (2, 3, 5, 10):
        for _ in range(60):
            u = torch.randn(K, generator=gen, dtype=torch.float64) * float(
                torch.empty(1).uniform_(0.1, 8.0, generator=gen)
            )
            v = torch.randn(K, generator=gen, dtype=torch.float64)
            pu = torch.softmax(u, 0)
            Jp = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, 0), u)
            worst_j = max(worst_j, float(torch.linalg.matrix_norm(Jp, 2)) / SOFTMAX_LIPSCHITZ)

            sec = _second_directional(u, v)
            ratio = float(torch.linalg.vector_norm(sec)) / float(v @ v)
            worst_c = max(worst_c, ratio / CE_THIRD)
            # local constants on a ball of radius r: sample a point w in the ball
            r = float(torch.empty(1).uniform_(0.0, 2.0, generator=gen))
            w = torch.randn(K, generator=gen, dtype=torch.float64)
            w = w / torch.linalg.vector_norm(w) * r * float(torch.rand(1, generator=gen))
            lam, kap = local_softmax_constants(1.0 - float(pu.max()), np.array([r]))
            Jw = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, 0), u + w)
            secw = _second_directional(u + w, v)
            worst_local = max(
                worst_local,
                float(torch.linalg.matrix_norm(Jw, 2)) / float(lam[0]),
                float(torch.linalg.vector_norm(secw)) / float(v @ v) / float(kap[0]),
            )
    return worst_j, worst_c, worst_local


# ------------------------------------------------------------------------------- Monte Carlo
def measured_lemma1(
    parties: list[nn.Module],
    server: nn.Module,
    inputs: list[torch.Tensor],
    y: torch.Tensor,
    compressor: Any,
    server_compressor: Any,
    draws: int,
    seed: int,
) -> np.ndarray:
    """``(draws, M + 1)`` samples of ``||grad_m F_B(Phi) - grad_m F_B(Phi^_m)||^2`` (independent).

    Two gradient evaluations on the same batch per draw: at the exact embeddings and server
    model, and at each block's view ``Phi^_m`` built with the package's compressors (the others'
    compressed embeddings, the compressed server model for a party, the own block exact).
    """
    M = len(parties)
    names = [k for k, _ in server.named_parameters()]
    th0 = [v for _, v in server.named_parameters()]
    blocks = [th0] + [list(p.parameters()) for p in parties]
    H = [p(x) for p, x in zip(parties, inputs)]
    loss = nn.functional.cross_entropy(server(torch.cat(H, 1)), y)
    exact = torch.autograd.grad(loss, [q for b in blocks for q in b])
    gens = [np.random.default_rng([seed, j]) for j in range(M + 1)]
    theta0 = torch.cat([v.detach().reshape(-1) for v in th0]).reshape(1, -1)
    out = np.zeros((draws, M + 1))
    sizes = [len(b) for b in blocks]
    for d in range(draws):
        H = [p(x) for p, x in zip(parties, inputs)]
        Hh = [compressor.roundtrip(h.detach(), rng=gens[j]) for j, h in enumerate(H)]
        t0h = server_compressor.roundtrip(theta0, rng=gens[M]).reshape(-1)
        parts = t0h.split([v.numel() for v in th0])
        hat = {k: v.reshape(w.shape) for k, v, w in zip(names, parts, th0)}
        total = nn.functional.cross_entropy(server(torch.cat(Hh, 1)), y)
        for m in range(M):
            Z = torch.cat([H[j] if j == m else Hh[j] for j in range(M)], 1)
            total = total + nn.functional.cross_entropy(functional_call(server, hat, (Z,)), y)
        grads = torch.autograd.grad(total, [q for b in blocks for q in b])
        k = 0
        for m, n in enumerate(sizes):
            out[d, m] = float(
                sum(((g - g0) ** 2).sum() for g, g0 in zip(grads[k : k + n], exact[k : k + n]))
            )
            k += n
    return out


def _tiny_model(seed: int) -> tuple[list[nn.Module], nn.Module, list[torch.Tensor], torch.Tensor]:
    """Two MLP parties (D = 5, 4 -> P = 4), a linear head with 3 classes, B = 16, float64."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    parties: list[nn.Module] = [
        nn.Sequential(nn.Linear(d, 8), nn.Tanh(), nn.Linear(8, 4)).double() for d in (5, 4)
    ]
    server = nn.Linear(8, 3).double()
    with torch.no_grad():
        server.weight.mul_(3.0)  # curvature that makes the remainder visible at 2 bits
    xs = [torch.randn(16, d, generator=gen, dtype=torch.float64) for d in (5, 4)]
    y = torch.randint(0, 3, (16,), generator=gen)
    return parties, server, xs, y


def check() -> CheckResult:
    sym_quad = _quadratic_form_identities()
    moments = _dither_moments()
    wj, wc, wl = _softmax_constants()

    parties, server, xs, y = _tiny_model(3)
    comps: list[Comparison] = []
    ratios: list[float] = []
    worst_margin = math.inf  # min over blocks of (bound - (mean - 5 SE)) / mean
    # the last case compresses only the server model: the parties' blocks then see one error
    # shared by all samples (coherent, no 1/B gain) -- the case that tells the two apart
    cases = [
        (name, bits, cls(bits), cls(bits))
        for name, cls in (("scalar", ScalarQuantizer), ("hex", HexLatticeQuantizer))
        for bits in (2, 4)
    ] + [("server-only scalar", 6, Identity(64), ScalarQuantizer(6))]
    for name, bits, c, c0 in cases:
        r = tight_lemma1_bound_for(parties, server, xs, y, c, c0)
        mc = measured_lemma1(parties, server, xs, y, c, c0, DRAWS, seed=11 + bits)
        mean, se = mc.mean(axis=0), mc.std(axis=0, ddof=1) / math.sqrt(DRAWS)
        for m in range(len(mean)):
            comps.append(
                Comparison(
                    f"{name} b={bits} block {m}: bound >= MC - 5 SE",
                    float(r.bound[m]),
                    float(mean[m]),
                    Z_SE * float(se[m]),
                    ">=",
                )
            )
            if mean[m] > 0:  # (block 0 sees no error in the server-only case)
                margin = (r.bound[m] - mean[m] + Z_SE * se[m]) / mean[m]
                worst_margin = min(worst_margin, margin)
                ratios.append(float(r.bound[m] / mean[m]))
        # reverse Minkowski: sqrt(E||D||^2) >= sqrt(F) - sqrt(R); the first-order term
        # cannot exceed the truth by more than the remainder bound
        lower = (np.sqrt(r.first_order) - np.sqrt(r.remainder)).clip(min=0.0) ** 2
        comps.append(
            Comparison(
                f"{name} b={bits}: max over blocks of (sqrt F - sqrt R)^2 - (MC + 5 SE)",
                float(np.max(lower - mean - Z_SE * se)),
                0.0,
                0.0,
                "<=",
            )
        )
    for k, v in moments.items():
        comps.append(Comparison(f"sympy: {k}", float(bool(v)), 1.0, 0.0))
    for law, exact in (("scalar", SUBGAUSSIAN_FOURTH_S), ("hex", SUBGAUSSIAN_FOURTH_H)):
        comps.append(
            Comparison(
                f"package SUBGAUSSIAN_FOURTH[{law}] vs sympy",
                SUBGAUSSIAN_FOURTH[law],
                float(exact),
                1e-15,
            )
        )
    comps.append(Comparison("||J_p|| / (1/2), worst of 240 points", wj, 1.0, 1e-12, "<="))
    comps.append(Comparison("||d2 p[v,v]|| / (|v|^2/sqrt2), worst", wc, 1.0, 1e-12, "<="))
    comps.append(Comparison("local constants on a ball, worst ratio", wl, 1.0, 1e-12, "<="))
    med = float(np.median(ratios))
    return CheckResult(
        label="C4.5",
        claim="(ours) E||grad_m F_B(Phi)-grad_m F_B(Phi^)||^2 <= (sqrt(first order)+sqrt(rem))^2 "
        "for dithered quantizers; median bound/measured <= 10",
        method="sympy: quadratic-form expectation (coherent server error), dither moments by "
        "integration; autograd: softmax constants at random points; float64 Monte Carlo "
        f"({DRAWS} draws) with the package's scalar and hex quantizers at b = 2, 4",
        symbolic=sym_quad and all(moments.values()),
        empirical=med,
        theoretical=10.0,
        tolerance=0.0,
        relation="<=",
        note=f"tiny model: median bound/measured {med:.3g} (min {min(ratios):.3g}, max "
        f"{max(ratios):.3g}); worst margin (bound - MC + 5 SE)/MC = {worst_margin:.3g}",
        comparisons=tuple(comps),
    )
