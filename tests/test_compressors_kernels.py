"""The compiled compressor kernels (``cvfl_theory._kernels``).

Checked against independent numpy oracles written here from the documented definitions (the
dither stream: xoshiro256** lanes seeded by SplitMix64, the scalar quantizer's formulas, brute-force nearest codewords, a
stable-sort top-k), for the error laws of C5.1/C5.2, for float32/float64 agreement, and for
``roundtrip`` being bit-identical to ``decompress(compress(x))``.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers import build_kernels, use_kernels_build
from scipy import stats

from cvfl_theory import _kernels
from cvfl_theory.compressors import Compressed, HexLatticeQuantizer, ScalarQuantizer, TopK

S3 = math.sqrt(3.0)
ALPHA = 1e-3


def kernel_compressors():
    return [
        ScalarQuantizer(3),
        ScalarQuantizer(8),
        ScalarQuantizer(2, range="minmax-tensor"),
        ScalarQuantizer(8, range=(-3.0, 3.0)),
        ScalarQuantizer(12),
        ScalarQuantizer(3, range=(-0.1, 0.7)),  # a range that is not float32-representable
        ScalarQuantizer(4, dither=False),
        HexLatticeQuantizer(3),
        HexLatticeQuantizer(2, range=(-3.0, 3.0)),
        HexLatticeQuantizer(8, range="minmax-tensor"),
        HexLatticeQuantizer(4, dither=False),
        TopK(k=5),
        TopK(bits=3),
    ]


@pytest.mark.parametrize("comp", kernel_compressors(), ids=repr)
@pytest.mark.parametrize("shape", [(300, 77), (5, 256), (1, 1), (3, 2), (1100, 32), (9,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_roundtrip_is_bit_identical(comp, shape, dtype):
    if isinstance(comp, TopK) and comp.k is not None and comp.k > shape[-1]:
        pytest.skip("k > P")
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    c = comp.compress(x, rng=11)
    y = comp.decompress(c)
    assert y.dtype == dtype and y.shape == x.shape
    assert np.array_equal(comp.roundtrip(x, rng=11), y)
    assert np.array_equal(comp.decompress(Compressed.from_bytes(c.to_bytes())), y)
    yt = comp.roundtrip(torch.from_numpy(x.copy()), rng=11)
    assert np.array_equal(yt.numpy(), y)


M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(seed, n):
    """The first n outputs of SplitMix64 from state ``seed`` (numpy uint64, wrapping)."""
    z = np.uint64(seed) + (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


def stream_words(seed, n):
    """The first n words of the dither stream: xoshiro256** on 16 lanes (Blackman & Vigna's
    reference algorithm), lane l seeded with SplitMix64 outputs 4l .. 4l+3; word n = lane n % 16
    at step n // 16."""
    s0, s1, s2, s3 = (a.copy() for a in splitmix64(seed, 64).reshape(16, 4).T)
    steps = -(-n // 16)
    out = np.empty((steps, 16), np.uint64)
    for k in range(steps):
        out[k] = _rotl(s1 * np.uint64(5), 7) * np.uint64(9)
        t = s1 << np.uint64(17)
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = _rotl(s3, 45)
    return out.ravel()[:n]


def dither_halves(seed, n):
    """The scalar quantizer's 32-bit words h_e: halves of the stream words, low half first."""
    w = stream_words(seed, (n + 1) // 2)
    return np.stack([w & np.uint64(0xFFFFFFFF), w >> np.uint64(32)], axis=1).ravel()[:n]


def dither_units(seed, n):
    """U_e = (h_e + 1/2) 2^-32."""
    return (dither_halves(seed, n).astype(np.float64) + 0.5) * 2.0**-32


def test_splitmix64_oracle_known_values():
    # SplitMix64 from state 0: published first outputs (Vigna's reference implementation).
    assert splitmix64(0, 3).tolist() == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]


@pytest.mark.parametrize("e0,n", [(0, 1), (0, 10), (1, 7), (5, 4096), (12345, 3001)])
def test_kernel_dither_words_are_the_documented_stream(e0, n):
    seed = 0xDEADBEEF12345
    out = np.empty(n, np.uint32)
    _kernels.dither_words(seed, e0, n, out)
    assert np.array_equal(out, dither_halves(seed, e0 + n)[e0:].astype(np.uint32))


def test_dither_stream_words_are_uniform_and_uncorrelated():
    w = stream_words(7, 1 << 16)
    bits = ((w[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(np.float64)
    # every bit is a fair coin (5 SE of a binomial proportion over 65536 words)
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) <= 5 * 0.5 / math.sqrt(w.size))
    u = (w >> np.uint64(11)).astype(np.float64) * 2.0**-53
    assert stats.kstest(u, "uniform").pvalue > ALPHA
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / math.sqrt(u.size)


@pytest.mark.parametrize("bits", [1, 3, 8, 12])
@pytest.mark.parametrize("rng_spec", [(-2.5, 1.5), "minmax-row"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scalar_kernel_matches_numpy_oracle_bit_for_bit(bits, rng_spec, dtype):
    x = np.random.default_rng(bits).uniform(-2.5, 1.5, size=(37, 29)).astype(dtype)
    x[::3] *= (
        1.25  # rows leaving the fixed range (clipped), rows inside it (the kernel's no-clamp path)
    )
    q = ScalarQuantizer(bits, range=rng_spec)
    c = q.compress(x, rng=7)
    L = 2**bits - 1
    xc = x.astype(np.float64)
    if isinstance(rng_spec, str):
        lo = c.data["lo"].astype(np.float64)[:, None]
        hi = c.data["hi"].astype(np.float64)[:, None]
        assert np.all(lo <= x.min(axis=1, keepdims=True)) and np.all(
            hi >= x.max(axis=1, keepdims=True)
        )
    else:
        lo, hi = np.float64(rng_spec[0]), np.float64(rng_spec[1])
        outside = (xc < lo) | (xc > hi)
        assert c.n_clipped == int(outside.sum()) > 0 and not outside[1].any()
        xc = np.clip(xc, lo, hi)
    u = dither_units(c.seed, x.size).reshape(x.shape)
    t = (xc - lo) * (L / (hi - lo))
    k = np.minimum(np.floor(t + u), L)
    assert np.array_equal(c.data["idx"], k.astype(c.data["idx"].dtype))
    y = lo + ((k + 0.5) - u) * ((hi - lo) / L)
    assert np.array_equal(q.decompress(c), y.astype(dtype))


@pytest.mark.parametrize(
    "comp",
    [
        ScalarQuantizer(1, range=(-1.0, 3.0)),
        ScalarQuantizer(3),
        ScalarQuantizer(12, dither=False),
        HexLatticeQuantizer(2, range="minmax-tensor"),
        HexLatticeQuantizer(3),
        HexLatticeQuantizer(6, range=(-2.0, 5.0), dither=False),
    ],
)
def test_overflow_bound_holds_for_every_index_the_kernel_takes(comp):
    # decompress skips its O(n) overflow scan when _output_bound <= the dtype's max: the bound
    # must hold for every index the kernel may be given (also beyond the codebook / the levels,
    # in a Compressed built in-process), measured on the float64 reconstruction itself
    x = np.random.default_rng(3).uniform(-1.0, 3.0, size=(6, 64))
    c = comp.compress(x, rng=5)
    idx = c.data["idx"]
    # the scalar kernel takes any index of its dtype; the hexagonal one refuses those outside
    top = np.iinfo(idx.dtype).max if isinstance(comp, ScalarQuantizer) else comp.codebook_size - 1
    data = {**c.data, "idx": np.random.default_rng(4).integers(0, top + 1, idx.shape, idx.dtype)}
    data["idx"].flat[:2] = (0, top)
    for d in (c.data, data):
        y = comp._decompress(d, c.seed, c.shape2d, np.float64)
        assert np.abs(y).max() <= comp._output_bound(d) < 1e4
    if isinstance(comp.range, str):  # a non-finite sent range bounds nothing: decompress scans
        bad = {"lo": np.array([1.0]), "hi": np.array([np.inf]), "idx": idx}
        assert not comp._output_bound(bad) <= np.finfo(np.float64).max


def test_topk_overflow_bound_is_the_largest_sent_value():
    x = np.random.default_rng(3).standard_normal((6, 64)) * 1e300
    comp = TopK(k=5, r=64)
    c = comp.compress(x)
    y = comp._decompress(c.data, None, c.shape2d, np.float64)
    bound = comp._output_bound(c.data)
    assert np.abs(y).max() == np.abs(c.data["values"]).max() <= bound < np.abs(y).max() * 1.001
    assert not bound <= float(
        np.finfo(np.float32).max
    )  # a float32 message of these values is scanned
    bad = {**c.data, "values": np.where(c.data["values"] > 0, np.nan, c.data["values"])}
    assert not comp._output_bound(bad) <= np.finfo(np.float64).max


@pytest.mark.parametrize("bits", [2, 3, 5])
@pytest.mark.parametrize("P", [8, 9])
def test_hex_kernel_picks_the_nearest_codeword_brute_force(bits, P):
    """Index = the codeword nearest to x + u (brute force over the codebook), u from the stream."""
    q = HexLatticeQuantizer(bits, range=(-1.0, 1.0))
    x = np.random.default_rng(P).uniform(-1, 1, size=(40, P))
    c = q.compress(x, rng=2)
    npairs = (P + 1) // 2
    t = np.full((40, 2 * npairs), 0.5)
    t[:, :P] = (x + 1.0) / 2.0
    t -= 0.5
    w = stream_words(c.seed, 40 * npairs).reshape(40, npairs)
    # alpha, beta: top 23 bits of each 32-bit half, at the midpoints of a 2^-23 grid
    al = (((w & np.uint64(0xFFFFFFFF)) >> np.uint64(9)).astype(np.float64) + 0.5) * 2.0**-23
    be = ((w >> np.uint64(41)).astype(np.float64) + 0.5) * 2.0**-23
    # u = z - (nearest lattice point to z), z = al b1 + be b2: brute force over 4 rhombus corners
    a = q.codebook.a
    zx, zy = a * (al + be / 2), a * (S3 / 2) * be
    corners = [(0, 0), (1, 0), (0, 1), (1, 1)]
    d = np.stack([(zx - a * (i + j / 2)) ** 2 + (zy - a * S3 / 2 * j) ** 2 for i, j in corners])
    best = np.argmin(d, axis=0)
    ci = np.choose(best, [i for i, _ in corners])
    cj = np.choose(best, [j for _, j in corners])
    ux, uy = zx - a * (ci + cj / 2), zy - a * S3 / 2 * cj
    px, py = q.codebook.points()
    vx, vy = t[:, 0::2] + ux, t[:, 1::2] + uy
    dist = (vx[..., None] - px) ** 2 + (vy[..., None] - py) ** 2
    near = np.argmin(dist, axis=-1)
    srt = np.sort(dist, axis=-1)
    clear = srt[..., 1] - srt[..., 0] > 1e-12  # ties (measure zero) may go either way
    assert clear.mean() > 0.99
    assert np.array_equal(c.data["idx"][clear], near[clear])
    y = q.decompress(c)
    ref = np.empty((40, 2 * npairs))
    ref[:, 0::2], ref[:, 1::2] = px[c.data["idx"]] - ux, py[c.data["idx"]] - uy
    assert np.allclose(y, (ref[:, :P] + 0.5) * 2.0 - 1.0, rtol=0, atol=1e-12)


def test_hex_dither_is_uniform_on_the_voronoi_cell_exact_reduction():
    """Every dither lies in the hexagon |<u, n_i>| <= a/2 (exact integer reduction), and its
    lattice coordinates mod 1 are uniform."""
    a = 0.37
    n = 200_000
    ux, uy = np.empty(n), np.empty(n)
    _kernels.hex_dither(99, 5, n, a, ux, uy)
    for t in (0, math.pi / 3, 2 * math.pi / 3):
        assert np.all(np.abs(ux * math.cos(t) + uy * math.sin(t)) <= a / 2 * (1 + 1e-12))
    beta = uy / (a * S3 / 2)
    alpha = ux / a - beta / 2
    for c in (np.mod(alpha, 1), np.mod(beta, 1)):
        assert stats.kstest(c, "uniform").pvalue > ALPHA
    second = np.mean(ux**2 + uy**2)
    V = S3 * a * a / 2
    se = np.std(ux**2 + uy**2, ddof=1) / math.sqrt(n)
    assert abs(second - 5 * V / (18 * S3)) <= 5 * se


@pytest.mark.parametrize(
    "comp",
    [
        ScalarQuantizer(3),
        ScalarQuantizer(8, range=(-4.0, 4.0)),
        ScalarQuantizer(3, dither=False),
        HexLatticeQuantizer(3),
        HexLatticeQuantizer(6, range="minmax-tensor"),
        TopK(k=7),
    ],
    ids=repr,
)
def test_float32_and_float64_inputs_give_the_same_message(comp):
    """One float64 kernel for both dtypes: same indices; the float32 output is the float64 one
    rounded once."""
    x = np.random.default_rng(5).standard_normal((512, 64)).astype(np.float32)
    c32, c64 = comp.compress(x, rng=3), comp.compress(x.astype(np.float64), rng=3)
    assert np.array_equal(c32.data["idx"], c64.data["idx"])
    y32, y64 = comp.decompress(c32), comp.decompress(c64)
    assert y32.dtype == np.float32 and y64.dtype == np.float64
    assert np.array_equal(y32, y64.astype(np.float32))
    y16 = comp.roundtrip(x.astype(np.float16), rng=3)
    assert y16.dtype == np.float16


def _topk_reference(x, k):
    """Keep the k largest |x| per row, ties towards the lower column (stable sort)."""
    order = np.argsort(-np.abs(x), axis=1, kind="stable")[:, :k]
    return np.sort(order, axis=1)


@pytest.mark.parametrize("P,k", [(256, 24), (10, 3), (33, 32), (1, 1), (5000, 7), (12, 12)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_selection_matches_reference(P, k, dtype):
    rng = np.random.default_rng(P)
    x = rng.standard_normal((40, P)).astype(dtype)
    x[6] = 0.0  # all ties at zero, and signed zeros
    x[7, ::2] = -0.0
    x[3] = 1.0  # a row of ties
    x[4, : P // 2] = -2.0
    if P > 2:
        x[5, 1:3] = x[5, 0]  # a few ties
    c = TopK(k=k).compress(x)
    assert np.array_equal(c.data["idx"].astype(np.intp), _topk_reference(x, k))


@pytest.mark.parametrize("P", [256, 97])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_selection_matches_reference_on_adversarial_rows(P, dtype):
    """Rows on which the threshold search's guesses are wrong: each row's scale far from the
    previous row's (its first probe useless), magnitudes spread over many binades (the
    interpolation in key space far off), subnormals, keys one ulp apart at the threshold,
    and k from 1 to P - 1."""
    rng = np.random.default_rng(11 + P)
    info = np.finfo(dtype)
    rows = []
    for i in range(60):
        r = rng.standard_normal(P)
        if i % 3 == 0:  # 60 binades of spread
            r *= 2.0 ** rng.integers(-30, 30, P)
        elif i % 3 == 1:  # a scale far from the previous row's
            r *= 10.0 ** (-20 if i % 2 else 20)
        rows.append(r.astype(dtype))
    x = np.stack(rows)
    x[10] = np.arange(P, dtype=dtype) * info.smallest_subnormal  # subnormals only
    x[11, : P // 2] = info.smallest_subnormal
    base = dtype(1.5)
    x[12] = np.nextafter(base, dtype(np.inf), dtype=dtype)  # two keys one ulp apart,
    x[12, ::3] = base  # interleaved: the k-th largest is exactly at the boundary
    x[13] = np.where(rng.random(P) < 0.5, info.max, info.tiny)  # the extremes of the range
    for k in (1, 2, P // 3, P // 2, P - 2, P - 1):
        c = TopK(k=k, r=64).compress(x)  # 64-bit values: the float64 extremes are sent as is
        assert np.array_equal(c.data["idx"].astype(np.intp), _topk_reference(x, k)), k


@pytest.mark.parametrize(
    "comp",
    [
        ScalarQuantizer(3),
        ScalarQuantizer(3, range=(-1.0, 1.0)),
        ScalarQuantizer(3, range="minmax-tensor"),
        HexLatticeQuantizer(3),
    ],
    ids=repr,
)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_quantizers_refuse_non_finite_without_full_scan(comp, bad):
    x = np.zeros((4, 6), np.float32)
    x[2, 3] = bad
    for f in (comp.compress, comp.roundtrip):
        with pytest.raises(ValueError, match=r"must be finite; found .* at index \(2, 3\)"):
            f(x, rng=0)


@pytest.mark.parametrize("comp", kernel_compressors(), ids=repr)
def test_strided_and_read_only_inputs(comp):
    base = np.random.default_rng(1).standard_normal((60, 40)).astype(np.float32)
    ref = comp.roundtrip(np.ascontiguousarray(base[::-1, ::2]), rng=3)
    ro = base.copy()
    ro.flags.writeable = False
    assert np.array_equal(comp.roundtrip(base[::-1, ::2], rng=3), ref)
    assert np.array_equal(comp.roundtrip(ro, rng=3), comp.roundtrip(base, rng=3))


def test_kernels_refuse_wrong_buffers():
    x = np.zeros((4, 6), np.float32)
    mn, mx = np.empty(4), np.empty(4)
    with pytest.raises(ValueError, match="expected"):
        _kernels.row_ranges(x, 1, 4, 7, mn, mx)  # size mismatch
    with pytest.raises((BufferError, ValueError), match="contiguous"):
        _kernels.row_ranges(np.zeros((6, 4), np.float32).T, 1, 4, 6, mn, mx)  # not contiguous
    with pytest.raises(ValueError, match="float64"):
        _kernels.scalar_quantize(
            x, 1, 4, 6, False, np.zeros(3), np.ones(1), 7, True, 1, None, 0, x, 1
        )
    with pytest.raises(ValueError, match="element format"):  # same size, other type
        _kernels.topk_scatter(
            np.zeros((4, 1), np.float32), np.zeros((4, 1), np.float32), 1, 4, 6, 1, x
        )
    with pytest.raises(ValueError, match="not in"):
        _kernels.topk_scatter(
            np.full((4, 1), 6, np.int32), np.zeros((4, 1), np.float32), 1, 4, 6, 1, x
        )


def test_hex_decompress_refuses_indices_outside_the_codebook():
    q = HexLatticeQuantizer(2)
    c = q.compress(np.zeros((2, 4)), rng=0)
    c.data["idx"][0, 0] = q.codebook_size
    with pytest.raises(ValueError, match="codebook size"):
        q.decompress(c)


@pytest.mark.parametrize("comp", [ScalarQuantizer(3), HexLatticeQuantizer(3)], ids=repr)
def test_minmax_range_beyond_float32_is_refused_fixed_range_clips(comp):
    x = np.array([[1e300, 0.0, 1.0, 2.0]])
    with pytest.raises(ValueError, match="beyond the float32 range"):
        comp.compress(x, rng=0)
    fixed = type(comp)(3, range=(-1.0, 1.0))
    c = fixed.compress(x, rng=0)
    assert c.n_clipped == 2  # 1e300 and 2.0
    with pytest.raises(ValueError, match="2 entries outside the fixed range"):
        type(comp)(3, range=(-1.0, 1.0), out_of_range="raise").compress(x, rng=0)


# ---- the kernel paths (avx512, avx2, portable) and other builds: the same bits everywhere ----

PATHS = ("avx512", "avx2", "portable")
ROOT = Path(__file__).resolve().parents[1]


def _load(so):
    spec = importlib.util.spec_from_file_location("_kernels", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PLAIN = ["-O2", "-DCVFL_NO_VECTOR_EXT"]  # plain -O2, the plain-loop dither generator


@pytest.fixture(scope="module")
def plain_build(tmp_path_factory):
    so = build_kernels(("gcc", "cc"), tmp_path_factory.mktemp("plain"), PLAIN)
    if so is None:
        pytest.skip("no C compiler to build the plain -O2 kernels")
    return so


@pytest.fixture(scope="module")
def baseline(plain_build):
    return _load(plain_build)


# Run in a subprocess (the path is chosen once, at import): the sha256 of every message
# (to_bytes) and reconstruction of scalar, hexagonal, top-k and identity compressors on
# float32/float64 inputs (partial vectors, rows longer than a dither block), of the raw
# dither streams and of the encoders' fixed-order row sums (tests/test_encoders.py checks their
# order). argv[1], if given, is another build of the kernels to use instead.
DIGEST_SCRIPT = (
    use_kernels_build("len(sys.argv) > 1 and sys.argv[1]")
    + r"""
import hashlib, json, sys
import numpy as np
from cvfl_theory import _kernels
from cvfl_theory.compressors import HexLatticeQuantizer, Identity, ScalarQuantizer, TopK
comps = [ScalarQuantizer(3), ScalarQuantizer(8, range=(-2.0, 2.0)), ScalarQuantizer(12),
         ScalarQuantizer(2, range="minmax-tensor"), ScalarQuantizer(4, dither=False),
         HexLatticeQuantizer(3), HexLatticeQuantizer(2, range=(-3.0, 3.0)),
         HexLatticeQuantizer(8, range="minmax-tensor"), HexLatticeQuantizer(4, dither=False),
         TopK(k=5), TopK(bits=3), Identity()]
out = {}
for dt in (np.float32, np.float64):
    for shape in [(300, 77), (40, 256), (2, 5001)]:
        x = np.random.default_rng(shape[1]).standard_normal(shape).astype(dt)
        for c in comps:
            m = c.compress(x, rng=7)
            y = np.ascontiguousarray(c.decompress(m))
            key = f"{c!r} {np.dtype(dt).name} {shape}"
            out[key] = hashlib.sha256(m.to_bytes() + y.tobytes()).hexdigest()
w = np.empty(10001, np.uint32)
_kernels.dither_words(5, 3, w.size, w)
ux, uy = np.empty(999), np.empty(999)
_kernels.hex_dither(5, 17, 999, 0.3, ux, uy)
out["streams"] = hashlib.sha256(w.tobytes() + ux.tobytes() + uy.tobytes()).hexdigest()
sums = []
for dt, t in ((np.float32, 1), (np.float64, 2)):
    for d in (1, 15, 17, 1237, 40000):
        g = np.random.default_rng(d)
        x = (g.standard_normal((5, d)) * 10.0 ** g.integers(-12, 12, (5, d))).astype(dt)
        s = np.empty(5)
        _kernels.row_sums(x, t, 5, d, s)
        sums.append(s)
out["row_sums"] = hashlib.sha256(np.concatenate(sums).tobytes()).hexdigest()
print(json.dumps({"path": _kernels.path(), "digests": out}))
"""
)


def _digests(path, so=None):
    """(path in use, digests) of DIGEST_SCRIPT run with CVFL_KERNEL_PATH=path."""
    env = {**os.environ, "CVFL_KERNEL_PATH": path}
    cmd = [sys.executable, "-c", DIGEST_SCRIPT] + ([str(so)] if so is not None else [])
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout)
    return got["path"], got["digests"]


def _skip_unless_cpu_has(path):
    if path not in _kernels.paths():
        pytest.skip(f"this CPU cannot run the {path} kernel path (it has {_kernels.paths()})")


@pytest.fixture(scope="module")
def reference_digests(plain_build):
    """The digests of the plain -O2 build on the portable path."""
    return _digests("portable", plain_build)[1]


def test_kernel_path_reports_a_path_this_cpu_runs():
    assert _kernels.path() in _kernels.paths()
    assert set(_kernels.paths()) <= set(PATHS) and "portable" in _kernels.paths()
    forced = os.environ.get("CVFL_KERNEL_PATH")
    assert _kernels.path() == (forced or _kernels.paths()[0])  # the widest unless forced


@pytest.mark.parametrize("path", PATHS)
def test_forced_path_gives_the_same_bits_as_the_plain_build(path, reference_digests):
    """Every message and reconstruction is bit-identical on each path the CPU has, and equal
    to those of a plain -O2 build of the same source without vector extensions."""
    _skip_unless_cpu_has(path)
    used, digests = _digests(path)
    assert used == path
    assert len(digests) == 2 * 3 * 12 + 2
    assert digests == reference_digests


@pytest.mark.parametrize("path", ["avx9000", "AVX2"])
def test_unknown_forced_path_is_refused_at_import(path):
    env = {**os.environ, "CVFL_KERNEL_PATH": path}
    res = subprocess.run(
        [sys.executable, "-c", "import cvfl_theory._kernels"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode != 0
    assert f"CVFL_KERNEL_PATH={path} is not a kernel path" in res.stderr


@pytest.mark.parametrize("path", PATHS)
def test_clang_build_gives_the_same_bits(path, clang_build, reference_digests):
    _skip_unless_cpu_has(path)
    used, digests = _digests(path, clang_build)
    assert used == path
    assert digests == reference_digests


# The kernel tests and the compressors' error-law and wire tests again, in a subprocess, on
# every other path this CPU has (this process runs them on its own path), and the kernel tests
# once with the clang build. Not nested: the subprocess deselects these tests.
SUITE = [
    "tests/test_compressors_kernels.py",
    "tests/test_hex_screen.py",
    "tests/test_compressors.py",
]
# the tests that start a subprocess per path or build the kernels again: not nested
NESTED = "forced_path or clang_build or every_kernel_path or too_small"
PLUGIN = "import os\n" + use_kernels_build('os.environ["CVFL_TEST_KERNELS_SO"]')


def _run_suite(env, files, extra=(), deselect=" and not baseline_build"):
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *extra]
    cmd += ["-k", f"not ({NESTED}){deselect}", *files]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and " failed" not in res.stdout


@pytest.mark.skipif("CVFL_TEST_KERNELS_SO" in os.environ, reason="no nested runs")
@pytest.mark.parametrize("path", [p for p in PATHS if p != _kernels.path()])
def test_forced_path_passes_the_compressor_tests(path):
    _skip_unless_cpu_has(path)
    _run_suite({**os.environ, "CVFL_KERNEL_PATH": path}, SUITE)


def test_clang_build_passes_the_kernel_tests(clang_build, tmp_path):
    (tmp_path / "cvfl_kernels_plugin.py").write_text(PLUGIN)
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CVFL_TEST_KERNELS_SO": str(clang_build), "PYTHONPATH": pythonpath}
    env.pop("CVFL_KERNEL_PATH", None)
    _run_suite(env, SUITE[:2], ["-p", "cvfl_kernels_plugin"], deselect="")


@pytest.mark.parametrize("P", [256, 77])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vectorized_build_and_baseline_build_give_the_same_bits(baseline, P, dtype):
    """The determinism claim, on the low-level calls: the installed build (on its path) and a
    plain -O2 build with the plain-loop dither generator produce bit-identical results."""
    B = 300
    x = np.random.default_rng(P).standard_normal((B, P)).astype(dtype)
    xt = 1 if dtype == np.float32 else 2
    cb = HexLatticeQuantizer(3)._kernel_param
    res = []
    for mod in (_kernels, baseline):
        lo, hi = np.empty(B), np.empty(B)
        idx = np.empty((B, P), np.uint16)
        y = np.empty((B, P), dtype)
        counts = mod.scalar_quantize(x, xt, B, P, True, lo, hi, 1023, True, 77, idx, 4, y, xt)
        hidx = np.empty((B, (P + 1) // 2), np.uint8)
        hy = np.empty((B, P), dtype)
        mod.hex_quantize(x, xt, B, P, False, np.array([-4.0]), np.array([4.0]), cb, True, 5,
                         hidx, 3, hy, xt)  # fmt: skip
        dq = np.empty((B, P), dtype)
        mod.hex_dequantize(hidx, 3, B, P, np.array([-4.0]), np.array([4.0]), cb, True, 5, dq, xt)
        cols, vals = np.empty((B, 9), np.int32), np.empty((B, 9), dtype)
        mod.topk_select(x, xt, B, P, 9, cols, vals)
        res.append((counts, lo, hi, idx, y, hidx, hy, dq, cols, vals))
    for a, b in zip(*res):
        if isinstance(a, np.ndarray):
            assert a.tobytes() == b.tobytes()
        else:
            assert a == b
