"""C5.2: dithered A2 lattice error is uniform on the hexagon, E|u|^2 = 5V/(18 sqrt 3) per pair,
i.e. 5V/(36 sqrt 3) per component.

Three independent pieces: (a) sympy integrates |u|^2 over the hexagon; (b) the check's own
dithered lattice quantizer (numpy, written here: dither u = w - Q(w) with w uniform in the
fundamental rhombus, Q the nearest of the rhombus' four corners) is simulated on the lattice of
the package's cell size (C5.3 checks that size); (c) the package's
``HexLatticeQuantizer.expected_error`` and ``published_bound`` are evaluated for several bits,
fixed and min-max ranges and shapes (odd P included), and compared with the simulation, with the
law written out here and with the package compressor's own measured error (5 SE).
"""

import math

import numpy as np
import sympy as sp

from cvfl_theory.compressors import HexLatticeQuantizer

from ._common import Z_SE, mean_and_se, quantizer_comparisons, setting_data
from .result import CheckResult

#: (bits, range, (B, P)) settings; data are drawn inside a fixed range (no clipping).
SETTINGS = [
    (3, (-1.0, 1.0), (40, 50)),
    (2, (0.0, 3.0), (7, 13)),
    (5, "minmax-row", (20, 31)),
    (4, "minmax-tensor", (10, 24)),
]


def symbolic() -> tuple[bool, sp.Expr]:
    """The hexagon of circumradius R is 6 equilateral triangles around the centre: integrate
    |u|^2 over one (vertices 0, (R, 0), (R/2, sqrt3 R/2)) and multiply by 6. Returns the
    verdict and the per-component constant E u_1^2 / V."""
    x, y, R = sp.symbols("x y R", positive=True)
    s3 = sp.sqrt(3)
    tri = sp.integrate(sp.integrate(x**2 + y**2, (y, 0, s3 * x)), (x, 0, R / 2)) + sp.integrate(
        sp.integrate(x**2 + y**2, (y, 0, s3 * (R - x))), (x, R / 2, R)
    )
    V = 3 * s3 / 2 * R**2
    per_pair = 6 * tri / V
    ratio_to_published = (per_pair / 2) / (V / 24)
    ok = (
        sp.simplify(per_pair - 5 * V / (18 * s3)) == 0
        and sp.simplify(ratio_to_published - 10 / (3 * s3)) == 0
    )
    return bool(ok), sp.simplify(per_pair / 2 / V)


def _nearest(px: np.ndarray, py: np.ndarray, a: float) -> tuple[np.ndarray, np.ndarray]:
    """Nearest point of the lattice a(i + j/2, j sqrt3/2): the closest corner of the rhombus
    holding the point (its two equilateral triangles are covered by their corners' cells)."""
    j = py / (a * math.sqrt(3) / 2)
    i = px / a - j / 2
    i0, j0 = np.floor(i), np.floor(j)
    best = np.full(px.shape, np.inf)
    qx, qy = np.zeros_like(px), np.zeros_like(py)
    for di in (0, 1):
        for dj in (0, 1):
            cx = a * (i0 + di + (j0 + dj) / 2)
            cy = a * (math.sqrt(3) / 2) * (j0 + dj)
            dist = (px - cx) ** 2 + (py - cy) ** 2
            closer = dist < best
            best = np.where(closer, dist, best)
            qx, qy = np.where(closer, cx, qx), np.where(closer, cy, qy)
    return qx, qy


def own_dithered_hex(
    x: np.ndarray, lo: np.ndarray, hi: np.ndarray, a_unit: float, trials: int, seed: int
) -> np.ndarray:
    """Per-trial total squared error of a dithered A2 quantizer written here (numpy).

    Row b uses minimum distance ``a_unit * (hi_b - lo_b)``, the lattice centred on the row's
    box; an odd P is padded by one component whose error is not counted.
    """
    B, P = x.shape
    xp = np.concatenate([x, (lo + hi) / 2], axis=1) if P % 2 else x
    mid = (lo + hi) / 2
    hx, hy = xp[:, 0::2] - mid, xp[:, 1::2] - mid
    a = a_unit * (hi - lo)  # (B, 1)
    gen = np.random.default_rng(seed)
    al, be = gen.uniform(size=(2, trials, *hx.shape))
    wx, wy = a * (al + be / 2), a * (math.sqrt(3) / 2) * be
    nx, ny = _nearest(wx, wy, a)
    ux, uy = wx - nx, wy - ny  # uniform on the Voronoi cell
    qx, qy = _nearest(hx + ux, hy + uy, a)
    ex, ey = qx - ux - hx, qy - uy - hy
    if P % 2:
        ey[..., -1] = 0.0
    return np.sum(ex**2 + ey**2, axis=(1, 2))


def check(trials: int = 200) -> CheckResult:
    ok, constant = symbolic()
    comparisons = []
    main = None
    for s, (bits, rng_spec, shape) in enumerate(SETTINGS):
        x, lo, hi = setting_data(400 + s, rng_spec, shape)
        P = shape[1]
        quant = HexLatticeQuantizer(bits, range=rng_spec)
        a_unit = quant.codebook.a  # minimum distance for the unit box (C5.3 checks it)
        areas = (math.sqrt(3) / 2 * (a_unit * (hi - lo)) ** 2).ravel()  # V_b in data units
        own = own_dithered_hex(x, lo, hi, a_unit, trials, seed=500 + s)
        exact = float(P * np.sum(areas) * float(constant))
        published = float(P * np.sum(areas) / 24)
        comparisons += quantizer_comparisons(
            f"b={bits} {rng_spec} {shape}", quant, x, own, exact, published, trials, 600 + s
        )
        if main is None:  # the first setting, per component and in units of V
            main = mean_and_se(own / (x.size * float(areas[0])))
    assert main is not None
    exact_c = float(constant)
    return CheckResult(
        label="C5.2",
        claim="dithered hexagonal lattice: E|err|^2 = 5V/(18 sqrt 3) per pair "
        "(= 5V/(36 sqrt 3) = 0.0802 V per component)",
        method="sympy integral of |u|^2 over the hexagon (6 triangles); own numpy dithered A2 "
        f"quantizer ({trials} dithers) vs HexLatticeQuantizer.expected_error / published_bound "
        f"/ measured error for b = 2, 3, 4, 5, fixed and min-max ranges, odd P; {Z_SE:g} SE",
        symbolic=ok,
        empirical=main[0],
        theoretical=exact_c,
        tolerance=Z_SE * main[1],
        note=f"the published bound V B P/24 is V/24 = {1 / 24:.4f} V per component; the exact "
        f"value is {exact_c:.4f} V, i.e. 10/(3 sqrt 3) = {10 / (3 * math.sqrt(3)):.3f}x the "
        "published one: the paper's lattice bound is too small by a factor ~1.92",
        comparisons=tuple(comparisons),
    )
