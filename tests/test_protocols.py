"""Protocols (K3): payload bits equal beta(Y_i) for every realisation, the byte format round-trips
bit-exactly, framing is separate, the closed form C matches exact enumeration, and bad bytes or
inapplicable encoders are refused."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvfl_theory import (
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
    decode,
)
from cvfl_theory.protocols import (
    PROTOCOLS,
    BinaryProtocol,
    NaiveProtocol,
    SeededSparseProtocol,
    SparseProtocol,
    VaryingLengthProtocol,
    applicable_protocols,
)
from cvfl_theory.testing.exact import exact_expectation
from cvfl_theory.testing.strategies import encoder_problems

R_OF = {np.dtype(np.float16): 16, np.dtype(np.float32): 32, np.dtype(np.float64): 64}


def beta(proto, encoded):
    """beta(Y_i) of K3, computed from the decoded Y (independently of the protocol)."""
    Y = np.asarray(decode(encoded)) if encoded.rotation_seed is None else None
    d, r = encoded.d, proto.r
    rbar = r if encoded.centre_sent else 0
    ceil_log2_d = int(np.ceil(np.log2(d))) if d > 1 else 0
    out = []
    for i, m in enumerate(encoded.nodes):
        if Y is not None:
            s_i = int(np.sum(Y[i] != np.float64(m.centre).astype(encoded.dtype)))
        else:
            s_i = int(np.sum(m.values != m.centre))
        out.append(
            {
                "naive": d * r,
                "varying-length": rbar + d + r * s_i,
                "sparse": rbar + (ceil_log2_d + r) * s_i,
                "seeded-sparse": rbar + proto.r_seed + r * m.support.size,
                "binary": 2 * r + d,
            }[proto.name]
        )
    return np.array(out)


def applicable(encoder):
    """Protocol classes that can carry the encoder's messages, by the K3 "usable with" column."""
    return [type(p) for p in applicable_protocols(encoder)]


@settings(max_examples=40)
@given(encoder_problems(max_n=4, max_d=40), st.integers(0, 2**32))
def test_payload_bits_and_byte_round_trip(problem, seed):
    encoder, X = problem
    encoded = encoder.encode(X, rng=seed)
    r = R_OF[X.dtype]
    for cls in applicable(encoder):
        proto = cls(r=r)
        payload = proto.payload_bits(encoded)
        np.testing.assert_array_equal(payload, beta(proto, encoded))
        msgs = proto.to_bytes(encoded)
        framing = proto.framing_bits(encoded)
        lengths = 8 * np.array([len(m) for m in msgs])
        np.testing.assert_array_equal(lengths, payload + framing)
        back = proto.from_bytes(msgs, X.shape[1])
        np.testing.assert_array_equal(np.asarray(decode(back)), np.asarray(decode(encoded)))
        # the same Y may be represented with another centre (binary: lo/hi), so the average is
        # equal up to the round-off of a different summation order
        back_avg = np.asarray(encoder.average(back), dtype=np.float64)
        avg = np.asarray(encoder.average(encoded), dtype=np.float64)
        scale = max(1.0, float(np.abs(np.asarray(decode(encoded), dtype=np.float64)).max()))
        tol = 4 * X.shape[0] * np.finfo(back.dtype).eps * scale
        np.testing.assert_allclose(back_avg, avg, rtol=0, atol=tol)


@pytest.mark.parametrize(
    "encoder",
    [
        IndependentEncoder(np.array([[0.3], [0.8]]), mu="zero"),
        IndependentEncoder(np.array([[0.3, 0.9, 0.5, 1.0], [0.2, 0.4, 0.6, 0.8]]), mu="mean"),
        FixedSizeEncoder(np.array([1, 3]), mu="mean"),
        BinaryQuantizationEncoder(),
        RotatedBinaryEncoder(rotation_seed=4),
    ],
    ids=repr,
)
def test_expected_bits_equals_exact_enumeration(encoder):
    X = np.array([[1.0, 0.0, -2.0, 3.5], [0.25, 0.25, 4.0, -1.0]], dtype=np.float32)
    for cls in applicable(encoder):
        proto = cls(r=32)
        exact = exact_expectation(encoder, X, lambda e, pr=proto: pr.payload_bits(e).sum())
        assert proto.expected_bits(encoder, X) == pytest.approx(float(exact), rel=1e-12)


def test_seeded_protocol_regenerates_support_and_sends_no_indices():
    X = np.random.default_rng(0).normal(size=(3, 1000)).astype(np.float32)
    enc = IndependentEncoder(0.05, mu="zero")
    e = enc.encode(X, rng=3)
    proto = SeededSparseProtocol(r=32, r_seed=32)
    msgs = proto.to_bytes(e)
    for m, raw in zip(e.nodes, msgs):
        assert 8 * len(raw) - proto.framing_bits(e)[0] >= 0
        assert proto.payload_bits(e)[e.nodes.index(m)] == 32 + 32 * m.support.size
    back = proto.from_bytes(msgs, 1000)
    for a, b in zip(e.nodes, back.nodes):
        np.testing.assert_array_equal(a.support, b.support)


def test_inapplicable_protocols_are_refused():
    X = np.random.default_rng(0).normal(size=(2, 6))
    with pytest.raises(ValueError, match="at most two values"):
        BinaryProtocol().to_bytes(IndependentEncoder(0.5).encode(X, rng=0))
    with pytest.raises(ValueError, match="two values"):
        BinaryProtocol().expected_bits(IndependentEncoder(0.5), X)
    full_p = IndependentEncoder(np.full((2, 6), 0.5))
    with pytest.raises(ValueError, match="regenerable from a seed"):
        SeededSparseProtocol().to_bytes(full_p.encode(X, rng=0))
    with pytest.raises(ValueError, match="one value per node"):
        SeededSparseProtocol().expected_bits(full_p, X)
    with pytest.raises(ValueError, match="r_seed=8"):
        SeededSparseProtocol(r_seed=8).to_bytes(IndependentEncoder(0.5).encode(X, rng=0))


@pytest.mark.parametrize("r", [8, 24, 128, "32", True])
def test_unsupported_r(r):
    with pytest.raises((ValueError, TypeError), match="r must be one of 16, 32, 64"):
        SparseProtocol(r=r)


@pytest.mark.parametrize("r_seed", [0, 65, 2.5])
def test_unsupported_r_seed(r_seed):
    with pytest.raises((ValueError, TypeError), match=r"r_seed must be .*\[1, 64\]"):
        SeededSparseProtocol(r_seed=r_seed)


@pytest.mark.parametrize("cls", list(PROTOCOLS.values()), ids=lambda c: c.name)
def test_truncated_corrupted_and_foreign_bytes(cls):
    X = np.random.default_rng(1).normal(size=(2, 20)).astype(np.float32)
    enc = BinaryQuantizationEncoder() if cls is BinaryProtocol else FixedSizeEncoder(5)
    proto = cls(r=32)
    msgs = proto.to_bytes(enc.encode(X, rng=0))
    good = msgs[0]
    for bad in (good[:-1], good[: len(good) // 2], b"", good + b"\x00"):
        with pytest.raises(ValueError):
            proto.from_bytes([bad, msgs[1]], 20)
    for pos in (0, 5, len(good) // 2, len(good) - 5):
        flipped = bytearray(good)
        flipped[pos] ^= 0x10
        with pytest.raises(ValueError):
            proto.from_bytes([bytes(flipped), msgs[1]], 20)
    with pytest.raises(ValueError, match="d=21"):
        proto.from_bytes(msgs, 21)
    other = NaiveProtocol(r=32) if cls is not NaiveProtocol else VaryingLengthProtocol(r=32)
    with pytest.raises(ValueError, match="protocol"):
        other.from_bytes(msgs, 20)
    with pytest.raises(TypeError, match="list of bytes"):
        proto.from_bytes(good, 20)
    with pytest.raises(ValueError, match="empty"):
        proto.from_bytes([], 20)


def test_wider_data_is_rounded_to_r_bits():
    X = np.array([[1.0 + 2**-40, 2.0]])
    proto = NaiveProtocol(r=32)
    enc = IndependentEncoder(1.0, mu="zero")
    back = proto.from_bytes(proto.to_bytes(enc.encode(X, rng=0)), 2)
    # the values are the wire's float32 roundings, in the sender's dtype (the header says it)
    np.testing.assert_array_equal(decode(back), X.astype(np.float32).astype(np.float64))
    assert decode(back).dtype == np.float64
