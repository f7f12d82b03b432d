"""C5.3: the package's A2 lattice is the finest whose dithered codebook has <= 2^(2b) points.

An independent search written here: for the unit range box R = [-1/2, 1/2]^2 and the lattice
a(i + j/2, j sqrt3/2), count by brute force the lattice points of R + f V_0 (f = 2 with dither,
1 without; V_0 the Voronoi hexagon, inradius a/2) by the support functions of the Minkowski sum,
then check that the package's chosen minimum distance a (``HexLatticeQuantizer(b).codebook``)
gives at most 2^(2b) codewords while the next finer lattice, a (1 - 1e-6), exceeds 2^(2b).
In lattice units the region is R/a + f V_0, which grows as a shrinks, so the count is monotone
in a and a (1 - 1e-6) exceeding the budget means every finer lattice does.
"""

import math

import numpy as np

from cvfl_theory.compressors import HexLatticeQuantizer

from .result import CheckResult, Comparison

#: Relative step to the next finer lattice.
STEP = 1e-6


def count_points(a: float, widen: int, tol: float = 1e-9) -> int:
    """Points a(i + j/2, j sqrt3/2) of [-1/2, 1/2]^2 + widen V_0, counted by brute force."""
    s3 = math.sqrt(3)
    rmax = widen * a / s3  # circumradius of widen V_0
    jmax = math.ceil((0.5 + rmax) / (a * s3 / 2)) + 1
    imax = math.ceil((0.5 + rmax) / a + jmax / 2) + 1
    i, j = np.meshgrid(np.arange(-imax, imax + 1), np.arange(-jmax, jmax + 1))
    x, y = a * (i + j / 2), a * (s3 / 2) * j
    inside = np.ones(x.shape, bool)
    # edge normals of the box (0, 90 deg) and of the hexagon (0, 60, 120 deg); support function
    # of the sum = box's + hexagon's (the hexagon's vertices are at 30 + 60k deg, radius rmax)
    verts = [
        rmax * np.array([math.cos(t), math.sin(t)]) for t in np.deg2rad(30 + 60 * np.arange(6))
    ]
    for deg in (0, 60, 90, 120):
        n = np.array([math.cos(math.radians(deg)), math.sin(math.radians(deg))])
        h = 0.5 * (abs(n[0]) + abs(n[1])) + max(float(v @ n) for v in verts)
        inside &= np.abs(x * n[0] + y * n[1]) <= h + tol
    return int(np.count_nonzero(inside))


def check() -> CheckResult:
    worst = 0.0
    comparisons = []
    settings = [(b, True) for b in range(2, 9)] + [(b, False) for b in range(1, 9)]
    for bits, dither in settings:
        quant = HexLatticeQuantizer(bits, range=(0.0, 1.0), dither=dither)
        a = quant.codebook.a
        widen = 2 if dither else 1
        limit = 4**bits
        count = count_points(a, widen)
        finer = count_points(a * (1 - STEP), widen)
        worst = max(worst, count / limit)
        tag = f"b={bits}{'' if dither else ' no dither'}"
        comparisons += [
            Comparison(f"{tag}: next finer lattice's count", finer, limit + 1, 0.0, ">="),
            Comparison(f"{tag}: codebook size vs count", quant.codebook_size, count, 0.0),
            Comparison(
                f"{tag}: cell area vs sqrt3 a^2/2",
                float(quant.cell_area or 0.0),
                math.sqrt(3) / 2 * a * a,
                1e-12,
            ),
        ]
    sizes = ", ".join(
        f"b={b}: {HexLatticeQuantizer(b, range=(0.0, 1.0)).codebook_size}" for b in range(2, 9)
    )
    return CheckResult(
        label="C5.3",
        claim="the chosen A2 lattice is the finest with <= 2^(2b) codewords for the range box "
        "(dithered b = 2..8, plain b = 1..8)",
        method="independent brute-force count of lattice points of R + 2V_0 (R + V_0 without "
        "dither) at the package's a (<= 2^(2b)) and at a (1 - 1e-6) (> 2^(2b))",
        symbolic=None,
        empirical=worst,
        theoretical=1.0,
        tolerance=0.0,
        relation="<=",
        note=f"codebook sizes {sizes}. The recovered statement of C5.3 asks for 'the largest V'; it must be the "
        "smallest V (finest lattice) within the budget (every V beyond some point is admissible). "
        "b = 1 is impossible with dither and the lattice centred on the box: box + 2V0 always "
        "holds the centre and its 6 neighbours, 7 > 2^2 codewords",
        comparisons=tuple(comparisons),
    )
