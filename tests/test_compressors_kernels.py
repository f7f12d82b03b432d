"""The fast compressor kernels: float32 paths, fused roundtrip, torch/numpy block arithmetic.

The float32 kernels (float32 input, dithered scalar with bits <= 8 and dithered hexagonal
quantizers) must keep the error laws of C5.1/C5.2, agree with the float64 kernels up to float32
rounding, and ``roundtrip`` must be bit-identical to ``decompress(compress(x))``.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from cvfl_theory.compressors import Compressed, HexLatticeQuantizer, ScalarQuantizer, TopK, _common

S3 = math.sqrt(3.0)
ALPHA = 1e-3


def kernel_compressors():
    return [
        ScalarQuantizer(3),
        ScalarQuantizer(8),
        ScalarQuantizer(2, range="minmax-tensor"),
        ScalarQuantizer(8, range=(-3.0, 3.0)),
        ScalarQuantizer(12),
        ScalarQuantizer(3, range=(-0.1, 0.7)),  # range not float32: float64 kernel
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


def _float64_kernel(comp, x, seed):
    """Payload and output of the float64 kernel on the float32 data x (same seed)."""
    x64 = x.astype(np.float64)
    c = comp.compress(x64, rng=seed)
    return c.data["idx"], comp.decompress(c)


@pytest.mark.parametrize(
    "comp",
    [
        ScalarQuantizer(3),
        ScalarQuantizer(8, range=(-4.0, 4.0)),
        HexLatticeQuantizer(3),
        HexLatticeQuantizer(6, range="minmax-tensor"),
    ],
    ids=repr,
)
def test_float32_kernel_agrees_with_float64_kernel(comp):
    x = np.random.default_rng(5).standard_normal((512, 64)).astype(np.float32)
    c = comp.compress(x, rng=3)
    idx64, y64 = _float64_kernel(comp, x, 3)
    same = c.data["idx"] == idx64
    assert same.mean() > 1 - 1e-4  # only float32 rounding at cell boundaries differs
    y = comp.decompress(c).astype(np.float64)
    rows = same.all(axis=1)
    scale = np.abs(x).max()
    assert np.max(np.abs(y[rows] - y64[rows])) <= 16 * np.finfo(np.float32).eps * scale


def test_scalar_float32_error_is_uniform_and_independent_of_input():
    lo, hi, bits = -2.0, 3.0, 3
    q = ScalarQuantizer(bits, range=(lo, hi))
    delta = (hi - lo) / (2**bits - 1)
    x = np.random.default_rng(0).uniform(lo, hi, size=(40, 500)).astype(np.float32)
    e = (q.roundtrip(x, rng=1).astype(np.float64) - x).ravel()
    assert np.all(np.abs(e) <= delta / 2 + 8 * np.finfo(np.float32).eps * 3.0)
    assert stats.kstest(e / delta + 0.5, "uniform").pvalue > ALPHA
    assert abs(np.corrcoef(e, x.ravel())[0, 1]) < 5 / math.sqrt(e.size)
    c = np.full((40, 500), 0.123, np.float32)
    e_const = (q.roundtrip(c, rng=2).astype(np.float64) - c).ravel()
    assert stats.ks_2samp(e, e_const).pvalue > ALPHA


@pytest.mark.parametrize("bits", [1, 2, 5, 8])
@pytest.mark.parametrize("rng_mode", ["fixed", "minmax-row"])
def test_scalar_float32_second_moment_monte_carlo(bits, rng_mode):
    x = np.random.default_rng(bits).uniform(-1, 1, size=(20, 50)).astype(np.float32)
    q = ScalarQuantizer(bits, range=(-1.0, 1.0) if rng_mode == "fixed" else "minmax-row")
    errs = np.array(
        [np.sum((q.roundtrip(x, rng=s).astype(np.float64) - x) ** 2) for s in range(200)]
    )
    exact = q.expected_error(x)
    se = errs.std(ddof=1) / math.sqrt(errs.size)
    assert abs(errs.mean() - exact) <= 5 * se


def test_hex_float32_error_uniform_on_the_voronoi_cell():
    q = HexLatticeQuantizer(3, range=(0.0, 1.0))
    a = q.codebook.a
    x = np.random.default_rng(3).uniform(0, 1, size=(50, 400)).astype(np.float32)
    e = q.roundtrip(x, rng=4).astype(np.float64) - x
    ex, ey = e[:, 0::2].ravel(), e[:, 1::2].ravel()
    for t in (0, math.pi / 3, 2 * math.pi / 3):
        assert np.all(np.abs(ex * math.cos(t) + ey * math.sin(t)) <= a / 2 + 1e-6)
    beta = ey / (a * S3 / 2)
    alpha = ex / a - beta / 2
    for c in (np.mod(alpha, 1), np.mod(beta, 1), np.mod(alpha + beta, 1)):
        assert stats.kstest(c, "uniform").pvalue > ALPHA
    for comp, xs in ((ex, x[:, 0::2]), (ey, x[:, 1::2])):
        assert abs(np.corrcoef(comp, xs.ravel())[0, 1]) < 5 / math.sqrt(comp.size)


@pytest.mark.parametrize("bits", [2, 3, 6])
@pytest.mark.parametrize("P", [6, 7])
def test_hex_float32_second_moment_monte_carlo(bits, P):
    q = HexLatticeQuantizer(bits, range=(-2.0, 2.0))
    x = np.random.default_rng(P).uniform(-2, 2, size=(30, P)).astype(np.float32)
    errs = np.array(
        [np.sum((q.roundtrip(x, rng=s).astype(np.float64) - x) ** 2) for s in range(200)]
    )
    exact = q.expected_error(x)
    se = errs.std(ddof=1) / math.sqrt(errs.size)
    assert abs(errs.mean() - exact) <= 5 * se


@pytest.mark.parametrize(
    "comp", [ScalarQuantizer(3), ScalarQuantizer(8), HexLatticeQuantizer(3)], ids=repr
)
def test_block_arithmetic_same_with_and_without_torch(comp, monkeypatch):
    """F32Ops runs per-row broadcasts through torch when loaded: results must not change."""
    x = np.random.default_rng(9).standard_normal((700, 45)).astype(np.float32)
    c = comp.compress(x, rng=5)
    y, r = comp.decompress(c), comp.roundtrip(x, rng=5)
    monkeypatch.setattr(_common.F32Ops, "__init__", lambda self: setattr(self, "torch", None))
    c2 = comp.compress(x, rng=5)
    assert c2.to_bytes() == c.to_bytes()
    assert np.array_equal(comp.decompress(c2), y)
    assert np.array_equal(comp.roundtrip(x, rng=5), r)


def _topk_reference(x, k):
    """Keep the k largest |x| per row, ties towards the lower column (stable sort)."""
    order = np.argsort(-np.abs(x), axis=1, kind="stable")[:, :k]
    return np.sort(order, axis=1)


@pytest.mark.parametrize("P,k", [(256, 24), (10, 3), (33, 32), (1, 1), (5000, 7)])
def test_topk_selection_matches_reference(P, k):
    rng = np.random.default_rng(P)
    x = rng.standard_normal((40, P)).astype(np.float32)
    x[3] = 1.0  # a row of ties
    x[4, : P // 2] = -2.0
    if P > 2:
        x[5, 1:3] = x[5, 0]  # a few ties
    c = TopK(k=k).compress(x)
    assert np.array_equal(c.data["idx"].astype(np.intp), _topk_reference(x, k))


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


def test_take_blocks_is_the_same_stream():
    blocks = _common.row_blocks(1000, 77)
    s1, s2 = _common.DitherStream(4), _common.DitherStream(4)
    a = s1.take_blocks(blocks[:3], 77)
    b = np.concatenate([s2.take((sl.stop - sl.start, 77)) for sl in blocks[:3]])
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    odd = [slice(0, 3), slice(3, 6)]  # odd sizes: one draw per block
    s1, s2 = _common.DitherStream(4), _common.DitherStream(4)
    a = s1.take_blocks(odd, 5)
    b = np.concatenate([s2.take((3, 5)), s2.take((3, 5))])
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("comp", kernel_compressors(), ids=repr)
def test_strided_and_read_only_inputs(comp):
    base = np.random.default_rng(1).standard_normal((60, 40)).astype(np.float32)
    ref = comp.roundtrip(np.ascontiguousarray(base[::-1, ::2]), rng=3)
    ro = base.copy()
    ro.flags.writeable = False
    assert np.array_equal(comp.roundtrip(base[::-1, ::2], rng=3), ref)
    assert np.array_equal(comp.roundtrip(ro, rng=3), comp.roundtrip(base, rng=3))
