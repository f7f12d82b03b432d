"""The public Hypothesis strategies draw only valid problems: no user test needs to filter.

Health checks stay on (the ``ci`` profile keeps ``filter_too_much``), and no test below uses
``assume`` or ``.filter``: every draw must work as it comes.
"""

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st

from cvfl_theory.compressors import HexLatticeQuantizer, Identity, ScalarQuantizer, TopK
from cvfl_theory.optimal import optimal_probabilities
from cvfl_theory.testing.strategies import (
    bit_budgets,
    budget_problems,
    compressor_problems,
    compressors,
    encoder_problems,
    protocol_problems,
    protocols,
    tensors,
)

ROOT = Path(__file__).resolve().parents[1]


# --- the example of docs/testing.rst (kept identical by test_docs_example_is_this_test) -------
@settings(max_examples=40, deadline=None)
@given(compressor_problems())
def test_every_compressor_roundtrips_every_tensor(problem):
    compressor, x = problem
    y = compressor.decompress(compressor.compress(x, rng=0))
    assert isinstance(y, torch.Tensor)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert torch.isfinite(y).all()


# --- end of the example ------------------------------------------------------------------------


@pytest.mark.parametrize("max_abs", [1e-3, 1e30])
def test_compressor_problems_at_extreme_scales(max_abs):
    # tiny ranges must still be resolved by float64 cells; huge entries must not overflow the
    # float32 reconstruction or a 16-bit wire float
    @settings(max_examples=25, deadline=None)
    @given(compressor_problems(max_abs=max_abs))
    def check(problem):
        compressor, x = problem
        assert compressor.decompress(compressor.compress(x, rng=3)).shape == x.shape

    check()


def _support_size(X, mu):
    """|S| computed here with numpy: entries differing from their centre."""
    X = np.asarray(X)
    centre = {"mean": X.mean(axis=1), "zero": np.zeros(len(X)), "min": X.min(axis=1)}[mu]
    centre = centre.astype(X.dtype)  # the encoder rounds centres to the data's precision
    return int(np.count_nonzero(X.astype(np.float64) != centre.astype(np.float64)[:, None]))


@pytest.mark.parametrize("protocol", ["sparse", "varying-length"])
@pytest.mark.parametrize("mu", ["mean", "zero", "min"])
def test_every_budget_is_spent_exactly(protocol, mu):
    @settings(max_examples=25, deadline=None)
    @given(budget_problems(protocol=protocol, mu=mu))
    def check(problem):
        X, bits = problem
        n, d = X.shape
        r = 32
        # K3/K6 cost terms written out here, independently of the library's conversion
        r_bar = 0 if mu == "zero" else r
        fixed = n * r_bar if protocol == "sparse" else n * (r_bar + d)
        per = (math.ceil(math.log2(d)) + r) if protocol == "sparse" else r
        assert fixed < bits < fixed + per * _support_size(X, mu)
        res = optimal_probabilities(X, bits=bits, protocol=protocol, mu=mu)
        # K6.2: the water level spends the whole budget; the only error is float64 round-off of
        # summing the n*d probabilities
        assert abs(res.expected_bits - bits) <= 4 * X.size * np.finfo(np.float64).eps * bits
        assert not res.saturated

    check()


def test_budgets_reach_both_ends_of_the_feasible_interval():
    X = np.array([[0.0, 1.0, 3.0], [2.0, 2.0, 5.0]])
    # sparse, mu="mean": fixed cost n*r = 64, per entry ceil(log2 3) + 32 = 34; the row means
    # 4/3 and 3 equal no entry, so |S| = 6 and full communication of S costs 64 + 34 * 6
    assert _support_size(X, "mean") == 6
    full = 64 + 34 * 6
    assert 64 < find(bit_budgets(X), lambda c: c < 64 + 0.02 * (full - 64)) < full
    assert 64 < find(bit_budgets(X), lambda c: c > 64 + 0.98 * (full - 64)) < full


def test_budget_strategy_refuses_data_with_no_feasible_budget():
    with pytest.raises(ValueError, match=r"\|S\| = 0"):
        bit_budgets(np.full((2, 3), 7.0), mu="mean")
    with pytest.raises(ValueError, match="min_fraction"):
        bit_budgets(np.eye(2), min_fraction=0.0)
    with pytest.raises(ValueError, match="max_d >= 2"):
        budget_problems(mu="mean", max_d=1)


def test_degenerate_draws_are_repaired_not_rejected():
    # the simplest draw is a zero matrix, which has |S| = 0 for both centres below;
    # budget_problems moves X[0, 0] by 1 instead of rejecting it
    X, bits = find(budget_problems(mu="zero", max_n=1, max_d=1), lambda p: True)
    assert X.tolist() == [[1.0]] and 0 < bits < 33  # 1 entry, 0 fixed bits + 33 per entry
    X, bits = find(budget_problems(mu="mean", max_n=1, max_d=2), lambda p: True)
    assert X.tolist() == [[1.0, 0.0]] and 32 < bits < 32 + 2 * 33


def test_compressor_parameters_are_valid_combinations():
    @settings(max_examples=60, deadline=None)
    @given(compressors(width=5))
    def check(c):
        assert isinstance(c, (ScalarQuantizer, HexLatticeQuantizer, TopK, Identity))
        if isinstance(c, HexLatticeQuantizer) and c.dither:
            assert c.bits >= 2
        if isinstance(c, TopK) and c.k is not None:
            assert 1 <= c.k <= 5

    check()
    # each family and the edge combinations are reachable
    assert find(compressors(), lambda c: isinstance(c, HexLatticeQuantizer) and c.bits == 1)
    assert find(compressors(), lambda c: isinstance(c, HexLatticeQuantizer) and c.dither).bits == 2
    assert find(compressors(width=3), lambda c: isinstance(c, TopK) and c.k == 3)
    assert find(compressors(), lambda c: isinstance(c, Identity) and c.r == 16)
    assert find(compressors(), lambda c: isinstance(c, ScalarQuantizer) and c.range[:1] == "m")


def test_compressor_strategy_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kinds"):
        compressors(kinds=("gzip",))
    with pytest.raises(ValueError, match="max_bits"):
        compressors(kinds=("hexagonal",), max_bits=1)
    with pytest.raises(ValueError, match="float_widths"):
        compressors(float_widths=(8,))
    with pytest.raises(TypeError):
        compressors(5)  # keyword-only
    with pytest.raises(TypeError, match=r"max_abs must be a real number in \[1e-200, 1e\+200\]"):
        compressors(max_abs=True)
    with pytest.raises(ValueError, match=r"width must be in \[1, "):
        compressors(width=0)


def test_shape_and_fraction_arguments_are_checked():
    with pytest.raises(ValueError, match=r"max_dims must be in \[2, "):
        tensors(min_dims=2, max_dims=1)
    with pytest.raises(TypeError, match="min_side must be an integer"):
        tensors(min_side=1.0)
    with pytest.raises(ValueError, match=r"max_fraction must be in \[0.5, 1\)"):
        bit_budgets(np.eye(2), min_fraction=0.5, max_fraction=0.25)


def test_tensors_are_finite_with_the_requested_layout():
    @settings(max_examples=40, deadline=None)
    @given(tensors(non_contiguous=None, max_abs=10.0))
    def check(t):
        assert isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float64)
        assert 1 <= t.ndim <= 2 and all(1 <= s <= 8 for s in t.shape)
        assert torch.isfinite(t).all() and float(t.abs().max()) <= 10.0

    check()
    assert find(tensors(non_contiguous=False), lambda t: True).is_contiguous()
    strided = find(tensors(non_contiguous=True), lambda t: t.shape[-1] >= 2)
    assert not strided.is_contiguous()
    assert find(tensors(dtypes=("float64",)), lambda t: True).dtype == torch.float64


def test_float16_is_drawn_only_for_tensors_it_can_hold():
    @settings(max_examples=30, deadline=None)
    @given(compressor_problems(kinds=("identity",), max_abs=1e5, dtypes=("float64",)))
    def check(problem):
        compressor, x = problem
        if float(x.abs().max()) > 65504:
            assert compressor.r != 16
        compressor.compress(x)

    check()


def test_docs_example_is_this_test():
    """The code block of docs/testing.rst is a test of this file, character for character."""
    text = (ROOT / "docs" / "testing.rst").read_text()
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", text)
    example = [b for b in blocks if "def test_every_compressor_roundtrips_every_tensor" in b]
    assert example, "docs/testing.rst lost its example test"
    code = "\n".join(line[4:] for line in example[0].rstrip().splitlines())
    body = code[code.index("@settings") :]
    assert body in Path(__file__).read_text()


def test_strategies_compose_with_data():
    @settings(max_examples=10, deadline=None)
    @given(st.data())
    def check(data):
        x = data.draw(tensors(min_dims=2, max_side=4))
        c = data.draw(compressors(width=int(x.shape[-1]), kinds=("topk", "scalar")))
        assert c.decompress(c.compress(x, rng=1)).shape == x.shape

    check()


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda s: s.data_matrices(min_n=5, max_n=1), ValueError, "max_n"),
        (lambda s: s.data_matrices(min_d=0), ValueError, "min_d"),
        (lambda s: s.data_matrices(max_abs=-1), ValueError, "max_abs"),
        (lambda s: s.data_matrices(max_abs=float("nan")), ValueError, "max_abs"),
        (lambda s: s.data_matrices(dtypes="float32"), TypeError, "dtypes"),
        (lambda s: s.data_matrices(dtypes=("int8",)), ValueError, "dtypes"),
        (lambda s: s.data_matrices(allow_ties="yes"), TypeError, "allow_ties"),
        (lambda s: s.probabilities(n=2, d=3, min_p=1.5), ValueError, "min_p"),
        (lambda s: s.probabilities(n=2, d=3, min_p=0.0), ValueError, "min_p"),
        (lambda s: s.probabilities(n=0, d=3), ValueError, "n"),
        (lambda s: s.encoders(n=2, d=-1), ValueError, "d"),
        (lambda s: s.centre_specs(n=0), ValueError, "n"),
        (lambda s: s.tensors(max_dims=3), ValueError, "max_dims"),
        (lambda s: s.tensors(dtypes=("float8",)), ValueError, "dtypes"),
        (lambda s: s.budget_problems(r=7), ValueError, "16, 32 or 64"),
        (lambda s: s.budget_problems(protocol="naive"), ValueError, "protocol"),
    ],
)
def test_bad_strategy_arguments_are_refused_when_built(build, error, match):
    """In the strategy's own words, naming the argument, before any draw (issue 20)."""
    import cvfl_theory.testing.strategies as strategies

    with pytest.raises(error, match=match):
        build(strategies)


@settings(max_examples=60, deadline=None)
@given(encoder_problems())
def test_every_drawn_encoder_problem_is_accepted_by_the_package(problem):
    encoder, X = problem
    assert X.ndim == 2 and X.shape[0] >= 1 and X.shape[1] >= 1
    encoded = encoder.encode(X, rng=0)  # never refused: the strategy draws what the package takes
    assert encoded.n == X.shape[0]


@settings(max_examples=40, deadline=None)
@given(protocol_problems(max_n=4, max_d=9))
def test_every_drawn_protocol_carries_its_encoders_messages(problem):
    encoder, protocol, X = problem
    encoded = encoder.encode(X, rng=3)
    bits = protocol.payload_bits(encoded)  # check_applicable never refuses a drawn triple
    assert bits.shape == (X.shape[0],) and (bits > 0).all()
    assert np.isfinite(protocol.expected_bits(encoder, X))


def test_protocol_strategies_reach_every_protocol_and_width():
    from cvfl_theory.protocols import PROTOCOLS

    seen = set()

    @settings(max_examples=200, deadline=None)
    @given(protocols())
    def collect(proto):
        seen.add((proto.name, proto.r))

    collect()
    assert {name for name, _ in seen} == set(PROTOCOLS) and {r for _, r in seen} == {16, 32, 64}
    binary = find(protocol_problems(max_n=3, max_d=4), lambda t: t[1].name == "binary")
    assert type(binary[0]).__name__ in ("BinaryQuantizationEncoder", "RotatedBinaryEncoder")
    with pytest.raises(ValueError, match="names must be some of"):
        protocols(names=["morse"])
