"""Every public entry of cvfl_theory refuses bad input clearly, before any work (issue 10).

One parametrized table per defect class: overflow of the wire's float width, fixed ranges too wide
or too narrow for float64, the MSE overflow refused alike by the encoders and the optimiser, a bool
taken as a number, a list taken as data or shape, arrays of the wrong kind, torch tensors without
values. Each case names the exception and a regex that must name the argument; the accepted
neighbours of each refusal are tested too, with values computed here, so no check is vacuous.
"""

import math

import numpy as np
import pytest

from cvfl_theory import (
    BinaryProtocol,
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    NaiveProtocol,
    RotatedBinaryEncoder,
    SeededSparseProtocol,
    SparseProtocol,
    VaryingLengthProtocol,
    mse_bounds,
    optimal_probabilities,
    plot_tradeoff,
    table1,
    tradeoff_curve,
    verify,
    water_fill,
)
from cvfl_theory.bounds import hex_round_error, scalar_round_error
from cvfl_theory.compressors import (
    HexLatticeQuantizer,
    Identity,
    ScalarQuantizer,
    TopK,
    compare_with_published,
)
from cvfl_theory.lattice import A2BoxCodebook, a2_nearest, box_codebook_count, cell_area
from cvfl_theory.optimal import budget_from_bits, centre_step, low_budget_solution
from cvfl_theory.rotation import fwht, padded_dimension, random_signs
from cvfl_theory.sampling import bernoulli_support, k_subset_support

X = np.arange(1.0, 7.0).reshape(2, 3)
BIG = np.array([[1e6, 2.0, 3.0]])  # finite, beyond float16 (max 65504)


def check(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ----------------------------------------------------------------- overflow of the wire's float
def _encoded(X_, enc=None):
    return (enc or IndependentEncoder(1.0, mu="zero")).encode(X_, rng=0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: Identity(r=16).compress(BIG),
        lambda: Identity(r=16).roundtrip(BIG),
        lambda: Identity(r=16).expected_error(BIG),
        lambda: TopK(k=1, r=16).compress(BIG),
        lambda: Identity(r=32).compress(np.array([1e39])),
        lambda: SparseProtocol(r=16).to_bytes(_encoded(BIG)),
        lambda: NaiveProtocol(r=16).to_bytes(_encoded(BIG)),
        lambda: VaryingLengthProtocol(r=16).to_bytes(_encoded(BIG)),
        lambda: SeededSparseProtocol(r=16).to_bytes(_encoded(BIG)),
        lambda: BinaryProtocol(r=16).to_bytes(_encoded(BIG, BinaryQuantizationEncoder())),
        # the values are fine, the centre (the node mean, sent as a float) is not
        lambda: SparseProtocol(r=16).to_bytes(
            _encoded(np.array([[7e4, 6e4]]), IndependentEncoder(1.0))
        ),
    ],
)
def test_float_width_overflow_is_refused(call):
    check(call, ValueError, r"overflows (16|32)-bit floats: the representable range is \[-")


def test_float_width_overflow_message_names_value_and_range():
    check(lambda: Identity(r=16).compress(BIG), ValueError, r"x has a value 1000000\.0 .*65504")


def test_largest_finite_float16_still_goes_through():
    x = np.array([[65504.0, -65504.0, 1.0]])
    assert np.array_equal(Identity(r=16).roundtrip(x), x)
    assert np.array_equal(TopK(k=3, r=16).roundtrip(x), x)
    enc = _encoded(x)
    back = SparseProtocol(r=16).from_bytes(SparseProtocol(r=16).to_bytes(enc), d=3)
    assert np.array_equal(np.sort(back.nodes[0].values), np.sort(x[0]))


# ----------------------------------------------------------------- fixed quantizer ranges
@pytest.mark.parametrize("cls", [ScalarQuantizer, HexLatticeQuantizer])
@pytest.mark.parametrize(
    "rng_, exc, match",
    [
        ((-1e308, 1e308), ValueError, r"range .* is too wide: hi - lo = inf"),
        ((-1e200, 1e200), ValueError, r"too wide: hi - lo = 2e\+200 must be at most 1\.34"),
        ((0.0, 1e-310), ValueError, r"range .* is too narrow for bits=2"),
        ((1.0, 1.0 + 1e-15), ValueError, r"too narrow for bits=2"),
        ((False, True), TypeError, r"range lo must be a real number"),
        (("0", "1"), TypeError, r"range lo must be a real number"),
        ((0.0, 1.0, 2.0), ValueError, r"range \(lo, hi\) must have 2 numbers"),
        ((1.0, 0.0), ValueError, r"lo < hi"),
        ((0.0, math.nan), ValueError, r"range hi must be in"),
        (5, TypeError, r"range must be \(lo, hi\)"),
    ],
)
def test_bad_fixed_ranges(cls, rng_, exc, match):
    check(lambda: cls(2, range=rng_), exc, match)


@pytest.mark.parametrize("cls", [ScalarQuantizer, HexLatticeQuantizer])
@pytest.mark.parametrize("lo, hi", [(0.0, 1e-120), (-1e150, 1e150), (1e6, 1e6 + 1.0)])
def test_extreme_but_allowed_ranges_reconstruct_inside_the_dithered_range(cls, lo, hi):
    q = cls(3, range=(lo, hi))
    x = np.linspace(lo, hi, 40).reshape(4, 10)
    y = q.roundtrip(x, rng=0)
    span = hi - lo
    assert np.isfinite(y).all()
    # dithered reconstructions lie within one cell of the range (a cell is at most the span)
    assert np.all(y >= lo - span) and np.all(y <= hi + span)
    err = q.expected_error(x)
    assert math.isfinite(err) and err > 0


# ----------------------------------------------------------------- one refusal for MSE overflow
HUGE = np.array([[1e200, -1e200, 0.0]])
MSE_OVERFLOW = r"X is too large: \(X - mu\)\^2 overflows float64 at index \(0, [01]\)"


@pytest.mark.parametrize(
    "call",
    [
        lambda: IndependentEncoder(0.5).mse(HUGE),
        lambda: FixedSizeEncoder(1).mse(HUGE),
        lambda: optimal_probabilities(HUGE, budget=1.0),
        lambda: optimal_probabilities(HUGE, budget=1.0, optimize_centres=True),
        lambda: mse_bounds(HUGE, budget=1.0),
        lambda: low_budget_solution(HUGE, budget=1.0),
        lambda: centre_step(HUGE, np.full((1, 3), 0.5), np.zeros(1)),
    ],
)
def test_mse_overflow_is_refused_alike_by_encoders_and_optimiser(call):
    check(call, ValueError, MSE_OVERFLOW)


def test_water_fill_refuses_weights_whose_squares_overflow():
    check(lambda: water_fill(np.array([1e200, 1.0]), 1.0), ValueError, r"a is too large")


def test_large_but_finite_mse_agrees_between_encoder_and_optimiser():
    # |X - mu| = 1e150: the squares are finite; K1.2 by hand with p = 1/2, n = 1
    Xl = np.array([[1e150, -1e150]])
    expected = (1 / 0.5 - 1) * 2e300
    assert IndependentEncoder(0.5, mu="zero").mse(Xl) == pytest.approx(expected)
    res = optimal_probabilities(Xl, budget=1.0, mu="zero")
    assert res.mse == pytest.approx(expected)  # the optimum here is p = 1/2 on both entries


# ----------------------------------------------------------------- bool is not a number
@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: IndependentEncoder(p=True), TypeError, "p must be a number"),
        (lambda: IndependentEncoder(p=np.bool_(True)), TypeError, "p must be a number"),
        (lambda: IndependentEncoder(p=np.array([[True]])), TypeError, "p must be a number"),
        (lambda: IndependentEncoder(0.5, mu=True), TypeError, "mu must be a number"),
        (lambda: FixedSizeEncoder(k=True), TypeError, "k must be an integer"),
        (lambda: RotatedBinaryEncoder(rotation_seed=True), TypeError, "rotation_seed must be"),
        (lambda: optimal_probabilities(X, budget=True), TypeError, "budget must be"),
        (lambda: optimal_probabilities(X, bits=True), TypeError, "bits must be a number"),
        (lambda: optimal_probabilities(X, budget=1.0, r=True), TypeError, "r .* must be"),
        (
            lambda: optimal_probabilities(X, budget=1.0, optimize_centres=1),
            TypeError,
            "optimize_centres must be True or False",
        ),
        (lambda: optimal_probabilities(X, budget=1.0, max_iter=True), TypeError, "max_iter must"),
        (lambda: optimal_probabilities(X, budget=1.0, eps=True), TypeError, "eps must be"),
        (lambda: optimal_probabilities(X, budget=1.0, caps=True), TypeError, "caps must"),
        (lambda: budget_from_bits(1e3, n=True, d=4), TypeError, "n must be an integer"),
        (lambda: budget_from_bits(1e3, n=2, d=4, centre_sent=1), TypeError, "centre_sent must"),
        (lambda: water_fill(np.array([1.0, 2.0]), True), TypeError, "budget must be"),
        (lambda: ScalarQuantizer(bits=True), TypeError, "bits must be an integer"),
        (lambda: ScalarQuantizer(2, dither=1), TypeError, "dither must be True or False"),
        (lambda: TopK(k=True), TypeError, "k must be an integer"),
        (lambda: TopK(bits=True), TypeError, "bits must be an integer"),
        (lambda: Identity(r=True), TypeError, "r must be one of 16, 32, 64"),
        (lambda: Identity(r=16.0), TypeError, "r must be one of 16, 32, 64"),
        (lambda: TopK(k=1, r=32.5), TypeError, "r must be one of 16, 32, 64"),
        (lambda: SparseProtocol(r=True), TypeError, "r must be one of 16, 32, 64"),
        (lambda: SparseProtocol(r_seed=True), TypeError, "r_seed must be an integer"),
        (
            lambda: verify(IndependentEncoder(0.5), X, trials=10, z=True),
            TypeError,
            "z .*must be a real number",
        ),
        (
            lambda: verify(IndependentEncoder(0.5), X, trials=10, alpha=True),
            TypeError,
            "alpha must be a real number",
        ),
        (lambda: table1(4, 16, r=True), TypeError, "r must be one of"),
        (lambda: table1(4, 16, p_general=[True]), TypeError, "p_general entries must be"),
        (lambda: tradeoff_curve(X, [True]), TypeError, "bits_grid entries must be a real"),
        (lambda: cell_area(True), TypeError, "a .*must be a real number"),
        (lambda: A2BoxCodebook.for_bits(True), TypeError, "bits must be an integer"),
        (lambda: bernoulli_support(0, True, 5), TypeError, "p must be a real number"),
        (lambda: random_signs(True, 4), TypeError, "seed must be an integer"),
    ],
)
def test_bool_is_not_a_number(call, exc, match):
    check(call, exc, match)


def test_numpy_integers_are_numbers():
    # the accepted neighbours of the bool refusals: numpy integers and floats
    assert ScalarQuantizer(np.int64(2)).bits == 2
    assert IndependentEncoder(p=np.float32(0.5)).mse(X) == pytest.approx(
        (1 / 0.5 - 1) * (2 * (1 + 0 + 1)) / 4
    )
    assert SparseProtocol(r=np.int32(16)).r == 16


# ----------------------------------------------------------------- list versus shape
@pytest.mark.parametrize(
    "call",
    [
        lambda: ScalarQuantizer(2, range=(0.0, 3.0)).expected_error([4, 5]),
        lambda: ScalarQuantizer(2, range=(0.0, 3.0)).published_bound([4, 5]),
        lambda: ScalarQuantizer(2).steps([4.0, 5.0]),
        lambda: HexLatticeQuantizer(2, range=(0.0, 1.0)).expected_error([4, 5]),
        lambda: HexLatticeQuantizer(2).cell_areas([[1.0, 2.0]]),
        lambda: TopK(k=1).expected_error([4, 5]),
        lambda: Identity().published_bound([4, 5]),
    ],
)
def test_a_list_is_neither_data_nor_shape(call):
    check(call, TypeError, r"x_or_shape is a list .* ambiguous: pass the data as a numpy array")


def test_tuple_is_a_shape_and_array_is_data():
    q = ScalarQuantizer(2, range=(0.0, 3.0))  # step 1: error 1/12 per component
    assert q.expected_error((4, 5)) == pytest.approx(20 / 12)
    assert q.expected_error((5,)) == pytest.approx(5 / 12)
    # data [4, 5] lie outside [0, 3]: the clipping distances 1 and 2 add 1 + 4
    assert q.expected_error(np.array([4.0, 5.0])) == pytest.approx(2 / 12 + 5)


# ----------------------------------------------------------------- arrays of the wrong kind
BAD_ARRAYS = [
    (np.array([[1.0, None]], dtype=object), TypeError, "must hold real numbers"),
    (np.array([[1 + 2j, 0]]), TypeError, "must hold real numbers"),
    (np.array([[True, False]]), TypeError, "must hold real numbers"),
    (np.array([["1.0"]]), TypeError, "must hold real numbers"),
    (np.float64(3.0), ValueError, "ndim=0"),
    (np.ones((2, 2, 2)), ValueError, "ndim=3"),
    (np.ones((0, 3)), ValueError, "empty|n >= 1"),
    (np.array([[1.0, np.nan]]), ValueError, r"must be finite; found nan at index \(0, 1\)"),
    (np.array([[np.inf, 1.0]]), ValueError, r"must be finite; found inf"),
    (np.ma.masked_array([[1.0, 2.0]], mask=[[0, 1]]), TypeError, "masked array"),
    ([[1.0, 2.0], [3.0]], TypeError, "rectangular nested list"),
]


def check_named(call, exc, match, name):
    """``call`` raises ``exc`` whose message names the argument first and matches ``match``."""
    with pytest.raises(exc, match=match) as info:
        call()
    assert str(info.value).startswith(f"{name} "), str(info.value)


@pytest.mark.parametrize("arr, exc, match", BAD_ARRAYS)
def test_encoders_refuse_bad_arrays(arr, exc, match):
    enc = IndependentEncoder(0.5)
    check_named(lambda: enc.encode(arr, rng=0), exc, match, "X")
    check_named(lambda: enc.mse(arr), exc, match, "X")
    check_named(lambda: optimal_probabilities(arr, budget=1.0), exc, match, "X")


@pytest.mark.parametrize("arr, exc, match", BAD_ARRAYS)
def test_compressors_refuse_bad_arrays(arr, exc, match):
    for comp in (ScalarQuantizer(2), HexLatticeQuantizer(2), TopK(k=1), Identity()):
        check_named(lambda: comp.compress(arr, rng=0), exc, match, "x")


def test_integer_arrays_are_float64_data():
    ints = np.array([[1, 5, -2], [0, 3, 9]])
    a = IndependentEncoder(0.5).encode(ints, rng=3)
    b = IndependentEncoder(0.5).encode(ints.astype(np.float64), rng=3)
    assert all(np.array_equal(ma.values, mb.values) for ma, mb in zip(a.nodes, b.nodes))
    assert a.dtype == np.float64


def test_torch_tensors_without_values_or_of_a_foreign_kind():
    torch = pytest.importorskip("torch")
    meta = torch.ones(2, 3, device="meta")
    check(lambda: IndependentEncoder(0.5).encode(meta), ValueError, "X is a tensor on the 'meta'")
    check(lambda: ScalarQuantizer(2).compress(meta), ValueError, "x is a tensor on the 'meta'")
    sparse = torch.ones(2, 3).to_sparse()
    check(lambda: ScalarQuantizer(2).compress(sparse), TypeError, "x must be a dense tensor")
    check(
        lambda: IndependentEncoder(0.5).encode(torch.ones(2, 2, dtype=torch.complex64)),
        TypeError,
        "real",
    )
    check(lambda: Identity().compress(torch.ones(2, dtype=torch.bool)), TypeError, "real numbers")
    check(lambda: IndependentEncoder(torch.tensor(True)), TypeError, "p must be a number")


def test_tensor_requiring_grad_is_detached_not_refused():
    # documented choice (cvfl_theory._backend): compression is never differentiated
    torch = pytest.importorskip("torch")
    x = torch.tensor([[1.0, -2.0, 3.0]], requires_grad=True)
    y = Identity().roundtrip(x)
    assert not y.requires_grad and torch.equal(y, x.detach())


# ----------------------------------------------------------------- other arguments
@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: verify("not an encoder", X, trials=10), TypeError, "encoder must be an Encoder"),
        (
            lambda: verify(IndependentEncoder(0.5), X, trials=10, protocols=[1]),
            TypeError,
            "protocols must be a list of Protocol",
        ),
        (lambda: SparseProtocol().to_bytes("msg"), TypeError, "encoded must be an Encoded"),
        (lambda: SparseProtocol().payload_bits(None), TypeError, "encoded must be an Encoded"),
        (lambda: SparseProtocol().expected_bits("enc", X), TypeError, "encoder must be"),
        (
            lambda: IndependentEncoder(0.5).encode_with_supports(X, [[0.5], [1]]),
            TypeError,
            r"supports\[0\] must be a 1-D array of integer indices",
        ),
        (
            lambda: IndependentEncoder(0.5).encode_with_supports(X, [[0], [3]]),
            ValueError,
            r"supports\[1\] indices must lie in \[0, 2\]",
        ),
        (lambda: centre_step(X, np.full((2, 3), 1.5), np.zeros(2)), ValueError, "p must lie"),
        (lambda: table1(4, 16, trials=1), ValueError, r"trials must be in \[2,"),
        (lambda: tradeoff_curve(X, "1000"), TypeError, "bits_grid must be a sequence"),
        (lambda: tradeoff_curve(X, [1e3], methods="uniform"), TypeError, "methods must be"),
        (lambda: optimal_probabilities(X, budget=1.0, eps=0.0), ValueError, r"eps must be in"),
        (lambda: optimal_probabilities(X, budget=1.0, rtol=-1.0), ValueError, "rtol must be in"),
        (lambda: compare_with_published(ScalarQuantizer(2), X, trials=1), ValueError, "trials"),
        (lambda: box_codebook_count(1e-9), ValueError, r"a = 1e-09 is too small"),
        (lambda: a2_nearest(np.zeros(2), np.zeros(2), a=0.0), ValueError, r"a .*must be in"),
        (lambda: a2_nearest(np.array([np.nan]), np.zeros(1), 1.0), ValueError, "x must be finite"),
        (lambda: A2BoxCodebook.for_bits(9), ValueError, r"bits must be in \[1, 8\]"),
        (lambda: fwht(np.ones(4)), ValueError, "X must be 2-D"),
        (lambda: padded_dimension(0), ValueError, r"d must be in \[1,"),
        (lambda: bernoulli_support(0, 1.5, 5), ValueError, r"p must be in \(0, 1\]"),
        (lambda: k_subset_support(0, 0, 5), ValueError, r"k must be in \[1,"),
        (lambda: scalar_round_error(2, -2, 3, 1.0), ValueError, r"B must be in \[1,"),
        (lambda: scalar_round_error(2, 2, 3, True), TypeError, "span must be a real number"),
        (lambda: hex_round_error(2, 2, 3, math.nan), ValueError, r"span must be in \(0, inf\)"),
        (lambda: plot_tradeoff("table"), TypeError, "table must be the Table of tradeoff_curve"),
    ],
)
def test_other_arguments(call, exc, match):
    check(call, exc, match)


def test_rotation_overflowing_float16_is_refused():
    # HDX of a float16 row (6e4, 6e4): (6e4 + 6e4)/sqrt(2) = 8.5e4 > 65504 for one of the signs
    X16 = np.array([[6e4, 6e4], [6e4, -6e4]], dtype=np.float16)
    check(lambda: RotatedBinaryEncoder(0).encode(X16, rng=0), ValueError, "too large for float16")


def test_random_signs_are_the_seeds_draws_and_the_callers_own_copy():
    # the cached vector is shared: a caller writing to its signs must not change the next call's
    from cvfl_theory.sampling import node_generator

    for d in (5, 70_000):  # cached, and too long to be cached (over 2**16)
        expect = node_generator(7).integers(0, 2, size=d) * 2.0 - 1.0
        s = random_signs(7, d)
        assert np.array_equal(s, expect) and s.flags.writeable
        s[:] = 0.0
        assert np.array_equal(random_signs(7, d), expect)


def test_big_endian_input_takes_the_native_path():
    be = X.astype(">f4")
    a = FixedSizeEncoder(2).encode(be, rng=1)
    b = FixedSizeEncoder(2).encode(X.astype(np.float32), rng=1)
    assert a.dtype == np.float32
    assert SparseProtocol(r=32).to_bytes(a) == SparseProtocol(r=32).to_bytes(b)
