"""Same values and same ``rng`` give the same bits, whatever the layout or dtype path (issue 10).

Each example draws values and a *view spec* — a strided slice with positive or negative steps and
an offset into a larger buffer, optionally of a transposed buffer or of a Fortran-ordered one — and
writes the values through the view. The view and ``np.ascontiguousarray(view)`` hold the same
values, so every encoder (K1, K2, K5.1, K5.2), the optimiser (K6) and every compressor (C5) must
produce identical messages and identical wire bytes for both. Dtype paths with the same values
(non-native byte order, integer arrays) must match the native float path too, and non-contiguous
torch tensors their contiguous copies.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvfl_theory import (
    BinaryProtocol,
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
    SeededSparseProtocol,
    SparseProtocol,
    optimal_probabilities,
)
from cvfl_theory.compressors import HexLatticeQuantizer, Identity, ScalarQuantizer, TopK


@st.composite
def values(draw, dtypes=(np.float32, np.float64)):
    """An ``(n, d)`` array of finite values: normal draws at a drawn scale, some rounded (ties)."""
    n = draw(st.integers(1, 5))
    d = draw(st.integers(1, 13))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = 10.0 ** draw(st.integers(-3, 3))
    dtype = draw(st.sampled_from(dtypes))
    vals = np.random.default_rng(seed).standard_normal((n, d)) * scale
    if draw(st.booleans()):  # ties and exact zeros: top-k tie-breaking, X == mu entries
        vals = np.round(vals / scale) * scale
    return vals.astype(dtype)


@st.composite
def view_specs(draw):
    """``(row step, column step, flip rows, flip columns, offset, transposed, fortran)``."""
    return (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
        draw(st.booleans()),
        draw(st.booleans()),
        draw(st.integers(0, 2)),
        draw(st.booleans()),
        draw(st.booleans()),
    )


def make_view(vals, spec):
    """A non-contiguous view into a larger junk-filled buffer that holds exactly ``vals``."""
    rs, cs, flip_r, flip_c, off, transposed, fortran = spec
    n, d = vals.shape
    rows, cols = off + n * rs, off + d * cs
    shape = (cols, rows) if transposed else (rows, cols)
    buf = np.full(shape, -7.25, dtype=vals.dtype, order="F" if fortran else "C")
    base = buf.T if transposed else buf
    view = base[off::rs, off::cs][:n, :d]
    if flip_r:
        view = view[::-1]
    if flip_c:
        view = view[:, ::-1]
    view[...] = vals
    assert np.array_equal(view, vals)
    return view


def assert_same_encoded(a, b):
    assert (a.scheme, a.d, a.dtype, a.n, a.centre_sent) == (
        b.scheme,
        b.d,
        b.dtype,
        b.n,
        b.centre_sent,
    )
    for ma, mb in zip(a.nodes, b.nodes):
        assert np.array_equal(ma.support, mb.support)
        assert ma.values.dtype == mb.values.dtype
        assert ma.values.tobytes() == mb.values.tobytes()
        assert (ma.centre, ma.seed) == (mb.centre, mb.seed)
        assert ma.rate == mb.rate or (np.isnan(ma.rate) and np.isnan(mb.rate))


def encoders_and_protocols(shape, r):
    n, d = shape
    p_full = np.linspace(0.2, 1.0, n * d).reshape(n, d)
    return [
        (IndependentEncoder(0.4), [SparseProtocol(r=r), SeededSparseProtocol(r=r)]),
        (IndependentEncoder(p_full, mu="zero"), [SparseProtocol(r=r)]),
        (FixedSizeEncoder(max(1, d // 2)), [SparseProtocol(r=r), SeededSparseProtocol(r=r)]),
        (BinaryQuantizationEncoder(), [BinaryProtocol(r=r)]),
        (RotatedBinaryEncoder(rotation_seed=3), [BinaryProtocol(r=r)]),
    ]


def check_encoders(x, ref):
    """Every encoder gives ``x`` and ``ref`` the same message and the same wire bytes."""
    r = 32 if "float32" in str(ref.dtype) else 64
    for enc, protos in encoders_and_protocols(ref.shape, r):
        ea, eb = enc.encode(x, rng=11), enc.encode(ref, rng=11)
        assert_same_encoded(ea, eb)
        for proto in protos:
            assert proto.to_bytes(ea) == proto.to_bytes(eb), (enc, proto)
        assert enc.mse(x) == enc.mse(ref)


COMPRESSORS = [
    ScalarQuantizer(3),
    ScalarQuantizer(2, range="minmax-tensor"),
    ScalarQuantizer(4, range=(-2.0, 2.0)),
    HexLatticeQuantizer(3),
    HexLatticeQuantizer(2, range=(-1.0, 1.0)),
    TopK(k=2),
    Identity(),
]


def check_compressors(x, ref):
    for comp in COMPRESSORS:
        if isinstance(comp, TopK) and ref.shape[-1] < 2:
            continue
        assert comp.compress(x, rng=5).to_bytes() == comp.compress(ref, rng=5).to_bytes(), comp
        out_a, out_b = comp.roundtrip(x, rng=5), comp.roundtrip(ref, rng=5)
        assert np.asarray(out_a).tobytes() == np.asarray(out_b).tobytes(), comp


@settings(max_examples=25)
@given(vals=values(), spec=view_specs())
def test_views_encode_to_the_same_bits(vals, spec):
    view = make_view(vals, spec)
    ref = np.ascontiguousarray(view)
    check_encoders(view, ref)
    res_v = optimal_probabilities(view, budget=0.5 * vals.size)
    res_c = optimal_probabilities(ref, budget=0.5 * vals.size)
    assert res_v.p.tobytes() == res_c.p.tobytes() and res_v.mu.tobytes() == res_c.mu.tobytes()
    assert res_v.mse == res_c.mse


@settings(max_examples=25)
@given(vals=values(), spec=view_specs(), vector=st.booleans())
def test_views_compress_to_the_same_bits(vals, spec, vector):
    view = make_view(vals, spec)
    if vector:  # a strided 1-D view, shape (P,)
        view = view[0]
    check_compressors(view, np.ascontiguousarray(view))


@settings(max_examples=15)
@given(vals=values())
def test_dtype_paths_with_the_same_values_give_the_same_bits(vals):
    # non-native byte order: the same values as the native dtype
    swapped = vals.astype(vals.dtype.newbyteorder("S"))
    check_encoders(swapped, vals)
    check_compressors(swapped, vals)
    # integer data are float64 data with the same values
    ints = np.round(vals.astype(np.float64) * 8).astype(np.int64)
    check_encoders(ints, ints.astype(np.float64))
    check_compressors(ints, ints.astype(np.float64))
    # float32 values given as float64: the compressors (float64 arithmetic for every input dtype)
    # send the same payload; only the header's dtype code differs
    v32 = vals.astype(np.float32)
    for comp in COMPRESSORS:
        if isinstance(comp, TopK) and v32.shape[-1] < 2:
            continue
        a, b = comp.compress(v32, rng=5).data, comp.compress(v32.astype(np.float64), rng=5).data
        assert all(a[k].tobytes() == b[k].tobytes() for k in a), comp


def test_float32_values_give_the_same_supports_and_seeds_in_float64():
    # values representable in float32: the random part (seeds, supports) never depends on dtype
    vals = np.random.default_rng(0).standard_normal((3, 9)).astype(np.float32)
    a = FixedSizeEncoder(4).encode(vals, rng=3)
    b = FixedSizeEncoder(4).encode(vals.astype(np.float64), rng=3)
    for ma, mb in zip(a.nodes, b.nodes):
        assert np.array_equal(ma.support, mb.support) and ma.seed == mb.seed


@settings(max_examples=10)
@given(vals=values(), spec=view_specs())
def test_non_contiguous_torch_tensors(vals, spec):
    torch = pytest.importorskip("torch")
    # torch has no negative strides: the same view spec without flips, shared with a tensor
    tv = torch.from_numpy(make_view(vals, (*spec[:2], False, False, *spec[4:])))
    ref = torch.from_numpy(np.ascontiguousarray(vals))
    assert torch.equal(tv, ref)
    check_encoders(tv, ref)
    for comp in COMPRESSORS:
        if isinstance(comp, TopK) and vals.shape[-1] < 2:
            continue
        ca, cb = comp.compress(tv, rng=5), comp.compress(ref, rng=5)
        assert ca.to_bytes() == cb.to_bytes(), comp
        # the numpy and torch paths carry the same payload (headers differ by the torch flag)
        cn = comp.compress(vals, rng=5)
        assert all(ca.data[k].tobytes() == cn.data[k].tobytes() for k in cn.data), comp
        assert torch.equal(comp.roundtrip(tv, rng=5), comp.roundtrip(ref, rng=5)), comp


def test_issue_examples_strided_views():
    # the two views named in the issue, with the same rng: same values and same wire bytes
    X = np.random.default_rng(1).standard_normal((40, 300))
    for view in (X[:, ::2], X[::-1, ::-1], np.asfortranarray(X), X.T[:50, :30]):
        check_encoders(view, np.ascontiguousarray(view))
        check_compressors(view, np.ascontiguousarray(view))
