"""Compressors of C5: laws of the error, exact bit counts, wire format, backends, bad input."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from cvfl_theory.compressors import (
    Compressed,
    HexLatticeQuantizer,
    Identity,
    ScalarQuantizer,
    TopK,
    compare_with_published,
)

S3 = math.sqrt(3.0)
ALPHA = 1e-3  # KS significance level (fixed seeds: deterministic)


def all_compressors():
    return [
        Identity(),
        ScalarQuantizer(3),
        ScalarQuantizer(5, range="minmax-tensor"),
        ScalarQuantizer(2, range=(-3.0, 3.0)),
        ScalarQuantizer(4, dither=False),
        HexLatticeQuantizer(3),
        HexLatticeQuantizer(2, range=(-3.0, 3.0)),
        HexLatticeQuantizer(1, dither=False),
        TopK(k=3),
        TopK(bits=4),
    ]


# ---------------------------------------------------------------- interface, kinds and parity
@pytest.mark.parametrize("comp", all_compressors(), ids=repr)
@pytest.mark.parametrize("shape", [(7,), (5, 9), (1, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_roundtrip_keeps_kind_dtype_shape(comp, shape, dtype, backend):
    x = np.random.default_rng(0).normal(size=shape).astype(dtype)
    xt = backend(x)
    y = comp.roundtrip(xt, rng=3)
    assert type(y) is type(xt)
    assert tuple(y.shape) == shape
    assert str(y.dtype).split(".")[-1] == np.dtype(dtype).name
    assert np.all(np.isfinite(np.asarray(y)))


@pytest.mark.parametrize("comp", all_compressors(), ids=repr)
def test_numpy_torch_parity(comp):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).normal(size=(6, 10)).astype(np.float32)
    a = comp.roundtrip(x, rng=11)
    b = comp.roundtrip(torch.from_numpy(x.copy()), rng=11).numpy()
    np.testing.assert_array_equal(a, b)


def test_same_seed_same_bits_different_seed_different_bits():
    q = ScalarQuantizer(4)
    x = np.random.default_rng(2).normal(size=(4, 50))
    assert q.compress(x, rng=5).to_bytes() == q.compress(x, rng=5).to_bytes()
    assert q.compress(x, rng=5).to_bytes() != q.compress(x, rng=6).to_bytes()


def test_no_autograd_and_input_untouched():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 8, requires_grad=True)
    before = x.detach().clone()
    y = ScalarQuantizer(3).roundtrip(x, rng=0)
    assert not y.requires_grad
    assert torch.equal(x.detach(), before)


# ---------------------------------------------------------------- exact bit counts and wire format
def expected_payload(comp, B, P):
    """Bit counts written out from the definitions (independent of payload_bits)."""
    if isinstance(comp, Identity):
        return 32 * B * P
    if isinstance(comp, ScalarQuantizer):
        rng_bits = {"minmax-row": 64 * B, "minmax-tensor": 64}.get(comp.range, 0)
        return comp.bits * B * P + rng_bits
    if isinstance(comp, HexLatticeQuantizer):
        rng_bits = {"minmax-row": 64 * B, "minmax-tensor": 64}.get(comp.range, 0)
        return B * ((P + 1) // 2) * math.ceil(math.log2(comp.codebook_size)) + rng_bits
    k = comp.k if comp.k is not None else max(1, P * comp.bits // 32)
    index_bits = k * math.ceil(math.log2(P)) if P > 1 else 0
    return B * (32 * k + min(P, index_bits))


@pytest.mark.parametrize("comp", all_compressors(), ids=repr)
@given(B=st.integers(1, 6), P=st.integers(4, 40), seed=st.integers(0, 2**32))
def test_wire_roundtrip_and_exact_payload(comp, B, P, seed):
    x = np.random.default_rng(seed).normal(size=(B, P))
    c = comp.compress(x, rng=seed)
    assert c.payload_bits == comp.payload_bits((B, P)) == expected_payload(comp, B, P)
    data = c.to_bytes()
    assert 8 * len(data) == c.payload_bits + c.framing_bits
    c2 = Compressed.from_bytes(data)
    assert c2.compressor == comp and c2.shape == (B, P) and c2.seed == c.seed
    np.testing.assert_array_equal(comp.decompress(c2), comp.decompress(c))


@pytest.mark.parametrize("comp", all_compressors(), ids=repr)
def test_framing_does_not_grow_with_payload(comp):
    """Header + CRC are fixed width: framing differs between shapes only by byte padding."""
    f = [
        comp.compress(np.ones((B, P)) + np.arange(P), rng=0).framing_bits
        for B, P in [(1, 8), (3, 17), (9, 33)]
    ]
    assert max(f) - min(f) <= 7


def test_corrupted_or_truncated_bytes_are_refused():
    c = ScalarQuantizer(3).compress(np.random.default_rng(0).normal(size=(4, 9)), rng=1)
    data = bytearray(c.to_bytes())
    with pytest.raises(ValueError):
        Compressed.from_bytes(bytes(data[:-3]))
    with pytest.raises(ValueError):
        Compressed.from_bytes(bytes(data[: len(data) // 2]))
    data[len(data) // 2] ^= 0x10
    with pytest.raises(ValueError, match="CRC"):
        Compressed.from_bytes(bytes(data))
    with pytest.raises(ValueError):
        Compressed.from_bytes(b"")
    with pytest.raises(TypeError):
        Compressed.from_bytes("not bytes")


def test_decompress_refuses_foreign_message():
    c = ScalarQuantizer(3).compress(np.ones((2, 4)), rng=0)
    with pytest.raises(ValueError, match="produced by"):
        ScalarQuantizer(4).decompress(c)


# ---------------------------------------------------------------- scalar quantizer (C5.1)
def test_scalar_levels_and_step():
    q = ScalarQuantizer(3, range=(-1.0, 2.5))
    assert q.step == pytest.approx(3.5 / 7)
    assert ScalarQuantizer(3).step is None
    # no dither: the nearest of the 8 levels lo + k * step, computed here directly
    x = np.linspace(-1, 2.5, 101)
    levels = -1 + np.arange(8) * 3.5 / 7
    nearest = levels[np.argmin(np.abs(x[:, None] - levels[None, :]), axis=1)]
    got = ScalarQuantizer(3, range=(-1.0, 2.5), dither=False).roundtrip(x)
    np.testing.assert_allclose(got, nearest, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scalar_dither_error_is_uniform_and_independent_of_input(dtype):
    lo, hi, bits = -2.0, 3.0, 3
    q = ScalarQuantizer(bits, range=(lo, hi))
    delta = (hi - lo) / (2**bits - 1)
    x = np.random.default_rng(0).uniform(lo, hi, size=(40, 500)).astype(dtype)
    e = (q.roundtrip(x, rng=1).astype(np.float64) - x).ravel()
    # float32 output: one rounding of values up to 3 in size on top of the exact error
    slack = delta / 2 * 1e-9 if dtype == np.float64 else 8 * np.finfo(np.float32).eps * 3.0
    assert np.all(np.abs(e) <= delta / 2 + slack)
    assert stats.kstest(e / delta + 0.5, "uniform").pvalue > ALPHA
    r = np.corrcoef(e, x.ravel())[0, 1]
    assert abs(r) < 5 / math.sqrt(e.size)  # 5 SE of a correlation under independence
    # same law for a constant input (input-independence): two-sample KS
    c = np.full((40, 500), 0.123, dtype)
    e_const = (q.roundtrip(c, rng=2).astype(np.float64) - c).ravel()
    assert stats.ks_2samp(e, e_const).pvalue > ALPHA


@pytest.mark.parametrize("bits", [1, 2, 5, 8, 12])
@pytest.mark.parametrize("rng_mode", ["fixed", "minmax-row"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scalar_second_moment_monte_carlo(bits, rng_mode, dtype):
    lo, hi = -1.0, 1.0
    q = ScalarQuantizer(bits, range=(lo, hi) if rng_mode == "fixed" else "minmax-row")
    x = np.random.default_rng(bits).uniform(lo, hi, size=(20, 50)).astype(dtype)
    errs = np.array(
        [np.sum((q.roundtrip(x, rng=s).astype(np.float64) - x) ** 2) for s in range(200)]
    )
    exact = q.expected_error(x)
    se = errs.std(ddof=1) / math.sqrt(errs.size)
    assert abs(errs.mean() - exact) <= 5 * se
    if rng_mode == "fixed":
        law = x.size * ((hi - lo) / (2**bits - 1)) ** 2 / 12  # Delta^2 / 12 per component
        assert exact == pytest.approx(law, rel=1e-12)
        assert q.expected_error((20, 50)) == pytest.approx(law, rel=1e-12)


def test_scalar_minmax_row_sends_ranges_and_handles_constant_rows():
    x = np.vstack([np.full(10, 3.25), np.linspace(-1, 1, 10)]).astype(np.float32)
    q = ScalarQuantizer(2)
    c = q.compress(x, rng=0)
    np.testing.assert_array_equal(c.data["lo"], [3.25, -1.0])
    y = q.decompress(c)
    np.testing.assert_array_equal(y[0], x[0])  # constant row: exact
    steps = q.steps(x)
    assert steps[0] == 0 and steps[1] == pytest.approx(2 / 3)
    assert q.expected_error(x) == pytest.approx(10 * (2 / 3) ** 2 / 12, rel=1e-6)
    with pytest.raises(ValueError, match="depends on the data"):
        q.expected_error((2, 10))


def test_scalar_level_count_effect_vs_published():
    q = ScalarQuantizer(2, range=(0.0, 1.0))
    assert q.expected_error((3, 7)) / q.published_bound((3, 7)) == pytest.approx(16 / 9)


def test_fixed_range_clipping_is_counted_or_refused():
    x = np.array([[-5.0, 0.0, 0.5, 7.0]])
    q = ScalarQuantizer(4, range=(-1.0, 1.0))
    c = q.compress(x, rng=0)
    assert c.n_clipped == 2
    assert Compressed.from_bytes(c.to_bytes()).n_clipped == 2
    # exact error includes the squared clipping distances (4^2 + 6^2) plus the dither noise
    assert q.expected_error(x) == pytest.approx(16 + 36 + 4 * (2 / 15) ** 2 / 12)
    with pytest.raises(ValueError, match="outside the fixed range"):
        ScalarQuantizer(4, range=(-1.0, 1.0), out_of_range="raise").compress(x)
    h = HexLatticeQuantizer(3, range=(-1.0, 1.0))
    assert h.compress(x, rng=0).n_clipped == 2


# ---------------------------------------------------------------- hexagonal lattice (C5.2, C5.3)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hex_error_uniform_on_the_voronoi_cell(dtype):
    q = HexLatticeQuantizer(3, range=(0.0, 1.0))
    a = q.codebook.a  # data span is 1, so lattice units are data units
    x = np.random.default_rng(3).uniform(0, 1, size=(50, 400)).astype(dtype)
    e = q.roundtrip(x, rng=4).astype(np.float64) - x
    ex, ey = e[:, 0::2].ravel(), e[:, 1::2].ravel()
    # inside the hexagon |e . n_k| <= a/2 for normals at 0, 60, 120 degrees (plus the float32
    # rounding of the output)
    slack = a / 2 * 1e-9 if dtype == np.float64 else 1e-6
    for t in (0, math.pi / 3, 2 * math.pi / 3):
        assert np.all(np.abs(ex * math.cos(t) + ey * math.sin(t)) <= a / 2 + slack)
    # uniform on the cell <=> lattice coordinates mod 1 uniform on [0, 1)^2
    beta = ey / (a * S3 / 2)
    alpha = ex / a - beta / 2
    for c in (np.mod(alpha, 1), np.mod(beta, 1), np.mod(alpha + beta, 1)):
        assert stats.kstest(c, "uniform").pvalue > ALPHA
    for comp, xs in ((ex, x[:, 0::2]), (ey, x[:, 1::2])):
        assert abs(np.corrcoef(comp, xs.ravel())[0, 1]) < 5 / math.sqrt(comp.size)


@pytest.mark.parametrize("bits", [2, 3, 6])
@pytest.mark.parametrize("P", [6, 7])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hex_second_moment_monte_carlo(bits, P, dtype):
    q = HexLatticeQuantizer(bits, range=(-2.0, 2.0))
    V = q.codebook.a**2 * S3 / 2 * 16  # area of the cell scaled by the squared span 4^2
    assert q.cell_area == pytest.approx(V)
    x = np.random.default_rng(P).uniform(-2, 2, size=(30, P)).astype(dtype)
    errs = np.array(
        [np.sum((q.roundtrip(x, rng=s).astype(np.float64) - x) ** 2) for s in range(200)]
    )
    exact = 30 * P * 5 * V / (36 * S3)  # 5V/(18 sqrt 3) per pair, half per component
    se = errs.std(ddof=1) / math.sqrt(errs.size)
    assert abs(errs.mean() - exact) <= 5 * se
    assert q.expected_error(x) == pytest.approx(exact, rel=1e-12)
    assert q.expected_error(x) / q.published_bound(x) == pytest.approx(10 / (3 * S3))


@pytest.mark.parametrize("bits", range(1, 9))
def test_hex_codebook_within_budget(bits):
    dither = bits > 1
    q = HexLatticeQuantizer(bits, dither=dither)
    assert q.codebook_size <= 4**bits
    assert q.index_bits == math.ceil(math.log2(q.codebook_size)) <= 2 * bits


def test_hex_without_dither_is_nearest_codeword():
    q = HexLatticeQuantizer(4, range=(0.0, 1.0), dither=False)
    x = np.random.default_rng(5).uniform(0, 1, size=(20, 10))
    y = q.roundtrip(x)
    cx, cy = (v + 0.5 for v in q.codebook.points())
    for comp_x, comp_y, out_x, out_y in [(x[:, 0::2], x[:, 1::2], y[:, 0::2], y[:, 1::2])]:
        d = (comp_x.ravel()[:, None] - cx) ** 2 + (comp_y.ravel()[:, None] - cy) ** 2
        best = np.argmin(d, axis=1)
        np.testing.assert_allclose(out_x.ravel(), cx[best], atol=1e-12)
        np.testing.assert_allclose(out_y.ravel(), cy[best], atol=1e-12)


# ---------------------------------------------------------------- top-k (C5.4)
@given(B=st.integers(1, 5), P=st.integers(1, 30), kfrac=st.floats(0, 1), seed=st.integers(0, 99))
def test_topk_error_is_dropped_energy(B, P, kfrac, seed):
    k = max(1, min(P, round(kfrac * P)))
    x = np.random.default_rng(seed).normal(size=(B, P)).astype(np.float32)
    y = TopK(k=k).roundtrip(x)
    x64 = x.astype(np.float64)
    dropped = np.sort(x64**2, axis=1)[:, : P - k].sum()
    assert np.sum((y - x64) ** 2) == pytest.approx(dropped, rel=1e-12, abs=1e-30)
    assert TopK(k=k).expected_error(x) == pytest.approx(dropped, rel=1e-12, abs=1e-30)
    rows = np.sum((y - x64) ** 2, axis=1)
    assert np.all(rows <= (1 - k / P) * np.sum(x64**2, axis=1) * (1 + 1e-12) + 1e-30)
    assert np.all(np.count_nonzero(y, axis=1) <= k)


def test_topk_ties_keep_exactly_k():
    x = np.array([[1.0, -1.0, 1.0, 1.0, 0.5]])
    y = TopK(k=2).roundtrip(x)
    np.testing.assert_array_equal(y, [[1.0, -1.0, 0, 0, 0]])


def test_topk_bits_and_accountings():
    t = TopK(bits=3)
    assert t.k_for(256) == 24 and t.k_for(10) == 1 and t.k_for(100) == 9
    B, P, k = 4, 256, 24
    assert t.payload_bits((B, P), accounting="paper") == B * k * 32
    assert t.payload_bits((B, P)) == B * (k * 32 + min(P, k * 8))
    assert t.payload_bits((B, P), accounting="entropy") == B * (
        k * 32 + math.ceil(math.log2(math.comb(P, k)))
    )
    with pytest.raises(ValueError, match="accounting"):
        t.payload_bits((B, P), accounting="magic")


def test_topk_published_bound():
    x = np.array([[3.0, 4.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert TopK(k=1).published_bound(x) == pytest.approx(2 * 0.75 * 25)


# ---------------------------------------------------------------- identity
def test_identity():
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    assert np.array_equal(Identity().roundtrip(x), x)
    assert Identity().payload_bits((3, 5)) == 480
    assert Identity().expected_error(x) == 0.0
    x64 = np.array([0.1])
    assert Identity().expected_error(x64) == pytest.approx((np.float32(0.1) - 0.1) ** 2)


# ---------------------------------------------------------------- report
def test_compare_with_published_shows_both_findings():
    x = np.random.default_rng(0).uniform(-1, 1, size=(10, 20))
    rh = compare_with_published(HexLatticeQuantizer(3, range=(-1, 1)), x, trials=100, rng=0)
    assert rh.ratio == pytest.approx(10 / (3 * S3))
    assert abs(rh.z_score) < 5 and not rh.published_holds
    rs = compare_with_published(ScalarQuantizer(2, range=(-1, 1)), x, trials=100, rng=0)
    assert rs.ratio == pytest.approx(16 / 9)
    assert abs(rs.z_score) < 5
    rt = compare_with_published(TopK(k=5), x, trials=2, rng=0)
    assert rt.standard_error == pytest.approx(0, abs=1e-12) and rt.published_holds
    assert "exact / published" in str(rh) and "<table>" in rh._repr_html_()


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: ScalarQuantizer(0), ValueError, r"bits must be in \[1, 16\]"),
        (lambda: ScalarQuantizer(17), ValueError, r"bits must be in \[1, 16\]"),
        (lambda: ScalarQuantizer(2.5), TypeError, "bits"),
        (lambda: ScalarQuantizer(3, range=(1.0, 1.0)), ValueError, "lo < hi"),
        (lambda: ScalarQuantizer(3, range=(0.0, float("inf"))), ValueError, "finite"),
        (lambda: ScalarQuantizer(3, range="minmax"), ValueError, "range"),
        (lambda: ScalarQuantizer(3, out_of_range="ignore"), ValueError, "out_of_range"),
        (lambda: HexLatticeQuantizer(9), ValueError, r"bits must be in \[1, 8\]"),
        (lambda: HexLatticeQuantizer(0), ValueError, r"bits must be in \[1, 8\]"),
        (lambda: HexLatticeQuantizer(1), ValueError, "at least 7"),
        (lambda: TopK(k=0), ValueError, "k must be in"),
        (lambda: TopK(), ValueError, "exactly one"),
        (lambda: TopK(k=2, bits=3), ValueError, "exactly one"),
        (lambda: TopK(bits=33), ValueError, r"bits must be in \[1, 32\]"),
        (lambda: Identity(r=8), ValueError, "r must be"),
    ],
)
def test_bad_parameters(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.parametrize("comp", all_compressors(), ids=repr)
def test_bad_inputs(comp):
    with pytest.raises(ValueError, match="empty"):
        comp.compress(np.zeros((0, 4)))
    with pytest.raises(ValueError, match="empty"):
        comp.compress(np.zeros((3, 0)))
    with pytest.raises(ValueError, match="finite"):
        comp.compress(np.array([[1.0, np.nan, 2.0, 3.0]]))
    with pytest.raises(ValueError, match="finite"):
        comp.compress(np.array([1.0, np.inf, 2.0, 3.0]))
    with pytest.raises(ValueError, match="shape"):
        comp.compress(np.zeros((2, 2, 2)))
    with pytest.raises(TypeError, match="real numbers"):
        comp.compress(np.array([[1 + 2j, 3j, 1, 1]]))


def test_topk_k_larger_than_p():
    with pytest.raises(ValueError, match=r"k must be in \[1, P\] = \[1, 4\]"):
        TopK(k=5).compress(np.ones((2, 4)))
    with pytest.raises(ValueError, match="k must be in"):
        TopK(k=5).payload_bits((2, 4))


def test_compare_subcommand(capsys):
    import argparse

    from cvfl_sim.commands import compare

    parser = argparse.ArgumentParser()
    compare.register(parser.add_subparsers())
    args = parser.parse_args(["compare", "--trials", "3", "--batch", "2", "--width", "6"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.count("exact / published") == 3 and "1.925" in out
    bad = parser.parse_args(["compare", "--bits", "0"])
    with pytest.raises(ValueError, match="--bits must be in \\[1, 32\\]"):
        bad.func(bad)


@pytest.mark.parametrize(
    "comp,shape",
    [
        (ScalarQuantizer(16), (3, 1)),
        (HexLatticeQuantizer(8), (2, 1)),
        (HexLatticeQuantizer(2, range="minmax-tensor"), (1,)),
        (TopK(k=1), (1,)),
        (TopK(k=8), (2, 16)),  # positions as a 16-bit mask (16 <= 8 * 4)
        (TopK(k=2), (2, 300)),  # positions as 9-bit indices, uint16 storage
        (Identity(r=16), (2, 3)),
    ],
    ids=repr,
)
def test_small_and_large_shapes_wire_roundtrip(comp, shape):
    x = np.random.default_rng(3).normal(size=shape)
    c = comp.compress(x, rng=9)
    c2 = Compressed.from_bytes(c.to_bytes())
    np.testing.assert_array_equal(c2.decompress(), c.decompress())
    B, P = (1, shape[0]) if len(shape) == 1 else shape
    if isinstance(comp, Identity):
        assert c.payload_bits == 16 * B * P
    else:
        assert c.payload_bits == expected_payload(comp, B, P)


def test_float16_input_keeps_dtype():
    x = np.linspace(-1, 1, 12, dtype=np.float16).reshape(2, 6)
    for comp in (ScalarQuantizer(4), HexLatticeQuantizer(3), TopK(k=2), Identity()):
        y = comp.roundtrip(x, rng=0)
        assert y.dtype == np.float16 and y.shape == (2, 6)


@pytest.mark.parametrize("bits", [1, 3, 8, 16])
@pytest.mark.parametrize("offset", [0.0, 1e6, -3e8])
def test_scalar_extreme_offsets_stay_in_range(bits, offset):
    """Entries at the range ends and far from 0 relative to the span: every index is a level."""
    rng = np.random.default_rng(bits)
    span = 1e-3 * max(1.0, abs(offset)) ** 0.5
    x = offset + span * rng.uniform(0, 1, size=(50, 40))
    x[:, 0] = x.min()
    x[:, 1] = x.max()
    q = ScalarQuantizer(bits, range="minmax-tensor")
    c = q.compress(x, rng=1)
    assert int(c.data["idx"].max()) <= 2**bits - 1
    step = q.steps(x)[0]
    err = np.abs(q.decompress(c) - x)
    # |error| <= step/2 up to float64 round-off of values of size |offset|
    assert err.max() <= step / 2 + 8 * np.finfo(float).eps * (abs(offset) + span)


def test_hex_loses_to_scalar_at_low_rates():
    """The dither margin costs codewords: hex is worse than scalar at b = 2..6 (documented)."""
    shape = (4, 10)
    for bits, lo_ratio, hi_ratio in [(2, 3.4, 3.6), (3, 1.5, 1.6), (8, 0.96, 0.98)]:
        h = HexLatticeQuantizer(bits, range=(0.0, 1.0)).expected_error(shape)
        s = ScalarQuantizer(bits, range=(0.0, 1.0)).expected_error(shape)
        assert lo_ratio < h / s < hi_ratio


@pytest.mark.parametrize("cls", [ScalarQuantizer, HexLatticeQuantizer])
@pytest.mark.parametrize("rng_mode", ["minmax-row", "minmax-tensor", (-0.5, 0.9)])
@pytest.mark.parametrize("dither", [True, False])
def test_expected_row_errors_are_each_rows_error(cls, rng_mode, dither):
    """Per row: the row alone's law (minmax-row), equal shares of one cell, clipping per row."""
    x = np.random.default_rng(3).normal(scale=[[0.1], [0.5], [2.0]], size=(3, 7))
    q = cls(3, range=rng_mode, dither=dither)
    rows = q.expected_row_errors(x)
    assert rows.shape == (3,)
    assert float(np.sum(rows)) == pytest.approx(q.expected_error(x), rel=1e-12)
    if not dither:  # deterministic: each row's measured error
        out = q.roundtrip(x, rng=0)
        np.testing.assert_allclose(rows, np.sum((out - x) ** 2, axis=1), rtol=1e-12)
    elif rng_mode == "minmax-row":  # a row's error depends on that row alone
        for b in range(3):
            assert rows[b] == pytest.approx(q.expected_error(x[b : b + 1]), rel=1e-12)
    elif rng_mode == "minmax-tensor":  # one cell for all rows: each row's, not the tensor's
        # the same cell as a fixed range: the tensor's range, rounded outward to float32 (sent)
        lo, hi = np.float32(x.min()), np.float32(x.max())
        lo = np.nextafter(lo, np.float32(-np.inf)) if lo > x.min() else lo
        hi = np.nextafter(hi, np.float32(np.inf)) if hi < x.max() else hi
        fixed = cls(3, range=(float(lo), float(hi)))
        np.testing.assert_allclose(rows, fixed.expected_error((1, 7)), rtol=1e-12)
    else:  # a fixed range: equal dither errors, plus each row's own clipping
        clip = np.sum((np.clip(x, -0.5, 0.9) - x) ** 2, axis=1)
        assert clip[2] > clip[0] == 0.0
        np.testing.assert_allclose(rows - clip, q.expected_error((1, 7)), rtol=1e-12)


def test_hex_error_law_does_not_depend_on_input():
    q = HexLatticeQuantizer(4, range=(0.0, 1.0))
    x = np.random.default_rng(8).uniform(0, 1, size=(40, 200))
    c = np.full((40, 200), 0.3141)
    e1 = (q.roundtrip(x, rng=1) - x)[:, 0::2].ravel()
    e2 = (q.roundtrip(c, rng=2) - c)[:, 0::2].ravel()
    assert stats.ks_2samp(e1, e2).pvalue > ALPHA


def test_payload_corruption_detected_beyond_crc():
    """A message whose CRC is recomputed after tampering is still checked for valid fields."""
    import zlib

    q = HexLatticeQuantizer(2, range=(0.0, 1.0))  # 13 codewords in 4 bits: 13..15 invalid
    c = q.compress(np.full((1, 2), 0.5), rng=0)
    body = bytearray(c.to_bytes()[:-4])
    # the header is whole bytes, so the 4-bit index is the last byte's high nibble
    body[-1] |= 0xF0
    forged = bytes(body) + zlib.crc32(bytes(body)).to_bytes(4, "big")
    with pytest.raises(ValueError, match="codeword index"):
        Compressed.from_bytes(forged)
