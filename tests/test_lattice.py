"""A2 lattice: nearest point vs brute force, codebook counts vs an LP membership test (C5.2, C5.3)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import linprog

from cvfl_theory.lattice import (
    A2BoxCodebook,
    a2_nearest,
    a2_point,
    box_codebook_count,
    cell_area,
    second_moment_per_pair,
)

S3 = math.sqrt(3.0)


def brute_nearest_dist2(x, y, a, radius=4):
    """Min squared distance to lattice points i*b1 + j*b2 in a window around (x, y)."""
    j0 = np.rint(y / (a * S3 / 2))
    i0 = np.rint(x / a - j0 / 2)
    d = np.arange(-radius, radius + 1)
    ii = i0[:, None, None] + d[None, :, None]
    jj = j0[:, None, None] + d[None, None, :]
    px = a * (ii + jj / 2)
    py = a * S3 / 2 * jj
    d2 = (px - x[:, None, None]) ** 2 + (py - y[:, None, None]) ** 2
    return d2.reshape(x.size, -1).min(axis=1)


def test_nearest_point_matches_brute_force():
    rng = np.random.default_rng(1)
    for a in (0.37, 1.0, 2.5):
        x = rng.uniform(-20, 20, 5000)
        y = rng.uniform(-20, 20, 5000)
        i, j = a2_nearest(x, y, a)
        assert np.all(i == np.rint(i)) and np.all(j == np.rint(j))
        px, py = a2_point(i, j, a)
        got = (px - x) ** 2 + (py - y) ** 2
        np.testing.assert_allclose(got, brute_nearest_dist2(x, y, a), rtol=1e-12, atol=1e-12)
        # covering radius of A2 is a / sqrt(3)
        assert got.max() <= a * a / 3 * (1 + 1e-12)


@given(
    st.floats(-1e3, 1e3, allow_nan=False),
    st.floats(-1e3, 1e3, allow_nan=False),
    st.floats(0.01, 10.0),
)
def test_nearest_point_property(x, y, a):
    xs, ys = np.array([x]), np.array([y])
    i, j = a2_nearest(xs, ys, a)
    px, py = a2_point(i, j, a)
    got = (px - xs) ** 2 + (py - ys) ** 2
    assert got[0] <= brute_nearest_dist2(xs, ys, a)[0] * (1 + 1e-9) + 1e-9 * a * a


def in_box_plus_hexagon(px, py, a, widen, half=0.5, slack=0.0):
    """LP: is (px, py) in [-h, h]^2 + widen * V0?  V0 = {v: |v . n_k| <= a/2}, n_k at 0, 60, 120."""
    normals = np.array([[math.cos(t), math.sin(t)] for t in (0, math.pi / 3, 2 * math.pi / 3)])
    # find r in the box with |(p - r) . n_k| <= bound:
    # (p - r).n <= bound <=> -n.r <= bound - n.p ;  -(p - r).n <= bound <=> n.r <= bound + n.p
    bound = widen * a / 2 + slack
    A_ub = np.vstack([-normals, normals])
    b_ub = np.concatenate([bound - normals @ [px, py], bound + normals @ [px, py]])
    res = linprog(np.zeros(2), A_ub=A_ub, b_ub=b_ub, bounds=[(-half, half)] * 2, method="highs")
    return res.status == 0


@pytest.mark.parametrize("bits,dither", [(2, True), (3, True), (1, False), (2, False), (3, False)])
def test_codebook_equals_lp_membership(bits, dither):
    cb = A2BoxCodebook.for_bits(bits, dither)
    widen = 2 if dither else 1
    a = cb.a
    pts = set(zip(*(np.round(v, 9) for v in cb.points())))
    assert len(pts) == cb.size <= 4**bits
    # enumerate a generous window of lattice points and classify them independently
    n = int(3 / a) + 6
    ii, jj = np.meshgrid(np.arange(-n, n + 1), np.arange(-n, n + 1))
    px, py = a2_point(ii.ravel(), jj.ravel(), a)
    reach = 0.5 + widen * a / S3 + 1e-6  # circumradius of widen * V0 bounds the region
    near = (np.abs(px) <= reach) & (np.abs(py) <= reach)
    assert all(k in {(round(x, 9), round(y, 9)) for x, y in zip(px[near], py[near])} for k in pts)
    for x, y in zip(px[near], py[near]):
        key = (round(x, 9), round(y, 9))
        if in_box_plus_hexagon(x, y, a, widen, slack=-1e-7):  # strictly inside: must be there
            assert key in pts
        if key in pts:  # in the codebook: must be inside up to round-off
            assert in_box_plus_hexagon(x, y, a, widen, slack=1e-7)


@pytest.mark.parametrize("bits", range(2, 9))
def test_codebook_sizes_fit_the_bit_budget(bits):
    cb = A2BoxCodebook.for_bits(bits)
    assert cb.size <= 4**bits
    assert cb.index_bits <= 2 * bits
    assert cb.size == box_codebook_count(cb.a)
    # the index map is a bijection onto 0..size-1
    px, py = cb.points()
    i, j = a2_nearest(px, py, cb.a)
    np.testing.assert_array_equal(cb.index_of(i, j), np.arange(cb.size))


def test_reachable_codewords_are_in_codebook():
    """Monte Carlo: Q(x + u) for x in the box and u uniform on the cell is always a codeword."""
    rng = np.random.default_rng(7)
    for bits in (2, 4):
        cb = A2BoxCodebook.for_bits(bits)
        a = cb.a
        n = 200_000
        x, y = rng.uniform(-0.5, 0.5, (2, n))
        al, be = rng.uniform(size=(2, n))
        zx, zy = a * (al + be / 2), a * S3 / 2 * be
        qi, qj = a2_nearest(zx, zy, a)
        qx, qy = a2_point(qi, qj, a)
        i, j = a2_nearest(x + zx - qx, y + zy - qy, a)
        idx = cb.index_of(i, j)
        cx, cy = cb.points()
        px, py = a2_point(i, j, a)
        np.testing.assert_allclose(cx[idx], px, atol=1e-12)
        np.testing.assert_allclose(cy[idx], py, atol=1e-12)


def test_one_bit_dithered_is_impossible():
    with pytest.raises(ValueError, match="at least 7"):
        A2BoxCodebook.for_bits(1, True)


def test_cell_area_and_second_moment():
    assert cell_area(2.0) == pytest.approx(2 * S3)
    assert second_moment_per_pair(1.0) == pytest.approx(5 / (18 * S3))
