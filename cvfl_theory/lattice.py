r"""The hexagonal :math:`A_2` lattice: exact nearest point, Voronoi cell, and box codebooks (C5.2, C5.3).

The lattice with minimum distance :math:`a` is :math:`\Lambda_a = \{i b_1 + j b_2\}` with
:math:`b_1 = a(1, 0)`, :math:`b_2 = a(1/2, \sqrt3/2)`; its Voronoi cell :math:`V_0` is a hexagon
with inradius :math:`a/2`, circumradius :math:`a/\sqrt3` and area
:math:`V = \sqrt3 a^2/2`, whose second moment per 2-vector is :math:`5V/(18\sqrt3)`
(normalised second moment :math:`G = 5/(36\sqrt3)`).

Nearest point (two-coset method): :math:`\Lambda_a` is the union of the rectangular lattice
:math:`a(\mathbb{Z} \times \sqrt3\mathbb{Z})` and its translate by :math:`b_2`; the nearest point
of each coset is found by rounding each coordinate, and the closer of the two is the nearest
lattice point (Conway & Sloane, *SPLAG*, ch. 20).

Examples
--------
>>> import numpy as np
>>> i, j = a2_nearest(np.array([0.9, 0.3]), np.array([0.8, -0.1]), a=1.0)
>>> i.astype(int).tolist(), j.astype(int).tolist()
([0, 0], [1, 0])
>>> cb = A2BoxCodebook.for_bits(2)
>>> cb.size <= 16
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from . import _kernels
from ._validate import as_float_array, check_bool, check_choice, check_int_in_range, check_real

__all__ = [
    "SQRT3",
    "a2_nearest",
    "nearest_scaled",
    "a2_point",
    "cell_area",
    "second_moment_per_pair",
    "A2BoxCodebook",
]

SQRT3 = math.sqrt(3.0)
#: Most rows a box codebook may span (bounds the work and memory of a tiny lattice scale).
_MAX_ROWS = 1 << 20


def _check_a(a: float) -> float:
    return check_real(a, "a (lattice minimum distance)", 0.0, low_open=True)


def _coords(v: object, name: str) -> np.ndarray:
    return as_float_array(v, name, ndims=tuple(range(33)))


def cell_area(a: float) -> float:
    r"""Voronoi cell area :math:`V = \sqrt3 a^2 / 2` of :math:`\Lambda_a`."""
    a = _check_a(a)
    return SQRT3 * a * a / 2.0


def second_moment_per_pair(V: float) -> float:
    r"""Exact :math:`\mathbb{E}\|u\|^2 = 5V/(18\sqrt3)` for :math:`u` uniform on the cell (C5.2)."""
    return 5.0 * check_real(V, "V (cell area)", 0.0) / (18.0 * SQRT3)


def a2_nearest(x: np.ndarray, y: np.ndarray, a: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Lattice coordinates ``(i, j)`` of the point of :math:`\Lambda_a` nearest to ``(x, y)``.

    Parameters
    ----------
    x, y : numpy.ndarray
        Coordinates (same shape).
    a : float
        Minimum distance of the lattice.

    Returns
    -------
    i, j : numpy.ndarray of float64
        Integer-valued coordinates: the point is :math:`i b_1 + j b_2`. Ties (points equidistant
        from two lattice points, a null set) go to the rectangular coset.
    """
    a = _check_a(a)
    X = np.multiply(_coords(x, "x"), 1.0 / a, dtype=np.float64)
    Y = np.multiply(_coords(y, "y"), 1.0 / (a * SQRT3), dtype=np.float64)
    return nearest_scaled(X, Y)


def nearest_scaled(X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r""":func:`a2_nearest` on scaled coordinates :math:`X = x/a`, :math:`Y = y/(\sqrt3 a)`.

    The compiled kernel the hexagonal quantizer runs (:mod:`cvfl_theory._kernels`): the nearest
    point of each coset by rounding (half to even), the closer of the two kept (ties to the
    rectangular coset). Returns float64 ``(i, j)`` of the shape of ``X``.
    """
    X, Y = _coords(X, "X"), _coords(Y, "Y")
    try:
        Y = np.ascontiguousarray(np.broadcast_to(Y, X.shape))
    except ValueError:
        raise ValueError(
            f"Y of shape {Y.shape} does not broadcast to X's shape {X.shape}"
        ) from None
    i, j = np.empty(X.shape), np.empty(X.shape)
    _kernels.a2_nearest(X, Y, X.size, i, j)
    return i, j


def a2_point(i: np.ndarray, j: np.ndarray, a: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Cartesian coordinates :math:`a(i + j/2,\ j\sqrt3/2)` of the lattice point ``(i, j)``."""
    a = _check_a(a)
    i, j = _coords(i, "i"), _coords(j, "j")
    return a * (i + 0.5 * j), a * (SQRT3 / 2.0) * j


def _row_ranges(
    a: float, half: float, widen: int = 2, eps: float = 1e-9
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Rows ``j`` and column ranges ``[imin, imax]`` of :math:`\Lambda_a \cap (R \oplus fV_0)`.

    :math:`R = [-h, h]^2` with ``h = half`` and :math:`f` = ``widen`` (2 with dither, 1 without).
    The slice of :math:`R \oplus fV_0` at height :math:`y` is :math:`[-h - W, h + W]` where
    :math:`W = w(d^*)`, :math:`d^*` is the point of :math:`[y - h, y + h]` closest to 0 and
    :math:`w(d) = fa/2` for :math:`|d| \le fa/(2\sqrt3)`, :math:`fa - \sqrt3|d|` up to
    :math:`|d| = fa/\sqrt3` (half-width of the hexagon :math:`fV_0` at height :math:`d`).
    Boundaries are included with a relative slack ``eps`` (a superset is always safe).
    """
    a = _check_a(a)
    half = check_real(half, "half", 0.0, low_open=True)
    f = float(check_choice(widen, "widen", (1, 2)))
    rmax = f * a / SQRT3
    ystep = a * SQRT3 / 2.0
    rows = (half + rmax) / ystep * (1 + eps) + eps
    if not rows <= _MAX_ROWS:
        raise ValueError(
            f"a = {a:g} is too small for half = {half:g}: the codebook would span {rows:.3g} rows "
            f"of lattice points (at most {_MAX_ROWS}); use a >= {2.4 * half / _MAX_ROWS:.3g}"
        )
    jmax = math.floor(rows)
    j = np.arange(-jmax, jmax + 1, dtype=np.float64)
    y = j * ystep
    d = np.clip(0.0, y - half, y + half)
    ad = np.abs(d)
    keep = ad <= rmax * (1 + eps) + eps
    W = np.where(ad <= f * a / (2 * SQRT3), f * a / 2, np.maximum(f * a - SQRT3 * ad, 0.0))
    lo = (-half - W) / a - 0.5 * j
    hi = (half + W) / a - 0.5 * j
    imin = np.ceil(lo - eps * (1 + np.abs(lo)))
    imax = np.floor(hi + eps * (1 + np.abs(hi)))
    keep &= imax >= imin
    return j[keep], imin[keep], imax[keep]


def box_codebook_count(a: float, half: float = 0.5, widen: int = 2) -> int:
    r"""Number of points of :math:`\Lambda_a` needed for the box :math:`[-h, h]^2` (C5.3).

    ``widen=2`` with dither (:math:`R \oplus 2V_0`), ``1`` without (:math:`R \oplus V_0`).
    """
    _, imin, imax = _row_ranges(a, half, widen)
    return int(np.sum(imax - imin + 1))


@dataclass(frozen=True, eq=False)
class A2BoxCodebook:
    r"""The codebook of a dithered :math:`A_2` quantizer on the box :math:`[-1/2, 1/2]^2` (C5.3).

    With subtractive dither :math:`u \in V_0` the quantizer sees :math:`z = x + u \in R \oplus
    V_0`, so the reachable codewords are exactly :math:`\Lambda_a \cap (R \oplus 2V_0)` (up to the
    cell boundaries, which are included). :meth:`for_bits` picks the smallest :math:`a` (i.e.
    the smallest cell area :math:`V`, the finest lattice) whose codebook has at most
    :math:`2^{2b}` points, by bisection on :math:`a` with the count computed exactly at each step;
    since lattice-point counts are not monotone in :math:`a`, the result is the bisection
    boundary, moved outwards by a relative 1e-7 so no codeword sits within round-off of the
    region's boundary (the count is verified :math:`\le 2^{2b}` at the returned :math:`a`).

    Attributes
    ----------
    a : float
        Minimum distance (in units of the box side).
    rows : numpy.ndarray
        Row indices ``j``.
    imin, imax : numpy.ndarray
        Column range of each row.
    """

    a: float
    rows: np.ndarray
    imin: np.ndarray
    imax: np.ndarray
    widen: int = 2

    @classmethod
    def for_lattice(cls, a: float, widen: int = 2) -> A2BoxCodebook:
        r"""The codebook of :math:`\Lambda_a` for the unit box (``widen=2``: dithered)."""
        j, imin, imax = _row_ranges(a, 0.5, widen)
        return cls(a, j, imin, imax, widen)

    @staticmethod
    def for_bits(bits: int, dither: bool = True) -> A2BoxCodebook:
        r"""Finest codebook with at most :math:`2^{2\,\mathrm{bits}}` points (C5.3).

        ``bits`` is an integer in ``[1, 8]`` and ``dither`` a bool (validated before the cache).
        See :meth:`_for_bits`.
        """
        bits = check_int_in_range(bits, "bits", 1, 8)
        return A2BoxCodebook._for_bits(bits, check_bool(dither, "dither"))

    @staticmethod
    @cache
    def _for_bits(bits: int, dither: bool = True) -> A2BoxCodebook:
        r"""Finest codebook with at most :math:`2^{2\,\mathrm{bits}}` points (C5.3).

        Raises
        ------
        ValueError
            If no lattice scale fits. With dither and the lattice centred on the box (as here),
            the region :math:`R \oplus 2V_0` always contains the centre and its 6 neighbours
            (they lie on the boundary of :math:`2V_0` and :math:`R` has interior), so at least
            7 codewords are needed and ``bits = 1`` (4 codewords) is impossible. (With another
            offset 4 can suffice, but only when the box is negligible against the cell, i.e.
            an error far above the 1-bit scalar quantizer's.)
        """
        widen = 2 if dither else 1
        limit = 1 << (2 * bits)
        hi = 1.0
        while box_codebook_count(hi, 0.5, widen) > limit:
            hi *= 2.0
            if hi > 1e6:
                least = box_codebook_count(hi, 0.5, widen)
                raise ValueError(
                    f"bits={bits} gives {limit} codewords per pair, but a "
                    f"{'dithered ' if dither else ''}hexagonal quantizer needs at least {least}; "
                    f"use bits >= 2{'' if dither else ''} or dither=False"
                )
        lo = hi
        while box_codebook_count(lo, 0.5, widen) <= limit:
            lo /= 2.0
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if box_codebook_count(mid, 0.5, widen) <= limit:
                hi = mid
            else:
                lo = mid
        # Step 1e-7 (relative) past the bisection boundary so that no lattice point lies within
        # round-off of the region's boundary: membership is then unambiguous.
        safe = hi * (1.0 + 1e-7)
        if box_codebook_count(safe, 0.5, widen) <= limit:
            hi = safe
        return A2BoxCodebook.for_lattice(hi, widen)

    @property
    def size(self) -> int:
        """Number of codewords."""
        return int(np.sum(self.imax - self.imin + 1))

    @property
    def index_bits(self) -> int:
        r""":math:`\lceil \log_2 (\text{size}) \rceil` bits per codeword index."""
        return (self.size - 1).bit_length()

    @property
    def cell_area(self) -> float:
        """Cell area in units of the squared box side."""
        return cell_area(self.a)

    @property
    def _starts(self) -> np.ndarray:
        counts = (self.imax - self.imin + 1).astype(np.int64)
        return np.concatenate([[0], np.cumsum(counts)[:-1]])

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """Cartesian coordinates of every codeword, in index order."""
        return codebook_tables(self)[2:]

    def index_of(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Codeword index of lattice points ``(i, j)`` (clamped into the codebook)."""
        lut, (j0, i0) = codebook_tables(self)[:2]
        rows, width = lut.shape
        jj = np.subtract(j, j0)
        np.clip(jj, 0, rows - 1, out=jj)
        ii = np.subtract(i, i0)
        np.clip(ii, 0, width - 1, out=ii)
        jj *= width
        jj += ii
        return np.take(lut.ravel(), jj.astype(np.intp))


@lru_cache(maxsize=64)
def codebook_tables(
    cb: A2BoxCodebook,
) -> tuple[np.ndarray, tuple[float, float], np.ndarray, np.ndarray]:
    """``(2-D index lookup table, its origin (j0, i0), x of codewords, y of codewords)``."""
    starts = cb._starts
    i0 = float(cb.imin.min())
    width = int(cb.imax.max() - i0) + 1
    cols = np.arange(width, dtype=np.float64) + i0
    clamped = np.clip(cols[None, :], cb.imin[:, None], cb.imax[:, None])
    lut = (starts[:, None] + (clamped - cb.imin[:, None])).astype(np.int64)
    counts = (cb.imax - cb.imin + 1).astype(np.int64)
    row_of = np.repeat(np.arange(cb.rows.size), counts)
    i_all = cb.imin[row_of] + (np.arange(int(counts.sum())) - starts[row_of])
    px, py = a2_point(i_all, cb.rows[row_of], cb.a)
    return lut, (float(cb.rows[0]), i0), px, py
