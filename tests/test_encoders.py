"""Encoders (K1, K2, K5): unbiasedness and MSE by exact enumeration and by Monte Carlo with
SE-derived tolerances, support laws, determinism, dtypes and numpy/torch parity."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from scipy.stats import norm

from cvfl_theory import (
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
    _kernels,
)
from cvfl_theory._validate import row_sums
from cvfl_theory.sampling import bernoulli_support, k_subset_support
from cvfl_theory.testing.exact import exact_moments
from cvfl_theory.testing.strategies import encoder_problems

Z = 5.0  # standard errors allowed in Monte Carlo comparisons


def k12_formula(X, p, mu):
    """K1.2 written out directly from the theory page (independent of the encoder's code)."""
    n = X.shape[0]
    dev = X.astype(np.float64) - mu[:, None]
    return float(np.sum((1.0 / p - 1.0) * dev**2) / n**2)


# ------------------------------------------------------------------ exact enumeration
@settings(max_examples=40)
@given(encoder_problems(max_n=2, max_d=4, dtypes=("float64",), max_abs=100.0))
def test_unbiased_and_mse_by_exact_enumeration(problem):
    encoder, X = problem
    if isinstance(encoder, RotatedBinaryEncoder) and X.shape[1] > 2:
        X = X[:, :2]  # d' = 2^ceil(log2 d) coordinates per node: keep the enumeration small
    m = exact_moments(encoder, X)
    scale = max(1.0, float(np.abs(X).max()))
    np.testing.assert_allclose(m.mean_average, X.mean(axis=0), rtol=0, atol=1e-9 * scale)
    assert m.mse == pytest.approx(encoder.mse(X), rel=1e-9, abs=1e-9 * scale**2)


def test_k1_closed_form_matches_the_written_out_formula():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(4, 7))
    p = rng.uniform(0.1, 1.0, size=(4, 7))
    mu = np.array([0.5, -1.0, 2.0, 0.0])
    assert IndependentEncoder(p, mu=mu).mse(X) == pytest.approx(k12_formula(X, p, mu), rel=1e-12)
    assert IndependentEncoder(0.3, mu="mean").mse(X) == pytest.approx(
        k12_formula(X, np.full_like(X, 0.3), X.mean(axis=1)), rel=1e-12
    )


def test_k2_equals_k1_with_p_k_over_d():
    X = np.random.default_rng(4).normal(size=(3, 12))
    assert FixedSizeEncoder(3).mse(X) == pytest.approx(IndependentEncoder(0.25).mse(X), rel=1e-12)


def test_k5_1_formula_and_bound():
    X = np.array([[0.0, 1.0, 4.0, 4.0], [2.0, 2.0, 2.0, 2.0]])
    enc = BinaryQuantizationEncoder()
    # (4-1)(1-0) = 3 from row 0, constant row 1 contributes 0; divided by n^2 = 4
    assert enc.mse(X) == pytest.approx(0.75)
    assert enc.mse_upper_bound(X) == pytest.approx(4 * 16 / (4 * 4))
    e = enc.encode(X, rng=0)
    np.testing.assert_array_equal(enc.decode(e)[1], X[1])  # a constant row is sent exactly
    assert set(np.unique(enc.decode(e)[0])) <= {0.0, 4.0}


# ------------------------------------------------------------------ Monte Carlo
@pytest.mark.parametrize(
    "encoder",
    [
        IndependentEncoder(0.1, mu="mean"),
        IndependentEncoder(np.linspace(0.05, 1.0, 8)[:, None], mu="zero"),
        FixedSizeEncoder(20, mu="mean"),
        BinaryQuantizationEncoder(),
        RotatedBinaryEncoder(rotation_seed=1),
    ],
    ids=repr,
)
def test_mse_and_bias_by_monte_carlo(encoder):
    rng = np.random.default_rng(11)
    X = rng.standard_t(df=3, size=(8, 200))
    xbar = X.mean(axis=0)
    trials = 400
    err = np.empty(trials)
    devs = np.empty((trials, X.shape[1]))
    for t in range(trials):
        dev = encoder.average(encoder.encode(X, rng=rng)) - xbar
        devs[t] = dev
        err[t] = dev @ dev
    se = err.std(ddof=1) / math.sqrt(trials)
    assert abs(err.mean() - encoder.mse(X)) <= Z * se
    # per-coordinate bias, Bonferroni over d coordinates at family-wise level 1e-6
    se_j = devs.std(axis=0, ddof=1) / math.sqrt(trials)
    z_j = np.abs(devs.mean(axis=0)) / np.where(se_j > 0, se_j, np.inf)
    assert z_j.max() <= norm.isf(1e-6 / (2 * X.shape[1]))


# ------------------------------------------------------------------ support laws
def test_bernoulli_support_marginals_and_counts():
    d, p, seeds = 40, 0.3, 3000
    counts = np.zeros(d)
    sizes = np.empty(seeds)
    for s in range(seeds):
        idx = bernoulli_support(s, p, d)
        assert np.all(np.diff(idx) > 0) and (idx.size == 0 or (idx[0] >= 0 and idx[-1] < d))
        counts[idx] += 1
        sizes[s] = idx.size
    z = np.abs(counts - seeds * p) / math.sqrt(seeds * p * (1 - p))
    assert z.max() <= norm.isf(1e-6 / (2 * d))
    # |D_i| ~ Binomial(d, p): its variance d p (1-p) too (chi-square-free check via the SE of var)
    var_se = math.sqrt(2.0 / (seeds - 1)) * d * p * (1 - p)
    assert abs(sizes.var(ddof=1) - d * p * (1 - p)) <= Z * var_se


def test_bernoulli_support_extreme_probabilities():
    np.testing.assert_array_equal(bernoulli_support(0, 1.0, 7), np.arange(7))
    assert bernoulli_support(0, 1e-300, 10**6).size == 0
    big = bernoulli_support(5, 0.5, 10**5)  # several geometric chunks are never needed...
    assert abs(big.size - 5 * 10**4) <= Z * math.sqrt(10**5 * 0.25)


def test_k_subset_support_is_uniform():
    d, k, seeds = 6, 2, 3000
    counts = np.zeros(d)
    for s in range(seeds):
        idx = k_subset_support(s, k, d)
        assert idx.size == k and np.all(np.diff(idx) > 0)
        counts[idx] += 1
    p = k / d
    z = np.abs(counts - seeds * p) / math.sqrt(seeds * p * (1 - p))
    assert z.max() <= norm.isf(1e-6 / (2 * d))


# ------------------------------------------------------------------ determinism and seeds
def test_same_seed_same_message_and_seed_regenerates_support():
    X = np.random.default_rng(0).normal(size=(5, 50)).astype(np.float32)
    enc = IndependentEncoder(0.2)
    a, b, c = enc.encode(X, rng=42), enc.encode(X, rng=42), enc.encode(X, rng=43)
    for ma, mb in zip(a.nodes, b.nodes):
        assert ma.seed == mb.seed
        np.testing.assert_array_equal(ma.support, mb.support)
        np.testing.assert_array_equal(ma.values, mb.values)
        np.testing.assert_array_equal(bernoulli_support(ma.seed, ma.rate, 50), ma.support)
    assert any(not np.array_equal(ma.support, mc.support) for ma, mc in zip(a.nodes, c.nodes))
    fixed = FixedSizeEncoder(7).encode(X, rng=1)
    for m in fixed.nodes:
        np.testing.assert_array_equal(k_subset_support(m.seed, 7, 50), m.support)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_dtype_preserved(dtype):
    X = np.random.default_rng(0).normal(size=(3, 9)).astype(dtype)
    for enc in [
        IndependentEncoder(0.5),
        FixedSizeEncoder(3),
        BinaryQuantizationEncoder(),
        RotatedBinaryEncoder(),
    ]:
        e = enc.encode(X, rng=0)
        assert enc.decode(e).dtype == dtype and enc.average(e).dtype == dtype
        assert enc.decode(e).shape == X.shape and enc.average(e).shape == (9,)


def test_p_one_sends_x_exactly():
    X = np.random.default_rng(0).normal(size=(3, 9)).astype(np.float32)
    enc = IndependentEncoder(1.0, mu="mean")
    np.testing.assert_array_equal(enc.decode(enc.encode(X, rng=0)), X)


def test_float16_overflow_is_refused_not_silent():
    X = np.full((1, 4), 60000.0, dtype=np.float16)
    with pytest.raises(ValueError, match="overflows float16"):
        IndependentEncoder(0.1, mu="zero").encode(X, rng=0)


def test_numpy_torch_parity(backend):
    X = np.random.default_rng(0).normal(size=(4, 33)).astype(np.float32)
    for enc in [
        IndependentEncoder(0.3),
        FixedSizeEncoder(5),
        BinaryQuantizationEncoder(),
        RotatedBinaryEncoder(2),
    ]:
        e_np = enc.encode(X, rng=9)
        e_bk = enc.encode(backend(X), rng=9)
        Y = enc.decode(e_bk)
        assert type(Y) is type(backend(X))
        np.testing.assert_array_equal(np.asarray(Y), enc.decode(e_np))
        np.testing.assert_array_equal(np.asarray(enc.average(e_bk)), enc.average(e_np))
        assert enc.mse(backend(X)) == enc.mse(X)


def test_torch_generator_is_accepted():
    torch = pytest.importorskip("torch")
    X = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    enc = IndependentEncoder(0.5)
    a = enc.encode(X, rng=torch.Generator().manual_seed(5))
    b = enc.encode(X, rng=torch.Generator().manual_seed(5))
    assert [m.seed for m in a.nodes] == [m.seed for m in b.nodes]


# ------------------------------------------------------------------ compiled passes = numpy definitions
def _numpy_positions(seed, p, d):
    """K1's geometric-gap support as first written in numpy (the documented stream): gaps
    1 + floor(E / lambda) from ``gen.exponential``, running sums from -1 in float64, cut at d."""
    gen = np.random.Generator(np.random.SFC64(seed))
    chunk = int(d * p + 2.0 * math.sqrt(d * p) + 16)
    pieces, last = [], -1.0
    while last < d - 1:
        pos = gen.exponential(-1.0 / math.log1p(-p), chunk)
        pos += 1.0
        np.floor(pos, out=pos)
        pos[0] += last
        np.cumsum(pos, out=pos)
        pieces.append(pos)
        last = float(pos[-1])
    out = np.concatenate(pieces)
    return out[: int(np.searchsorted(out, d))].astype(np.int64)


@pytest.mark.parametrize("p", [1e-300, 1e-9, 0.003, 0.1, 0.5, 0.97, 0.999999, 1 - 2**-52])
@pytest.mark.parametrize("d", [1, 2, 17, 1000, 100_000])
def test_bernoulli_support_reproduces_the_numpy_definition(p, d):
    # the compiled pass must give the documented stream's support bit for bit: many seeds,
    # several chunks (small d: the first chunk often ends below d - 1), p near 0 (gaps beyond
    # 2**52: an empty support) and near 1 (gaps of 1)
    for seed in [0, 1, 2**32 - 1, 2**64 - 1, *range(3, 40)]:
        got = bernoulli_support(seed, p, d)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, _numpy_positions(seed, p, d))


def test_encode_values_and_average_reproduce_the_numpy_definitions():
    # values (X - mu)/p + mu in X's precision on the support, and the average
    # mean(mu) + sum_i (Y_i - mu_i)/n accumulated node by node in float64, written out in numpy
    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float64):
        X = (rng.standard_normal((5, 3000)) * 4 + 1).astype(dtype)
        for mu in ("zero", "mean", 0.5):
            enc = IndependentEncoder(p=0.3, mu=mu)
            e = enc.encode(X, rng=11)
            acc = np.full(X.shape[1], e.centres.mean())
            for i, m in enumerate(e.nodes):
                c, v = dtype(m.centre), X[i, m.support].copy()
                if c:
                    v -= c
                v /= dtype(0.3)
                if c:
                    v += c
                np.testing.assert_array_equal(m.values, v)
                assert m.values.dtype == dtype
                w = v.astype(np.float64)
                if m.centre:
                    w -= m.centre
                w *= 1.0 / X.shape[0]
                acc[m.support] += w
            np.testing.assert_array_equal(enc.average(e), acc.astype(dtype))


def test_average_falls_back_for_supports_the_kernel_does_not_take():
    # int32 or repeated indices in a hand-built message: the numpy path (acc[idx] += v, the last
    # of repeated indices counting once, as in decode)
    from cvfl_theory.encoded import Encoded, NodeMessage, average

    vals = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    for idx in (np.array([0, 2, 3], dtype=np.int32), np.array([3, 0, 3])):
        e = Encoded("bernoulli", 4, np.dtype(np.float32), (NodeMessage(idx, vals, 0.0, 0),), False)
        expected = np.zeros(4)
        expected[idx] += vals
        np.testing.assert_array_equal(average(e), expected.astype(np.float32))


def test_encode_refuses_an_overflow_found_in_the_compiled_pass():
    X = np.full((1, 4), 3e38, dtype=np.float32)  # every entry overflows once divided by p
    with pytest.raises(ValueError, match="overflows float32"):
        IndependentEncoder(p=0.5, mu="zero").encode(X, rng=0)


def test_bernoulli_support_over_several_chunks_reproduces_the_numpy_definition():
    # the first chunk (mean + 2 sd + 16 gaps) falls short of d - 1 for ~1.5% of seeds here: those
    # draw a second chunk from the same generator, which the compiled pass must continue exactly
    d, p = 10_000_000, 0.001
    chunk = int(d * p + 2.0 * math.sqrt(d * p) + 16)
    short = []
    for seed in range(1000):
        gen = np.random.Generator(np.random.SFC64(seed))
        gaps = np.floor(gen.exponential(-1.0 / math.log1p(-p), chunk) + 1.0)
        if gaps.sum() - 1 < d - 1:  # the chunk's last position
            short.append(seed)
    assert len(short) >= 3
    for seed in short:
        np.testing.assert_array_equal(bernoulli_support(seed, p, d), _numpy_positions(seed, p, d))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mu", ["zero", 0.5, "mean", "min"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_x_is_refused_naming_the_first_entry(dtype, mu, bad):
    # mu="zero" or a given mu: each row is checked in the compiled pass that reads it, with the
    # same error as the separate check of the other centres
    X = np.ones((5, 300), dtype=dtype)
    X[3, 57] = bad
    X[4, 2] = np.nan
    with pytest.raises(ValueError, match=r"X must be finite; found .* at index \(3, 57\)"):
        IndependentEncoder(p=0.2, mu=mu).encode(X, rng=0)


def test_sparse_kernels_refuse_wrong_buffers():
    # private entry points, but a wrong buffer must raise, never read or write out of bounds
    from cvfl_theory import _kernels

    x = np.ones(10, np.float32)
    out = np.empty(2, np.float32)
    with pytest.raises(ValueError, match="not in"):
        _kernels.sparse_values(x, 1, 10, np.array([3, 10]), 2, 0.0, 0.5, out, False)
    with pytest.raises(ValueError, match="int64"):
        _kernels.sparse_values(x, 1, 10, np.array([3, 4], np.int32), 2, 0.0, 0.5, out, False)
    with pytest.raises(ValueError, match="bytes"):
        _kernels.sparse_values(x, 1, 11, np.array([3, 4]), 2, 0.0, 0.5, out, False)
    with pytest.raises(ValueError, match="start"):
        _kernels.geometric_positions(np.ones(4), 4, 1.0, 10.0, 0.5)
    with pytest.raises(ValueError, match="format"):
        _kernels.geometric_positions(np.ones(4, np.float32), 4, 1.0, 10.0, -1.0)
    acc = np.zeros(5)
    # not strictly increasing, or out of range: refused (False) and acc untouched
    for idx in (np.array([1, 1]), np.array([2, 5])):
        assert not _kernels.scatter_add(acc, 5, idx, 2, out, 1, 0.0, 1.0)
        assert not acc.any()


# ---- the fixed-order row sums behind mu="mean" (the same bits on every machine) ----


def _fixed_order_row_sums(X):
    """The order documented in ``_validate.row_sums``, written out: entry j in float64 lane
    j mod 16 (lanes from +0, entries of a lane in increasing j), then the lanes halved
    (a_l + a_{l+h} for l < h, h = 8, 4, 2, 1). Padding with +0 changes no lane: a lane that starts
    at +0 is never -0. The blocks are added one after another in an explicit loop (numpy's own
    reductions may be pairwise)."""
    n, d = X.shape
    m = -(-d // 16)
    padded = np.zeros((n, 16 * m))
    padded[:, :d] = X  # exact widening
    blocks = padded.reshape(n, m, 16)
    lanes = np.zeros((n, 16))
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(m):
            lanes = lanes + blocks[:, k]
        for h in (8, 4, 2, 1):
            lanes = lanes[:, :h] + lanes[:, h : 2 * h]
    return lanes[:, 0]


def _assert_same_bits(got, want):
    assert got.dtype == np.float64 and got.shape == want.shape
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
    assert got[finite].tobytes() == want[finite].tobytes()  # also the sign of a zero


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 3, 15, 16, 17, 31, 33, 100, 1000, 2049])
def test_row_sums_follow_the_documented_order(dtype, d):
    g = np.random.default_rng(d)
    span = 4 if dtype == np.float16 else 12  # a wide range of magnitudes: the order matters
    X = (g.standard_normal((5, d)) * 10.0 ** g.integers(-span, span, (5, d))).astype(dtype)
    X[4] = -0.0  # a row of negative zeros sums to +0 (the lanes start at +0)
    got = row_sums(X)
    _assert_same_bits(got, _fixed_order_row_sums(X))
    assert np.signbit(got[4]) == np.False_
    # any layout or byte order: the same sums
    _assert_same_bits(row_sums(np.asfortranarray(X)), got)
    _assert_same_bits(row_sums(X.astype(X.dtype.newbyteorder(">")).view()), got)


def test_row_sums_order_is_the_one_tested():
    # the data above tell orders apart: a plain left-to-right sum gives other bits
    g = np.random.default_rng(1000)
    X = g.standard_normal((5, 1000)) * 10.0 ** g.integers(-12, 12, (5, 1000))
    sequential = np.zeros(5)
    for j in range(X.shape[1]):
        sequential = sequential + X[:, j]
    assert (row_sums(X) != sequential).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sums_of_non_finite_rows(dtype):
    X = np.ones((6, 40), dtype=dtype)
    X[0, 3] = np.nan
    X[1, 39] = np.inf
    X[2, 0] = -np.inf
    X[3, 5], X[3, 21] = np.inf, -np.inf  # same lane: inf + -inf = NaN
    X[4, 5], X[4, 22] = np.inf, -np.inf  # other lanes: NaN when the lanes are combined
    got = row_sums(X)
    _assert_same_bits(got, _fixed_order_row_sums(X))
    assert np.isnan(got[[0, 3, 4]]).all() and got[1] == np.inf and got[2] == -np.inf
    assert got[5] == 40.0
    if dtype == np.float64:  # finite entries whose float64 sum overflows
        big = np.full((1, 33), 1e308)
        assert row_sums(big)[0] == np.inf == _fixed_order_row_sums(big)[0]


def test_row_sums_refuses_other_input():
    with pytest.raises(TypeError, match="float16/32/64"):
        row_sums(np.ones((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="2-D"):
        row_sums(np.ones(3))
    x, out = np.ones((2, 3), np.float32), np.empty(2)
    with pytest.raises(ValueError, match="bytes"):
        _kernels.row_sums(x, 1, 2, 4, out)
    with pytest.raises(ValueError, match="format"):
        _kernels.row_sums(x, 2, 2, 3, out)
    with pytest.raises(ValueError, match="bytes"):
        _kernels.row_sums(x, 1, 2, 3, np.empty(3))
    with pytest.raises(ValueError, match="size"):
        _kernels.row_sums(x, 1, -2, 3, out)
    with pytest.raises(ValueError, match="size"):
        _kernels.row_sums(x, 1, 2**62, 2**3, out)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_mean_centre_is_the_fixed_order_sum_over_d(dtype):
    g = np.random.default_rng(5)
    X = (g.standard_normal((4, 777)) * 10.0 ** g.integers(-3, 3, (4, 777))).astype(dtype)
    want = (_fixed_order_row_sums(X) / 777).astype(dtype).astype(np.float64)
    got = IndependentEncoder(p=0.3, mu="mean").centres(X)
    assert got.tobytes() == want.tobytes()
    if dtype == np.float64:  # the sum overflows: the same order over the values X / d
        B = np.full((2, 20), 1.5e307)
        B[1, ::2] = -1e308
        want = _fixed_order_row_sums(B / 20)
        got = FixedSizeEncoder(k=3, mu="mean").centres(B)
        assert got.tobytes() == want.tobytes() and np.isfinite(got).all()


# In a subprocess per configuration (OpenBLAS reads its thread count and our kernels their
# path at import): the centres and the sha256 of the mu="mean" messages.
MEAN_SCRIPT = r"""
import hashlib, json
import numpy as np
from cvfl_theory import FixedSizeEncoder, IndependentEncoder, _kernels
from cvfl_theory.protocols import SeededSparseProtocol, SparseProtocol
out = {"path": _kernels.path()}
for dt, r in ((np.float32, 32), (np.float64, 64)):
    X = (np.random.default_rng(0).standard_normal((100, 10_000)) * 3 + 0.7).astype(dt)
    for enc in (IndependentEncoder(p=0.01, mu="mean"), FixedSizeEncoder(k=50, mu="mean")):
        e = enc.encode(X, rng=12345)
        h = hashlib.sha256()
        for m in SeededSparseProtocol(r=r).to_bytes(e) + SparseProtocol(r=r).to_bytes(e):
            h.update(len(m).to_bytes(8, "big") + m)
        out[f"{enc!r} {np.dtype(dt).name}"] = [h.hexdigest(), e.centres.tobytes().hex()]
print(json.dumps(out))
"""


def test_mean_messages_do_not_depend_on_blas_threads_or_kernel_path():
    root = Path(__file__).resolve().parents[1]
    base = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "CVFL_KERNEL_PATH")
    }
    configs = [{"OPENBLAS_NUM_THREADS": "1"}, {"OPENBLAS_NUM_THREADS": "2"}]
    configs += [{"CVFL_KERNEL_PATH": p} for p in _kernels.paths()]
    runs = []
    for cfg in configs:
        res = subprocess.run(
            [sys.executable, "-c", MEAN_SCRIPT],
            capture_output=True,
            text=True,
            env={**base, **cfg},
            cwd=root,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        runs.append(json.loads(res.stdout))
    used = [r.pop("path") for r in runs]
    assert used[2:] == _kernels.paths()  # each path was in use where forced
    for cfg, r in zip(configs, runs):
        assert r == runs[0], cfg
    # and the centres are the documented ones
    for dt in (np.float32, np.float64):
        X = (np.random.default_rng(0).standard_normal((100, 10_000)) * 3 + 0.7).astype(dt)
        want = (_fixed_order_row_sums(X) / X.shape[1]).astype(dt).astype(np.float64)
        for key, (_, centres) in runs[1].items():
            if key.endswith(np.dtype(dt).name):
                assert centres == want.tobytes().hex(), key


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_min_centre_of_signed_zeros_is_plus_zero(dtype):
    # numpy's vectorised minimum returns +0 or -0 for a row holding both, depending on the
    # position and on the CPU's SIMD level; the centre is +0 whatever they are
    rows = []
    for d in (1, 2, 3, 8, 17, 64, 1000):
        for zero in (0.0, -0.0):
            for at in (0, d - 1):
                r = np.full(d, -zero)
                r[at] = zero
                rows.append(np.concatenate([r, np.full(1000 - d, 5.0)]))
    X = np.array(rows, dtype=dtype)
    c = IndependentEncoder(p=0.5, mu="min").centres(X)
    assert (c == 0).all() and not np.signbit(c).any()


def test_binary_quantization_refuses_a_range_that_overflows():
    """max - min = inf: the probabilities would be NaN and the top entry never sent."""
    with pytest.raises(ValueError, match="overflows float64"):
        BinaryQuantizationEncoder().encode(np.array([[-1e308, 0.0, 1e308]]), rng=0)


def test_independent_encoder_keeps_its_own_checked_probabilities():
    """Changing the caller's array after construction changes nothing (and p is read-only)."""
    p = np.full((2, 4), 0.5)
    enc = IndependentEncoder(p)
    p[0] = 2.0
    p[1, 0] = np.nan
    assert np.all(enc.p == 0.5) and not enc.p.flags.writeable
    X = np.arange(8.0).reshape(2, 4)
    fresh = IndependentEncoder(np.full((2, 4), 0.5))
    np.testing.assert_array_equal(
        enc.decode(enc.encode(X, rng=3)), fresh.decode(fresh.encode(X, rng=3))
    )


def test_sent_values_are_read_only():
    """A message is what was sent: its values cannot be edited (the counts are cached)."""
    enc = IndependentEncoder(0.5, mu="zero").encode(np.arange(1.0, 9.0).reshape(2, 4), rng=0)
    node = next(m for m in enc.nodes if m.values.size)
    with pytest.raises(ValueError, match="read-only"):
        node.values[0] = 0.0
