r"""The hexagonal quantizer's nearest point, bit for bit, on inputs built to sit on its ties.

What is tested
--------------
:class:`~cvfl_theory.compressors.HexLatticeQuantizer` sends, per pair of a row, the index of the
lattice point nearest to the dithered pair (C5.2, C5.3). Its message is *defined* by a
fixed sequence of float64 operations (IEEE, no FMA): the unit-box coordinates
``X = max((v - l) s - 1/2, -1/2)`` of the row range ``[l, h]`` (``s = 1/(h - l)``), the scaled
coordinates ``x = (X + u_x)/a``, ``y = (Y + u_y)/(\sqrt3 a)``, the two-coset search of
:mod:`cvfl_theory.lattice` (``rint`` = round half to even, ``d = dx^2 + 3 dy^2``, ties to the first
coset) and the codebook's lookup table. Every kernel path must give exactly these indices.

This file holds an independent numpy transcription of that definition (:func:`reference_indices`;
numpy float64 operations are IEEE and unfused) and checks the compressor against it:

1. on random normal data (odd ``P``, ``P = 2``, rows spanning the 512-pair dither chunks, every
   codebook of ``bits`` 1..8, the three range modes, with and without dither);
2. on *adversarial* rows: entries chosen, from the pair's own dither
   (:func:`cvfl_theory._kernels.hex_dither`), so that the scaled point lands at about
   ``0, 2^-24, 2^-20, 2^-16, 2^-12, 2^-8`` (both sides) from a decision boundary: a half-integer
   (the ``rint`` of the first coset), an integer (the second coset's) or the bisector
   ``d0 = d1`` between the two cosets' candidates. Each target is reached as closely as the input
   dtype allows (a search over the neighbouring float32/float64 values, scored by the
   transcription), so many pairs lie within one float32 rounding of a tie, and the float64 rows
   contain exact ties. The test asserts that a large share of the pairs is that close (measured
   by the transcription on the final data, not by the construction);
3. (2) in a subprocess per forced kernel path (``CVFL_KERNEL_PATH``), with the installed build
   and a clang build, skipped when the CPU lacks the path; and on the torch path (in process);
4. that the adversarial data is sharp: a simulated float32 nearest point with an error screen
   (recompute in float64 only when a float32 margin is below ``E``) disagrees with the
   definition when ``E`` is too small, and agrees when ``E`` covers float32 rounding; and the
   kernels' own screen built with its margin divided by 16 gives other indices.

Why: the AVX2 kernel computes the nearest point in float32 first and recomputes in float64 only
the pairs its error bound cannot certify (``hex_screen_f32`` in ``_kernels.c``). Random data
almost never lands within a float32 rounding of a boundary, so only inputs like these can show
that such a screen's margin is too small.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _helpers import build_kernels, use_kernels_build

from cvfl_theory import _kernels
from cvfl_theory.compressors import HexLatticeQuantizer
from cvfl_theory.compressors.hexagonal import _kernel_codebook

ROOT = Path(__file__).resolve().parents[1]
SQRT3 = 1.7320508075688772  # the kernel's constant: the float64 nearest to sqrt(3)
OFFSETS = (0.0, 2.0**-24, 2.0**-20, 2.0**-16, 2.0**-12, 2.0**-8)
NEAR = 2.0**-12
PATHS = ("avx512", "avx2", "portable")


# ------------------------------------------------------------------ the float64 transcription
def _f32_outward(v, down):
    """The float32 nearest to ``v`` on the side ``down`` (largest <=) or up (smallest >=)."""
    f = v.astype(np.float32)
    if down:
        f = np.where(f.astype(np.float64) > v, np.nextafter(f, np.float32(-np.inf)), f)
    else:
        f = np.where(f.astype(np.float64) < v, np.nextafter(f, np.float32(np.inf)), f)
    return f.astype(np.float64)


def row_range(v, spec):
    """``(lo, hi)``, float64 ``(B,)``: the sent min-max range (float32, outwards) or the fixed one."""
    B = v.shape[0]
    if isinstance(spec, str):
        lo, hi = _f32_outward(v.min(axis=1), True), _f32_outward(v.max(axis=1), False)
        if spec == "minmax-tensor":
            lo, hi = np.full(B, lo.min()), np.full(B, hi.max())
        return lo, hi
    return np.full(B, float(spec[0])), np.full(B, float(spec[1]))


def inverse_span(lo, hi):
    """``s = 1/(hi - lo)``, 0 for an empty range."""
    span = hi - lo
    s = np.zeros_like(span)
    np.divide(1.0, span, out=s, where=span > 0.0)
    return s


def box(v, lo, hi, s, clamp):
    """Unit-box coordinate ``max((v - lo) s - 1/2, -1/2)`` of entries ``v`` (float64), clamped
    into ``[lo, hi]`` first for a fixed range; ``lo, hi, s`` broadcast against ``v``."""
    if clamp:
        v = np.where(v >= lo, v, lo)
        v = np.where(v <= hi, v, hi)
    X = (v - lo) * s - 0.5
    return np.where(X >= -0.5, X, -0.5)


def scaled(X, Y, ux, uy, a):
    """Scaled coordinates ``x = (X + ux)/a``, ``y = (Y + uy)/(sqrt3 a)`` (as products)."""
    return (X + ux) * (1.0 / a), (Y + uy) * (1.0 / (SQRT3 * a))


def nearest(x, y):
    """Two-coset nearest lattice point of the scaled point: ``(i, j, parts)``.

    ``parts`` holds the intermediate values (for the margins): the first coset's candidate
    ``(m0, n0)``, the second's ``(m1, n1)`` (of ``x - 1/2``, ``y - 1/2``) and ``d0, d1``.
    """
    m0, n0 = np.rint(x), np.rint(y)
    x1, y1 = x - 0.5, y - 0.5
    m1, n1 = np.rint(x1), np.rint(y1)
    dx0, dy0, dx1, dy1 = x - m0, y - n0, x1 - m1, y1 - n1
    d0 = dx0 * dx0 + 3.0 * (dy0 * dy0)
    d1 = dx1 * dx1 + 3.0 * (dy1 * dy1)
    use1 = d1 < d0
    i = np.where(use1, m1 - n1, m0 - n0)
    j = np.where(use1, 2.0 * n1 + 1.0, 2.0 * n0)
    return i, j, {"dx0": dx0, "dy0": dy0, "dx1": dx1, "dy1": dy1, "d0": d0, "d1": d1}


def lookup(i, j, q):
    """Codeword index: the lookup table at ``(j - j0, i - i0)`` clamped into the table."""
    _, lut, rows, width, i0, j0 = _kernel_codebook(q.codebook)[:6]
    ii = np.clip(i - i0, 0.0, width - 1.0).astype(np.intp)
    jj = np.clip(j - j0, 0.0, rows - 1.0).astype(np.intp)
    return lut[jj, ii]


def dither(q, seed, B, npairs):
    """The dithers ``(ux, uy)`` of the ``(B, npairs)`` pairs (zeros without dither)."""
    ux, uy = np.zeros(B * npairs), np.zeros(B * npairs)
    if q.dither:
        _kernels.hex_dither(seed, 0, B * npairs, q.codebook.a, ux, uy)
    return ux.reshape(B, npairs), uy.reshape(B, npairs)


def scaled_points(q, data, seed):
    """The scaled coordinates ``(x, y)``, ``(B, ceil(P/2))``, of the rows of ``data``."""
    v = np.asarray(data).astype(np.float64)
    B, P = v.shape
    npairs = (P + 1) // 2
    lo, hi = row_range(v, q.range)
    s = inverse_span(lo, hi)
    clamp = not isinstance(q.range, str)
    c = (lo[:, None], hi[:, None], s[:, None], clamp)
    X = box(v[:, 0::2], *c)
    Y = np.zeros((B, npairs))  # an odd P's padding component: the box centre
    Y[:, : P // 2] = box(v[:, 1::2], *c)
    ux, uy = dither(q, seed, B, npairs)
    return scaled(X, Y, ux, uy, q.codebook.a)


def reference_indices(q, data, seed):
    """The codeword indices of ``data`` (``(B, P)``) by the float64 definition."""
    x, y = scaled_points(q, data, seed)
    i, j, _ = nearest(x, y)
    return lookup(i, j, q)


def margins(x, y):
    """Distance of each scaled point to the nearest decision boundary, per kind.

    ``x`` rounding of the winning coset (a half-integer for the first, an integer for the second;
    ``inf`` where the other coset wins), ``y`` roundings (which never decide: at a rounding tie
    of ``y`` the other coset is nearer), and the bisector ``d0 = d1``.
    """
    _, _, t = nearest(x, y)
    first = ~(t["d1"] < t["d0"])
    return {
        "x half-integer": np.where(first, 0.5 - np.abs(t["dx0"]), np.inf),
        "x integer": np.where(first, np.inf, 0.5 - np.abs(t["dx1"])),
        "y": np.minimum(0.5 - np.abs(t["dy0"]), 0.5 - np.abs(t["dy1"])),
        # |p - c0|^2 - |p - c1|^2 = 2 (distance to the bisector) |c1 - c0|, |c1 - c0| = 1
        "coset": np.abs(t["d0"] - t["d1"]) / 2.0,
    }


# ------------------------------------------------------------------ 1. random data
SHAPES = [(3, 2), (7, 9), (5, 1001), (2, 1500), (40, 33), (4, 1)]


def _codebooks():
    for bits in range(1, 9):
        for dith in (True, False):
            try:
                yield HexLatticeQuantizer(bits, dither=dith)
            except ValueError:
                assert bits == 1 and dith  # the only refused codebook (documented)


@pytest.mark.parametrize("q", list(_codebooks()), ids=repr)
def test_random_rows_match_the_float64_definition(q):
    g = np.random.default_rng(q.bits)
    for k, shape in enumerate(SHAPES):
        data = g.standard_normal(shape).astype(np.float32)
        data[0, :] = data[0, 0]  # an empty range: s = 0
        for spec in ("minmax-row", "minmax-tensor", (-2.0, 2.0)):
            q2 = HexLatticeQuantizer(q.bits, range=spec, dither=q.dither)
            c = q2.compress(data, rng=k)
            ref = reference_indices(q2, data, c.seed)
            assert np.array_equal(c.data["idx"], ref), (shape, spec)
            if isinstance(spec, str):  # the transcription's range is the one sent
                lo, hi = row_range(data.astype(np.float64), spec)
                n = 1 if spec == "minmax-tensor" else shape[0]
                assert np.array_equal(c.data["lo"].astype(np.float64), lo[:n])
                assert np.array_equal(c.data["hi"].astype(np.float64), hi[:n])


# ------------------------------------------------------------------ 2. adversarial rows
def _steps(v, k):
    """``v`` and its ``k`` neighbours on each side in its own dtype: shape ``v.shape + (2k+1,)``."""
    out = [v]
    lo = hi = v
    for _ in range(k):
        lo = np.nextafter(lo, v.dtype.type(-np.inf))
        hi = np.nextafter(hi, v.dtype.type(np.inf))
        out = [lo, *out, hi]
    return np.stack(out, axis=-1)


def _targets(cat, delta, x0, y0, g):
    """Scaled target points of each category near the base point ``(x0, y0)``.

    0: ``x`` at a half-integer (the first coset's rounding), ``y`` within 1/6 of an integer
    (where that coset wins, so the rounding decides the point); 1: ``y`` at a half-integer;
    2: ``x`` at an integer (the second coset's rounding), ``y`` within 1/6 of a half-integer;
    3: ``y`` at an integer; 4: on a Voronoi edge between a first-coset point ``(m, n)`` and a
    second-coset neighbour ``(m + sx/2, n + sy/2)`` (in the metric ``dx^2 + 3 dy^2`` their
    distance is 1 and the edge has length ``1/sqrt3``), ``delta`` along the edge's normal.
    """
    r = g.uniform(-1.0 / 6.0, 1.0 / 6.0, cat.shape)
    sx, sy = g.choice([-1.0, 1.0], (2, *cat.shape))
    t = g.uniform(-0.95, 0.95, cat.shape) / (2.0 * SQRT3)
    m, n = np.rint(x0), np.rint(y0)
    tx = np.select(
        [cat == 0, cat == 2, cat == 4],
        [np.floor(x0) + 0.5 + delta, m + delta, m + sx / 4 - t * SQRT3 * sy / 2 + delta * sx / 2],
        x0,
    )
    ty = np.select(
        [cat == 0, cat == 1, cat == 2, cat == 3, cat == 4],
        [
            n + r,
            np.floor(y0) + 0.5 + delta,
            np.floor(y0) + 0.5 + r,
            n + delta,
            n + sy / 4 + t * sx / (2 * SQRT3) + delta * sy / 2,
        ],
        y0,
    )
    return tx, ty


def adversarial_rows(q, B, dtype, seed, g, P=256):
    """``(B, P)`` rows of ``dtype`` whose pairs sit near the boundaries (see module docstring).

    Min-max range: each row holds its ``lo`` and ``hi`` as one pair, every other entry is inside.
    Fixed range: a few entries lie outside it (clipped).
    """
    a = q.codebook.a
    npairs = P // 2
    fixed = not isinstance(q.range, str)
    if fixed:
        lo, hi = np.full(B, float(q.range[0])), np.full(B, float(q.range[1]))
    else:  # (-1, 1); random; far from 0 (a coarse float32 grid)
        kind = np.arange(B) % 3
        lr = -g.uniform(0.05, 4.0, B)
        cr = g.uniform(-300.0, 300.0, B)
        lo = np.select([kind == 0, kind == 1], [-1.0, lr], cr)
        hi = np.select([kind == 0, kind == 1], [1.0, lr + g.uniform(0.05, 6.0, B)], cr + 1.5)
        lo, hi = lo.astype(np.float32).astype(float), hi.astype(np.float32).astype(float)
    s = inverse_span(lo, hi)
    ux, uy = dither(q, seed, B, npairs)
    cat = g.choice(5, (B, npairs), p=[0.2, 0.1, 0.2, 0.1, 0.4])
    delta = g.choice(OFFSETS, (B, npairs)) * g.choice([-1.0, 1.0], (B, npairs))
    tx = np.zeros((B, npairs))
    ty = np.zeros((B, npairs))
    todo = np.ones((B, npairs), bool)
    for _ in range(30):  # targets outside the unit box: another base point
        X0, Y0 = g.uniform(-0.5, 0.5, (2, B, npairs))
        x0, y0 = scaled(X0, Y0, ux, uy, a)
        nx, ny = _targets(cat, delta, x0, y0, g)
        tx, ty = np.where(todo, nx, tx), np.where(todo, ny, ty)
        Xt, Yt = tx * a - ux, ty * (SQRT3 * a) - uy
        todo = (np.abs(Xt) > 0.5) | (np.abs(Yt) > 0.5)
    span = (hi - lo)[:, None]
    v = [(np.clip(T, -0.5, 0.5) + 0.5) * span + lo[:, None] for T in (Xt, Yt)]
    # the dtype's values nearest to each target, by the transcription itself
    lb, hb, sb = (z[:, None, None] for z in (lo, hi, s))
    cand = [np.clip(_steps(w.astype(dtype), 3).astype(np.float64), lb, hb) for w in v]
    cx, cy = scaled(
        box(cand[0], lb, hb, sb, fixed),
        box(cand[1], lb, hb, sb, fixed),
        ux[..., None],
        uy[..., None],
        a,
    )
    bx = np.take_along_axis(cand[0], np.abs(cx - tx[..., None]).argmin(-1)[..., None], -1)
    by = np.take_along_axis(cand[1], np.abs(cy - ty[..., None]).argmin(-1)[..., None], -1)
    v0, v1 = bx[..., 0], by[..., 0]
    # coset edges: the pair of neighbours whose d0 - d1 is nearest to the target's 2 delta
    _, _, t = nearest(cx[..., :, None], cy[..., None, :])
    k = np.abs(t["d0"] - t["d1"] - 2.0 * delta[..., None, None]).reshape(B, npairs, -1).argmin(-1)
    edge = cat == 4
    v0 = np.where(edge, np.take_along_axis(cand[0], (k // 7)[..., None], -1)[..., 0], v0)
    v1 = np.where(edge, np.take_along_axis(cand[1], (k % 7)[..., None], -1)[..., 0], v1)
    out = np.empty((B, P), dtype)
    out[:, 0::2], out[:, 1::2] = v0, v1
    rows = np.arange(B)
    if fixed:
        bad = g.random((B, P)) < 0.01
        out[bad] = g.choice([-1.0, 1.0], bad.sum()) * g.uniform(3.0, 5.0, bad.sum())
    else:
        pos = 2 * g.integers(0, npairs, B)
        out[rows, pos], out[rows, pos + 1] = lo, hi
    return out


# (bits, range, input dtype, dither, rows, seed)
CASES = [
    *[(b, "minmax-row", np.float32, True, 300, 1000 + b) for b in (2, 3, 4, 8)],
    *[(b, (-3.0, 3.0), np.float32, True, 100, 2000 + b) for b in (2, 3, 4, 8)],
    *[(b, "minmax-row", np.float64, True, 100, 2**62 + b) for b in (3, 8)],
    (4, "minmax-row", np.float32, False, 100, None),
]


def _case_id(c):
    return f"bits{c[0]}-{c[1]}-{np.dtype(c[2]).name}-{'dither' if c[3] else 'plain'}"


@pytest.fixture(scope="module")
def adversarial():
    """Every case: ``(quantizer kwargs, data, seed, reference indices, margins, (x, y))``."""
    out = {}
    for bits, spec, dtype, dith, B, seed in CASES:
        q = HexLatticeQuantizer(bits, range=spec, dither=dith)
        data = adversarial_rows(q, B, dtype, seed, np.random.default_rng(bits))
        x, y = scaled_points(q, data, seed)
        kw = {"bits": bits, "range": spec, "dither": dith}
        out[_case_id((bits, spec, dtype, dith))] = (
            kw,
            data,
            seed,
            reference_indices(q, data, seed),
            margins(x, y),
            (x, y),
        )
    return out


def _compress_idx(kw, data, seed):
    q = HexLatticeQuantizer(**kw)
    return q._compress_np(data, seed)[0]["idx"]


def _mismatch_report(name, got, ref, marg):
    bad = np.argwhere(got != ref)
    m = np.minimum.reduce(list(marg.values()))
    first = ", ".join(
        f"{tuple(p)}: {got[tuple(p)]} != {ref[tuple(p)]} (margin {m[tuple(p)]:.3g})"
        for p in bad[:5]
    )
    return f"{name}: {len(bad)} indices differ from the float64 definition; {first}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_adversarial_rows_sit_on_ties_and_match_the_definition(case, adversarial):
    kw, data, seed, ref, marg, (x, y) = adversarial[_case_id(case)]
    B, npairs = ref.shape
    m = np.minimum.reduce(list(marg.values()))
    # the data is adversarial: most pairs within 2^-12 of a boundary, many within a float32
    # rounding of the scaled point (2^-22 |x|: 2 to 4 float32 ulps), and every deciding kind
    assert np.mean(m < NEAR) > 0.6
    tight = m < 2.0**-22 * np.maximum(np.abs(x), np.abs(y))
    assert tight.sum() > 0.05 * B * npairs
    for kind in ("x half-integer", "x integer", "coset"):
        assert np.sum(marg[kind] < NEAR) > 0.05 * B * npairs, kind
    if np.dtype(case[2]) == np.float64:  # exact float64 ties: only the definition decides
        assert np.sum(m == 0.0) > 0.01 * B * npairs
    got = _compress_idx(kw, data, seed)
    assert np.array_equal(got, ref), _mismatch_report(_case_id(case), got, ref, marg)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_adversarial_rows_on_the_torch_path(case, adversarial):
    # the torch implementation (run for CUDA tensors) on the same tie-sitting rows
    import torch

    kw, data, seed, ref, marg, _ = adversarial[_case_id(case)]
    k = HexLatticeQuantizer(**kw)._torch_run(torch.from_numpy(data), seed)[0].numpy()
    assert np.array_equal(k, ref), _mismatch_report(_case_id(case) + " (torch)", k, ref, marg)


# ------------------------------------------------------------------ 3. every kernel path
# argv: cases (JSON), input .npz, output .npz[, another build of the kernels to use instead]
CHILD = (
    use_kernels_build("len(sys.argv) > 4 and sys.argv[4]")
    + r"""
import json, sys
import numpy as np
from cvfl_theory import _kernels
from cvfl_theory.compressors import HexLatticeQuantizer
cases = json.loads(sys.argv[1])
d = np.load(sys.argv[2])
out = {}
for name, kw, seed in cases:
    kw["range"] = kw["range"] if isinstance(kw["range"], str) else tuple(kw["range"])
    q = HexLatticeQuantizer(**kw)
    out[name] = q._compress_np(np.ascontiguousarray(d[name]), seed)[0]["idx"]
np.savez(sys.argv[3], **out)
print(json.dumps({"path": _kernels.path()}))
"""
)


def _skip_unless_cpu_has(path):
    if path not in _kernels.paths():
        pytest.skip(f"this CPU cannot run the {path} kernel path (it has {_kernels.paths()})")


def _indices_on_path(path, adversarial, tmp_path, so=None):
    """The compressor's indices of every adversarial case, in a subprocess on kernel ``path``
    (``so``: another build of the kernels)."""
    np.savez(tmp_path / "in.npz", **{k: v[1] for k, v in adversarial.items()})
    cases = json.dumps([[k, v[0], v[2]] for k, v in adversarial.items()])
    env = {**os.environ, "CVFL_KERNEL_PATH": path}
    cmd = [sys.executable, "-c", CHILD, cases, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")]
    cmd += [str(so)] if so else []
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["path"] == path
    return np.load(tmp_path / "out.npz")


@pytest.mark.parametrize("build", ["installed", "clang"])
@pytest.mark.parametrize("path", PATHS)
def test_adversarial_rows_on_every_kernel_path(path, build, adversarial, tmp_path, request):
    _skip_unless_cpu_has(path)
    so = request.getfixturevalue("clang_build") if build == "clang" else None
    got = _indices_on_path(path, adversarial, tmp_path, so)
    for name, (_, _, _, ref, marg, _) in adversarial.items():
        assert np.array_equal(got[name], ref), _mismatch_report(
            f"{path} {name}", got[name], ref, marg
        )


# ------------------------------------------------------------------ 4. the data is sharp
def screened_float32_indices(q, data, seed, eps):
    """A float32 nearest point screened by margin ``eps``: a model of a fast kernel.

    The scaled point of float32 rows (even ``P``, min-max range) is computed in float32
    arithmetic; a pair whose float32 margins (to the roundings and to ``d0 = d1``) are all above
    ``eps (1 + |x| + |y|)`` keeps the float32 decision, the others are recomputed by the float64
    definition.
    """
    f = np.float32
    v = np.asarray(data).astype(np.float64)
    B, P = v.shape
    assert data.dtype == f and P % 2 == 0 and q.range == "minmax-row"
    lo, hi = row_range(v, q.range)
    s = inverse_span(lo, hi)
    vf = v.astype(f)
    lf, sf = lo.astype(f)[:, None], s.astype(f)[:, None]
    ux, uy = (u.astype(f) for u in dither(q, seed, B, (P + 1) // 2))
    X = np.maximum((vf[:, 0::2] - lf) * sf - f(0.5), f(-0.5))
    Y = np.maximum((vf[:, 1::2] - lf) * sf - f(0.5), f(-0.5))
    x, y = (X + ux) * f(1.0 / q.codebook.a), (Y + uy) * f(1.0 / (SQRT3 * q.codebook.a))
    i, j, _ = nearest(x, y)
    m = np.minimum.reduce(list(margins(x, y).values()))
    i64, j64, _ = nearest(*scaled_points(q, data, seed))
    safe = m > eps * (1.0 + np.abs(x) + np.abs(y))
    return lookup(np.where(safe, i, i64), np.where(safe, j, j64), q)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c[1] == "minmax-row" and c[2] == np.float32 and c[3]], ids=_case_id
)
def test_a_screen_with_too_small_a_margin_is_caught(case, adversarial):
    """A model float32 screen with margin 2^-24 (one float32 rounding, too small: its float32
    scaled point carries several) disagrees with the definition on the adversarial rows; with
    2^-16 it agrees."""
    kw, data, seed, ref, _, _ = adversarial[_case_id(case)]
    q = HexLatticeQuantizer(**kw)
    assert not np.array_equal(screened_float32_indices(q, data, seed, 2.0**-24), ref)
    assert np.array_equal(screened_float32_indices(q, data, seed, 2.0**-16), ref)


def test_the_kernels_screen_with_a_margin_16_times_too_small_is_caught(adversarial, tmp_path):
    """The AVX2 kernel's own float32 screen (``hex_screen_f32``), built with its margin divided
    by 16 (``-DCVFL_HEX_SCREEN_SHRINK=4``), gives other indices on the adversarial rows: the
    rows reach the screen's uncertain band, so a margin below the proved bound is seen."""
    _skip_unless_cpu_has("avx2")
    so = build_kernels(("gcc", "cc", "clang"), tmp_path, ["-O1", "-DCVFL_HEX_SCREEN_SHRINK=4"])
    if so is None:
        pytest.skip("no C compiler to build the kernels")
    got = _indices_on_path("avx2", adversarial, tmp_path, so)
    screened = [k for k, v in adversarial.items() if np.dtype(v[1].dtype) == np.float32]
    assert any(not np.array_equal(got[k], adversarial[k][3]) for k in screened)
