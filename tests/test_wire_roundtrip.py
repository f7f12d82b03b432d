"""The wire contract (issue 20): ``from_bytes(to_bytes(e), d=e.d)`` returns ``e`` exactly -- the
same dtype, dimensions, centres and decoded vectors :math:`Y_i` -- for every encoder × protocol ×
data dtype the protocol carries exactly (data of at most ``r`` bits), checked with Hypothesis.

What a protocol does not send is not compared: only the seeded sparse protocol carries the
support draw itself (its seed and rate); the others send the vector's non-zero deviations (sparse,
varying length) or the whole vector (naive), from which the same :math:`Y_i` is rebuilt."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cvfl_theory.encoded import decode
from cvfl_theory.protocols import applicable_protocols
from cvfl_theory.testing.strategies import data_matrices, encoders


def assert_same_encoded(a, b, seeded=False, centre=True):
    assert (a.scheme, a.d, a.original_d, np.dtype(a.dtype), a.n, a.centre_sent) == (
        b.scheme,
        b.d,
        b.original_d,
        np.dtype(b.dtype),
        b.n,
        b.centre_sent,
    )
    assert a.rotation_seed == b.rotation_seed
    ya, yb = decode(a), decode(b)
    # the same vectors, value for value (a -0.0 entry equal to a +0.0 centre is not a deviation,
    # K3, so it is rebuilt as the centre: equal, if not the same bits)
    assert ya.dtype == yb.dtype and np.array_equal(ya, yb)
    for ma, mb in zip(a.nodes, b.nodes):
        assert ma.values.dtype == mb.values.dtype == np.dtype(a.dtype)
        if centre:  # the naive protocol sends the whole vector, not its centre
            assert ma.centre == mb.centre
        if seeded:
            assert np.array_equal(ma.support, mb.support)
            assert ma.values.tobytes() == mb.values.tobytes()
            assert ma.seed == mb.seed
            assert ma.rate == mb.rate or (np.isnan(ma.rate) and np.isnan(mb.rate))


@st.composite
def wire_problems(draw):
    X = draw(data_matrices(max_n=4, max_d=9, dtypes=("float16", "float32", "float64")))
    enc = draw(encoders(n=X.shape[0], d=X.shape[1]))
    bits = np.dtype(X.dtype).itemsize * 8
    r = draw(st.sampled_from([w for w in (16, 32, 64) if w >= bits]))
    protos = applicable_protocols(enc, r=r)
    proto = draw(st.sampled_from(protos))
    return enc, proto, X


@settings(max_examples=200, deadline=None)
@given(wire_problems(), st.integers(0, 2**32 - 1))
def test_from_bytes_of_to_bytes_is_the_encoded_message(problem, seed):
    enc, proto, X = problem
    e = enc.encode(X, rng=seed)
    back = proto.from_bytes(proto.to_bytes(e), d=e.d)
    assert_same_encoded(back, e, seeded=proto.name == "seeded-sparse", centre=proto.name != "naive")
    assert back.original_d == X.shape[1]


def test_the_issues_two_examples():
    from cvfl_theory import RotatedBinaryEncoder
    from cvfl_theory.protocols import BinaryProtocol, SparseProtocol

    X = np.array([[1.0, 0.25, -3.0]], dtype=np.float32)
    e = RotatedBinaryEncoder(rotation_seed=5).encode(X, rng=1)
    assert e.d == 4 and e.original_d == 3  # padded for the rotation
    for proto in applicable_protocols(RotatedBinaryEncoder(rotation_seed=5), r=64):
        back = proto.from_bytes(proto.to_bytes(e), d=e.d)  # the padded d is accepted
        naive = proto.name == "naive"
        assert_same_encoded(back, e, centre=not naive)
        assert_same_encoded(proto.from_bytes(proto.to_bytes(e), d=3), e, centre=not naive)
    # the issue's case: rotated binary messages of float32 data over the sparse protocol at r=64
    back = SparseProtocol(r=64).from_bytes(SparseProtocol(r=64).to_bytes(e), d=e.d)
    assert back.dtype == np.float32 and decode(back).dtype == np.float32
    assert_same_encoded(back, e)
    assert (
        BinaryProtocol(r=32).from_bytes(BinaryProtocol(r=32).to_bytes(e), d=e.d).dtype == np.float32
    )
