import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvfl_theory.bitpack import BitReader, BitWriter


@given(st.lists(st.tuples(st.integers(0, 64), st.lists(st.integers(0, 2**64 - 1), max_size=20))))
def test_uint_fields_round_trip(fields):
    w = BitWriter()
    expected = []
    for width, values in fields:
        vals = [v & ((1 << width) - 1) for v in values] if width else [0] * len(values)
        w.write_uint(np.array(vals, dtype=np.uint64), width)
        expected.append((width, vals))
    assert w.nbits == sum(width * len(v) for width, v in expected)
    data = w.getvalue()
    assert len(data) == (w.nbits + 7) // 8
    r = BitReader(data)
    for width, vals in expected:
        assert r.read_uint(len(vals), width).tolist() == vals


@given(
    st.integers(0, 7),
    st.sampled_from([16, 32, 64]),
    st.lists(st.floats(allow_nan=False, width=16), max_size=10),
)
def test_floats_round_trip_at_any_bit_offset(offset, r, values):
    w = BitWriter()
    w.write_uint([0] * offset, 1)
    w.write_floats(np.array(values, dtype=np.float16), r)
    rd = BitReader(w.getvalue(), start_bit=offset)
    np.testing.assert_array_equal(rd.read_floats(len(values), r), np.array(values, np.float16))


def test_value_too_wide_and_truncation():
    with pytest.raises(ValueError, match="does not fit in 3 bits"):
        BitWriter().write_uint([8], 3)
    with pytest.raises(ValueError, match="truncated"):
        BitReader(b"\x00").read_uint(2, 8)
