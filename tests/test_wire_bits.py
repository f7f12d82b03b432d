"""K3.1 checked by an independent bit count of the real bytes, per protocol and per compressor.

``8 len = payload_bits + framing_bits`` holds by construction, so it cannot fail. Here the
messages are parsed by :mod:`proofs_checks._wire_layout`, written from the documented layouts with
plain integers: the payload region (message minus header, minus CRC, minus < 8 zero padding bits)
must hold exactly the bits K3 prescribes, counted from the encoder output, and every field
read at the prescribed width must equal the encoder output. Then each check is shown to fail on a
mutated wire that writes indices one bit wider.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvfl_theory import (
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from cvfl_theory.bitpack import BitWriter
from cvfl_theory.compressors import HexLatticeQuantizer, Identity, ScalarQuantizer, TopK
from cvfl_theory.protocols import PROTOCOLS, SparseProtocol, applicable_protocols, index_bits
from cvfl_theory.testing.strategies import encoder_problems
from proofs_checks._wire_layout import c5_layout_errors, k3_layout_errors

R_OF = {np.dtype(np.float16): 16, np.dtype(np.float32): 32, np.dtype(np.float64): 64}

ENCODERS = [
    IndependentEncoder(0.3, mu="zero"),
    IndependentEncoder(np.array([[0.2], [0.7], [1.0]]), mu="mean"),
    IndependentEncoder(np.linspace(0.05, 1.0, 37)[None, :].repeat(3, axis=0), mu="mean"),
    FixedSizeEncoder(np.array([1, 5, 37]), mu="zero"),
    BinaryQuantizationEncoder(),
    RotatedBinaryEncoder(rotation_seed=2),
]


@pytest.mark.parametrize("encoder", ENCODERS, ids=repr)
@pytest.mark.parametrize("r", [16, 32, 64])
def test_k3_payload_on_the_wire_is_exactly_beta(encoder, r):
    # d = 37: ceil(log2 d) = 6 is not a byte multiple, so fields straddle byte boundaries
    X = np.random.default_rng(r).normal(size=(3, 37)).astype({16: np.float16}.get(r, np.float64))
    X[0, :5] = 0.0  # entries off S for mu = "zero"
    for seed in range(3):
        encoded = encoder.encode(X, rng=seed)
        for proto in applicable_protocols(encoder, r=r, r_seed=40):
            assert k3_layout_errors(proto, encoded, proto.to_bytes(encoded)) == []


@settings(max_examples=30, deadline=None)
@given(encoder_problems(max_n=3, max_d=40), st.integers(0, 2**32))
def test_k3_payload_on_the_wire_is_exactly_beta_for_any_problem(problem, seed):
    encoder, X = problem
    encoded = encoder.encode(X, rng=seed)
    for proto in applicable_protocols(encoder, r=R_OF[X.dtype]):
        assert k3_layout_errors(proto, encoded, proto.to_bytes(encoded)) == []


def wide_index_write(self, w, m, encoded):
    """SparseProtocol._write_payload with indices one bit wider than ceil(log2 d)."""
    keep = m.values != m.values.dtype.type(m.centre)
    idx, vals = m.support[keep], m.values[keep]
    self._write_centre(w, m, encoded)
    w.write_uint(idx.astype(np.uint64), index_bits(encoded.d) + 1)
    w.write_floats(vals, self.r)
    return int(idx.size)


def test_k3_check_fails_on_a_wire_with_wider_indices(monkeypatch):
    X = np.random.default_rng(0).normal(size=(2, 20)).astype(np.float32)
    encoded = IndependentEncoder(0.5).encode(X, rng=1)
    proto = SparseProtocol(r=32)
    assert k3_layout_errors(proto, encoded, proto.to_bytes(encoded)) == []
    monkeypatch.setattr(SparseProtocol, "_write_payload", wide_index_write)
    msgs = proto.to_bytes(encoded)
    # the identity that holds by construction still holds on the mutated wire ...
    lengths = 8 * np.array([len(m) for m in msgs])
    assert np.array_equal(lengths, proto.payload_bits(encoded) + proto.framing_bits(encoded))
    # ... while the independent count sees the extra bit per index
    errors = k3_layout_errors(proto, encoded, msgs)
    assert len(errors) == 2 and all("payload region" in e for e in errors)


def test_k3_check_fails_on_a_wire_with_swapped_fields(monkeypatch):
    """Same length, fields in another order: caught by reading the fields at their widths."""

    def values_first(self, w, m, encoded):
        keep = m.values != m.values.dtype.type(m.centre)
        self._write_centre(w, m, encoded)
        w.write_floats(m.values[keep], self.r)
        w.write_uint(m.support[keep].astype(np.uint64), index_bits(encoded.d))
        return int(np.count_nonzero(keep))

    X = np.random.default_rng(0).normal(size=(1, 20)).astype(np.float32)
    encoded = IndependentEncoder(0.5).encode(X, rng=1)
    monkeypatch.setattr(SparseProtocol, "_write_payload", values_first)
    errors = k3_layout_errors(SparseProtocol(r=32), encoded, SparseProtocol(r=32).to_bytes(encoded))
    assert errors and "indices or values differ" in errors[0]


COMPRESSORS = [
    (Identity(), (3, 5)),
    (Identity(r=16), (7,)),
    (Identity(r=64), (2, 3)),
    (ScalarQuantizer(1), (3, 7)),
    (ScalarQuantizer(3, range="minmax-tensor"), (4, 9)),
    (ScalarQuantizer(5, range=(-2.0, 2.0), dither=False), (2, 11)),
    (ScalarQuantizer(16, range="minmax-row"), (2, 3)),
    (HexLatticeQuantizer(2, range=(-3.0, 3.0)), (3, 7)),
    (HexLatticeQuantizer(3), (2, 6)),
    (HexLatticeQuantizer(5, range="minmax-tensor"), (3, 5)),
    (HexLatticeQuantizer(1, range=(-3.0, 3.0), dither=False), (2, 5)),
    (TopK(k=2), (3, 40)),  # 6-bit indices
    (TopK(k=3, r=16), (2, 300)),  # 9-bit indices
    (TopK(bits=16), (2, 6)),  # positions as a 6-bit mask
]


@pytest.mark.parametrize("comp,shape", COMPRESSORS, ids=repr)
def test_c5_payload_on_the_wire_is_exactly_as_prescribed(comp, shape):
    x = np.random.default_rng(5).normal(size=shape)
    for seed in range(2):
        c = comp.compress(x, rng=seed)
        assert c5_layout_errors(c, c.to_bytes()) == []


def test_c5_hex_sends_2b_bits_per_pair():
    """C5.3: at most 2^{2b} codewords per pair, and the wire spends exactly 2b bits on a pair."""
    for bits in range(2, 9):
        q = HexLatticeQuantizer(bits, range=(0.0, 1.0))
        assert 2 ** (2 * bits - 1) < q.codebook_size <= 2 ** (2 * bits)
        c = q.compress(np.full((1, 2), 0.5), rng=0)
        assert c5_layout_errors(c, c.to_bytes()) == []


def test_c5_check_fails_on_a_wire_with_wider_indices(monkeypatch):
    """A consistent mutation (index width and payload_bits both one bit larger) round-trips and
    passes the internal length invariant; only the independent count catches it."""
    q = ScalarQuantizer(3, range="minmax-row")
    x = np.random.default_rng(1).normal(size=(2, 5))
    assert c5_layout_errors(q.compress(x, rng=0), q.compress(x, rng=0).to_bytes()) == []
    monkeypatch.setattr(ScalarQuantizer, "_index_bits", property(lambda self: self.bits + 1))
    original = ScalarQuantizer.payload_bits
    monkeypatch.setattr(
        ScalarQuantizer,
        "payload_bits",
        lambda self, shape: original(self, shape) + int(np.prod(shape)),
    )
    c = q.compress(x, rng=0)
    errors = c5_layout_errors(c, c.to_bytes())
    assert errors and "payload region" in errors[0]


def test_c5_topk_check_fails_on_wider_positions(monkeypatch):
    t = TopK(k=2)
    x = np.random.default_rng(2).normal(size=(2, 40))
    original = TopK._index_bits
    monkeypatch.setattr(TopK, "_index_bits", lambda self, P, k: original(self, P, k) + k)

    def write(self, w: BitWriter, data, shape):
        w.write_floats(data["values"].ravel(), self.r)
        w.write_uint(data["idx"].ravel(), (shape[1] - 1).bit_length() + 1)

    monkeypatch.setattr(TopK, "_write_payload", write)
    c = t.compress(x, rng=0)
    errors = c5_layout_errors(c, c.to_bytes())
    assert errors and "payload region" in errors[0]


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_k3_check_fails_on_one_extra_payload_bit(monkeypatch, name):
    """Every protocol: one stray 1 bit after the payload is seen (a longer region, or non-zero
    padding), although the framing identity still holds."""
    cls = PROTOCOLS[name]
    enc = BinaryQuantizationEncoder() if name == "binary" else FixedSizeEncoder(3)
    X = np.random.default_rng(3).normal(size=(2, 16))
    encoded = enc.encode(X, rng=0)
    proto = cls(r=64)
    assert k3_layout_errors(proto, encoded, proto.to_bytes(encoded)) == []
    original = cls._write_payload

    def one_more_bit(self, w, m, e):
        count = original(self, w, m, e)
        w.write_uint([1], 1)
        return count

    monkeypatch.setattr(cls, "_write_payload", one_more_bit)
    msgs = proto.to_bytes(encoded)
    lengths = 8 * np.array([len(m) for m in msgs])
    assert np.array_equal(lengths, proto.payload_bits(encoded) + proto.framing_bits(encoded))
    assert len(k3_layout_errors(proto, encoded, msgs)) == 2
