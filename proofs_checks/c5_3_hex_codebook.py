"""C5.3: the dithered A2 codebook covering the range box has at most 2^(2b) points."""

import math

import numpy as np

from cvfl_theory.lattice import A2BoxCodebook, a2_point

from .result import CheckResult


def _count_by_separating_axes(a: float, widen: int) -> int:
    """Lattice points p with (p - widen*V0) meeting the box [-1/2, 1/2]^2 (separating axes)."""
    n = int(3 / a) + 6
    ii, jj = np.meshgrid(np.arange(-n, n + 1), np.arange(-n, n + 1))
    px, py = a2_point(ii.ravel(), jj.ravel(), a)
    # hexagon widen*V0: inradius widen*a/2 (edge normals at 0, 60, 120 deg), vertices at
    # radius widen*a/sqrt3 at 30 + 60k degrees
    ang = np.deg2rad(30 + 60 * np.arange(6))
    vx, vy = widen * a / math.sqrt(3) * np.cos(ang), widen * a / math.sqrt(3) * np.sin(ang)
    box = np.array([[-0.5, -0.5], [-0.5, 0.5], [0.5, -0.5], [0.5, 0.5]])
    axes = [(1.0, 0.0), (0.0, 1.0)] + [
        (math.cos(t), math.sin(t)) for t in (0, math.pi / 3, 2 * math.pi / 3)
    ]
    ok = np.ones(px.size, bool)
    tol = 1e-9
    for nx, ny in axes:
        bproj = box @ [nx, ny]
        h = np.max(vx * nx + vy * ny)
        c = px * nx + py * ny
        ok &= (c + h >= bproj.min() - tol) & (c - h <= bproj.max() + tol)
    return int(np.count_nonzero(ok))


def check() -> CheckResult:
    worst = 0.0
    mismatches = []
    for bits, dither in [(b, True) for b in range(2, 9)] + [(b, False) for b in range(1, 9)]:
        cb = A2BoxCodebook.for_bits(bits, dither)
        count = _count_by_separating_axes(cb.a, 2 if dither else 1)
        if count != cb.size:
            mismatches.append((bits, dither, count, cb.size))
        worst = max(worst, count / 4**bits)
    sizes = ", ".join(f"b={b}: {A2BoxCodebook.for_bits(b).size}" for b in range(2, 9))
    return CheckResult(
        label="C5.3",
        claim="the A2 codebook for the range box has <= 2^(2b) codewords (dithered b = 2..8, "
        "plain b = 1..8)",
        method="exact enumeration of lattice points meeting box + 2V0 by the separating-axis "
        "test, compared with the codebook built by row intervals",
        symbolic=None,
        empirical=float("inf") if mismatches else worst,
        theoretical=1.0,
        tolerance=0.0,
        relation="<=",
        note=f"codebook sizes {sizes}. THEORY C5.3 says 'the largest V'; it must be the "
        "smallest V (finest lattice) within the budget (every V beyond some point is admissible). "
        "b = 1 is impossible with dither and the lattice centred on the box: box + 2V0 always "
        "holds the centre and its 6 neighbours, 7 > 2^2 codewords"
        + (f"; MISMATCHES {mismatches}" if mismatches else ""),
    )
